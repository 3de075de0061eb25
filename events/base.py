"""The base of every SSE event: a wire name, typed fields, a compact JSON encoding.

Events are ``msgspec`` structs because one library then gives all four things the
contract needs, from one declaration: cheap construction on the hot path (a
``content_chunk`` per token), JSON Schema (draft 2020-12) of the ``data``, typed and
validated decoding for clients, and fields that are *absent* rather than ``null``
(``UNSET``), which is what the wire has always carried for optional keys.

The encoding is orjson's (``orjson.dumps`` of the plain builtins), byte for byte what
clients received before these classes existed: msgspec's own encoder writes large floats
as ``1e16`` where orjson writes ``1e+16``, and free-form fields (a workflow, a table
config) may carry any number. Only ``ContentChunk``, a single string, takes msgspec's
encoder directly: for strings the two are identical (a test checks every code point).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

import msgspec
import orjson

__all__ = ["Event", "EventDecodeError", "UnknownEvent"]


class EventDecodeError(ValueError):
    """The ``data`` of a known event does not match its schema (or is not JSON)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.event_name = name


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """One SSE event. ``name`` is the wire name (``event:``); the fields are ``data``.

    Optional keys are ``UNSET`` by default and then left out of the JSON; keys that are
    always sent (even as ``null``) have no default. Fields whose JSON key is ``name``
    are called ``tool_name`` / ``config_name`` here, since ``name`` is the event's.
    """

    name: ClassVar[str]

    def to_json(self) -> bytes:
        """The compact JSON of ``data``, exactly as it goes on the wire and into the log."""
        return orjson.dumps(msgspec.to_builtins(self))

    def to_dict(self) -> dict[str, Any]:
        """``data`` as plain JSON values (the JSON keys; absent optional keys left out)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out

    @classmethod
    def from_json(cls, data: str | bytes) -> Self:
        """Decode and validate ``data``; unknown keys are ignored (a newer server may add
        some). Raises ``EventDecodeError``."""
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.DecodeError as exc:
            raise EventDecodeError(cls.name, str(exc)) from None

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Validate already-parsed JSON (a dict) into this event. Raises ``EventDecodeError``."""
        try:
            return msgspec.convert(data, type=cls)
        except msgspec.ValidationError as exc:
            raise EventDecodeError(cls.name, str(exc)) from None


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event this version does not know. Clients must ignore what they do not know,
    so it is handed back as read rather than refused: ``data`` is the parsed JSON object
    (``{}`` when it was not one), ``raw`` the text as received."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)
    raw: bytes = b""

    def to_json(self) -> bytes:
        return self.raw if self.raw else orjson.dumps(self.data)
