"""The ``Provider`` protocol every LLM backend implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llm.types import ChatRequest, StreamError, StreamEvent, Usage


@dataclass(frozen=True, slots=True)
class ProviderHealth:
    ok: bool
    detail: str


@runtime_checkable
class Provider(Protocol):
    """Streams one LLM turn as ``StreamEvent`` values.

    Contract:
    - the first event is ``MessageStart``; the last is ``MessageComplete`` or ``StreamError``;
    - failures are yielded as ``StreamError``, never raised (only cancellation propagates);
    - every tool call of the turn is reported (``ToolUseStart`` then ``ToolUseInput``), each
      with a non-empty id unique within the turn;
    - when the consumer stops iterating (``aclose`` / cancellation) the HTTP stream is closed.
    """

    name: str
    model: str

    def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]: ...

    async def health(self) -> ProviderHealth: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Completion:
    """A whole answer read in one response body (no stream): ``text`` is its content,
    ``error`` set instead when the call failed (failures are values, never raised)."""

    text: str = ""
    usage: Usage = Usage()
    error: StreamError | None = None


@runtime_checkable
class Completer(Protocol):
    """A provider that can also answer a small text-only request in one non-streamed
    call (Ollama ``stream: false``, OpenAI-compatible without ``stream``, Gemini
    ``generateContent``). Why: a short side request such as a conversation's title is
    one JSON body instead of a stream of lines, each parsed and scheduled on its own
    (issue 23). Tools are never offered in such a request; only cancellation is raised."""

    async def complete(self, request: ChatRequest) -> Completion: ...
