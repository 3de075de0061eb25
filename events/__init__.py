"""The SSE contract: one class per event, the single source for emitters, the OpenAPI
description, the TypeScript types and the Python client.

Emit: ``run.emit(ContentChunk(chunk=text))``. Encode: ``event.name`` / ``event.to_json()``.
Read: ``parse_event(name, data)`` → an event instance, or ``UnknownEvent`` for names this
version does not know. Describe: ``event_data_schemas()`` (wire name → JSON Schema).
"""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from events.base import Event, EventDecodeError, UnknownEvent
from events.catalog import EVENT_TYPES, AnyEvent, parse_event
from events.run import (
    Clarification,
    ContentChunk,
    Discarded,
    Error,
    Heartbeat,
    MessageComplete,
    MessageStart,
    RagScore,
    Response,
    RunEnding,
    RunResumed,
    RunStarted,
    Source,
    TokenUsage,
    ToolSelection,
)
from events.schema import event_data_schemas, event_stream_schema
from events.tools import (
    ApprovalRequired,
    TableConfigPreview,
    TableConfigValidationError,
    ToolCallResult,
    ToolCallStart,
    WorkflowPreview,
)

__all__ = [
    "EVENT_TYPES",
    "UNSET",
    "AnyEvent",
    "ApprovalRequired",
    "Clarification",
    "ContentChunk",
    "Discarded",
    "Error",
    "Event",
    "EventDecodeError",
    "Heartbeat",
    "MessageComplete",
    "MessageStart",
    "RagScore",
    "Response",
    "RunEnding",
    "RunResumed",
    "RunStarted",
    "Source",
    "TableConfigPreview",
    "TableConfigValidationError",
    "TokenUsage",
    "ToolCallResult",
    "ToolCallStart",
    "ToolSelection",
    "UnknownEvent",
    "UnsetType",
    "WorkflowPreview",
    "event_data_schemas",
    "event_stream_schema",
    "parse_event",
]
