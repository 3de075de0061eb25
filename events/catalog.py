"""Every event by wire name, and the client's way in: ``parse_event``."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import orjson

from events.base import Event, UnknownEvent
from events.run import (
    Clarification,
    ContentChunk,
    Error,
    Heartbeat,
    MessageComplete,
    MessageStart,
    Response,
    RunResumed,
    RunStarted,
    ToolSelection,
)
from events.tools import (
    ApprovalRequired,
    TableConfigPreview,
    TableConfigValidationError,
    ToolCallResult,
    ToolCallStart,
    WorkflowPreview,
)

__all__ = ["EVENT_TYPES", "AnyEvent", "parse_event"]

#: Every event a run's log can hold, as one closed union: a face translating a run
#: dispatches on it with ``match`` and ends with ``assert_never``, so a new event class
#: that a face does not handle is a type error, not a silent drop.
AnyEvent = (
    RunStarted
    | RunResumed
    | ToolSelection
    | MessageStart
    | ContentChunk
    | ToolCallStart
    | WorkflowPreview
    | TableConfigPreview
    | TableConfigValidationError
    | ToolCallResult
    | ApprovalRequired
    | Clarification
    | Response
    | Error
    | MessageComplete
    | Heartbeat
    | UnknownEvent
)

#: Wire name → class, in the order a run emits them (the documented order).
EVENT_TYPES: Mapping[str, type[Event]] = MappingProxyType(
    {
        cls.name: cls
        for cls in (
            RunStarted,
            RunResumed,
            ToolSelection,
            MessageStart,
            ContentChunk,
            ToolCallStart,
            WorkflowPreview,
            TableConfigPreview,
            TableConfigValidationError,
            ToolCallResult,
            ApprovalRequired,
            Clarification,
            Response,
            Error,
            MessageComplete,
            Heartbeat,
        )
    }
)


def parse_event(name: str, data: str | bytes) -> Event | UnknownEvent:
    """The event named ``name`` with JSON ``data``, decoded and validated.

    An unknown name gives an ``UnknownEvent`` (clients must ignore events they do not
    know, so this never fails on one). A known name whose ``data`` does not fit its
    schema raises ``EventDecodeError``.
    """
    cls = EVENT_TYPES.get(name)
    if cls is not None:
        return cls.from_json(data)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    return UnknownEvent(name=name, data=parsed if isinstance(parsed, dict) else {}, raw=raw)
