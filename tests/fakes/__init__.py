"""Loopback fakes of external services, speaking their real wire formats.

Serve one with ``async with running_fake(fake.app) as base_url:`` and point the real
client library at ``base_url``. Scripts are built from the entries re-exported here.
"""

from __future__ import annotations

from tests.fakes._embedding import EmbedFn, HashingEmbedding
from tests.fakes._script import (
    Drop,
    Entry,
    ErrorChunk,
    Hold,
    HttpError,
    RecordedRequest,
    Script,
    Text,
    Thinking,
    ToolCall,
    ToolCalls,
    Turn,
    TurnFactory,
    TurnLike,
)
from tests.fakes.gemini import FakeGemini
from tests.fakes.ollama import FakeOllama
from tests.support.server import serve_app as running_fake

__all__ = [
    "Drop",
    "EmbedFn",
    "Entry",
    "ErrorChunk",
    "FakeGemini",
    "FakeOllama",
    "HashingEmbedding",
    "Hold",
    "HttpError",
    "RecordedRequest",
    "Script",
    "Text",
    "Thinking",
    "ToolCall",
    "ToolCalls",
    "Turn",
    "TurnFactory",
    "TurnLike",
    "running_fake",
]
