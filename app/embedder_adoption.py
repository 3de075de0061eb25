"""An embedder found after start-up, handed to every part that uses one.

An explicit remote ``AGENT_EMBEDDER`` whose server was down at start-up is probed again
in the background (``app.ops.embedder_recovery``); when it answers, this is what takes
it: the knowledge base (its dense side loaded, then ingest and search switch to it, and
the re-embedding gives vectors to the documents stored meanwhile without them), the
saved web answers' search by meaning, the tool index (built as at start-up: selection
ranks by embeddings once it is ready), and ``/readyz``'s check. The wiring builds the
same parts at start-up from an embedder chosen then; here they are built late, in the
same order, and nothing is swapped twice (the knowledge base refuses a second one).

MCP servers already connected have their tools (offered, never embedded) embedded then
too: they join the tool index as the built-in ones do (``McpRoom.adopt_embedder``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from agenttools.core.registry import ToolRegistry
from app.agent.selector import IndexState
from app.config import Settings
from app.model_choice import choose_embedder
from app.ops.embedder_check import EmbedderCheck
from app.ops.embedder_recovery import EmbedderRecovery
from app.rooms import Rooms, start_backfill, start_keyword_backfill
from app.tool_offer import build_tool_index
from llm.pool import PoolWaits
from toolindex.embedder import Embedder

#: The embedders a failed probe is worth repeating for: a server that may come up.
REMOTE_EMBEDDERS = ("gemini", "ollama", "openai")


@dataclass(slots=True)
class LateEmbedder:
    """What an embedder found late is handed to (the wiring's own objects)."""

    settings: Settings
    rooms: Rooms
    storage: Any
    leader: Any
    index_state: IndexState
    registry: ToolRegistry
    cache_dir: Path | None
    background: list[asyncio.Task[Any]]
    check: EmbedderCheck

    async def adopt(self, embedder: Embedder, reason: str) -> None:
        """The knowledge base first (its vectors' load may fail: then nothing else took
        the embedder, and the probing goes on), then the rest, which cannot fail here."""
        knowledge = self.rooms.knowledge
        if knowledge is not None:
            await knowledge.kb.adopt_embedder(embedder)
            # The leader's job is stopped with the background, before the knowledge base
            # closes (as start-up's is): else its re-embedding ending under it looks like
            # a lost lead and it starts again on the closing knowledge base.
            if (backfill := start_backfill(knowledge.kb, self.leader)) is not None and self.leader is not None:
                self.background.append(backfill)
        keywords = self.rooms.keywords
        if keywords is not None:
            from knowledge.saved_answers import SavedAnswerVectors

            embed_query = knowledge.kb.embed_query if knowledge is not None else None
            keywords.search_by_meaning(
                SavedAnswerVectors(self.storage.external_vectors, embedder, embed_query=embed_query)
            )
            self.background.append(start_keyword_backfill(keywords, self.leader))  # the stored ones' vectors
        on_ready: Callable[[Any], None] | None = None
        if self.rooms.mcp is not None:  # the servers' tools listed meanwhile are embedded now
            self.background.append(self.rooms.mcp.adopt_embedder(embedder))
            on_ready = self.rooms.mcp.base_ready
        self.index_state.embedder_name = embedder.name
        self.background.append(asyncio.create_task(
            build_tool_index(self.index_state, self.registry, embedder, self.cache_dir, on_ready=on_ready),
            name="tool-index-late",
        ))
        self.check.adopt(embedder, reason)


def probe_again(
    settings: Settings, http: httpx.AsyncClient, pool_waits: PoolWaits, late: LateEmbedder, reason: str
) -> EmbedderRecovery | None:
    """The background probing of an explicit remote ``AGENT_EMBEDDER`` that failed at
    start-up (``None`` for any other choice: ``auto`` took what answered, ``none`` and
    ``hashing`` need no server, Gemini without a key or ``local`` without its packages
    wait for a setting, not a server)."""
    kind = settings.embedder
    if kind not in REMOTE_EMBEDDERS or (kind == "gemini" and not settings.gemini_api_key):
        return None
    return EmbedderRecovery(kind, reason, lambda: choose_embedder(settings, http, pool_waits), late.adopt)


__all__ = ["REMOTE_EMBEDDERS", "LateEmbedder", "probe_again"]
