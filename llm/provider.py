"""The ``Provider`` protocol every LLM backend implements."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from llm.types import ChatRequest, StreamEvent


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
