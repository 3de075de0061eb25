"""Script entries shared by the Ollama and Gemini fakes.

A *turn* is what the fake answers to one chat request: a sequence of entries played in
order. Each fake renders the entries in its own wire format (Ollama NDJSON lines,
Gemini SSE chunks), so one test script can describe "say this, then call that tool"
without caring about the bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import orjson
from starlette.requests import Request

from tests.fakes._streaming import header_dict


@dataclass(frozen=True, slots=True)
class Text:
    """A chunk of answer text. ``signature`` (Gemini only) is a thoughtSignature on the part."""

    text: str
    signature: bytes | None = None


@dataclass(frozen=True, slots=True)
class Thinking:
    """A chunk of reasoning: Ollama ``message.thinking``, Gemini a ``thought: true`` part."""

    text: str
    signature: bytes | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call, sent whole in its own chunk.

    ``id`` is sent only when given (real Ollama and the Gemini Developer API usually send
    none). ``signature`` (Gemini only) becomes the part's ``thoughtSignature``.
    """

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    signature: bytes | None = None


@dataclass(frozen=True, slots=True)
class ToolCalls:
    """Several tool calls delivered together in ONE chunk (parallel calls)."""

    calls: Sequence[ToolCall]


@dataclass(frozen=True, slots=True)
class HttpError:
    """Answer the request with this HTTP status before streaming anything.

    Only valid as the first entry of a turn. The body is the provider's error shape
    (Ollama ``{"error": message}``, Google ``{"error": {code, message, status}}``)
    unless ``body`` is given verbatim.
    """

    status: int
    message: str = "fake failure"
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class ErrorChunk:
    """An error reported inside an already-started stream (an ``{"error": ...}`` line/event)."""

    message: str = "fake mid-stream failure"
    code: int = 500


@dataclass(frozen=True, slots=True)
class Drop:
    """Cut the connection mid-stream without finishing the HTTP body."""


@dataclass(frozen=True, slots=True)
class Hold:
    """Stop sending until ``release`` is set (or forever when it is ``None``).

    The fake notices a client that goes away while held and sets its
    ``stream_closed_early`` event, so tests can hold a stream open deterministically.
    """

    release: asyncio.Event | None = None


Entry: TypeAlias = Text | Thinking | ToolCall | ToolCalls | HttpError | ErrorChunk | Drop | Hold


@dataclass(slots=True)
class Turn:
    """A scripted answer: entries plus the usage and stop reason reported at the end.

    ``finish_reason`` defaults to the provider's normal one (Ollama ``stop``,
    Gemini ``STOP``).
    """

    entries: list[Entry] = field(default_factory=list)
    input_tokens: int = 11
    output_tokens: int = 7
    finish_reason: str | None = None


TurnLike: TypeAlias = Turn | Sequence[Entry]
"""A ``Turn`` or a bare list of entries (default usage and stop reason)."""

TurnFactory: TypeAlias = Callable[[dict[str, Any]], TurnLike]
"""Builds the turn from the decoded request body, for conversations that react."""

Script: TypeAlias = Sequence[TurnLike | TurnFactory] | TurnFactory


def as_turn(value: TurnLike) -> Turn:
    if isinstance(value, Turn):
        return value
    return Turn(entries=list(value))


def is_title_request(body: Any) -> bool:
    """Whether a chat request is the service's conversation-title call (``app/history.py``),
    whatever the wire format: its system prompt is ``TITLE_PROMPT``."""
    from app.history import TITLE_PROMPT

    return isinstance(body, dict) and TITLE_PROMPT in orjson.dumps(body).decode()


class TurnQueue:
    """Hands out the next scripted turn for each chat request.

    A callable script answers every request; a sequence is consumed in order and each
    element may itself be a callable. Running out is an error the test will see (the
    fake answers HTTP 500), never a silent default answer.

    The conversation-title call a real model gets after a conversation's first run
    (``AGENT_CONVERSATION_TITLES=auto``) is not one of the run's turns: it is answered by
    ``title_turn`` (settable; an ``HttpError`` there makes it fail) and recorded in
    ``title_requests``, so a script describes the run alone, whenever the title call
    happens to arrive.
    """

    def __init__(self, script: Script) -> None:
        self._factory: TurnFactory | None = script if callable(script) else None
        self._pending: list[TurnLike | TurnFactory] = [] if callable(script) else list(script)
        self.title_turn: TurnLike = [Text("Scripted title")]
        self.title_requests: list[dict[str, Any]] = []

    def add(self, turn: TurnLike | TurnFactory) -> None:
        self._pending.append(turn)

    @property
    def remaining(self) -> int:
        return len(self._pending)

    def next_turn(self, body: dict[str, Any]) -> Turn | None:
        if is_title_request(body):
            self.title_requests.append(body)
            return as_turn(self.title_turn)
        if self._factory is not None:
            return as_turn(self._factory(body))
        if not self._pending:
            return None
        item = self._pending.pop(0)
        if callable(item):
            return as_turn(item(body))
        return as_turn(item)


@dataclass(slots=True)
class RecordedRequest:
    """One request the fake received, with its decoded JSON body."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any
    closed_early: bool = False

    @classmethod
    async def read(cls, request: Request) -> RecordedRequest:
        """Record an incoming request, its body decoded as JSON when it is JSON."""
        raw = await request.body()
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw
        return cls(
            method=request.method,
            path=request.url.path,
            query=dict(request.query_params),
            headers=header_dict(request.headers.raw),
            body=body,
        )
