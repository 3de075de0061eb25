"""A provider that plays back scripted turns, with no network and no model.

It exists for benchmarks (a zero-latency provider isolates the server's own overhead)
and for in-process tests of the agent loop. It is never chosen by configuration: code
hands an instance to the app factory explicitly.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from llm.provider import ProviderHealth
from llm.types import (
    ChatRequest,
    ContentDelta,
    MessageComplete,
    MessageStart,
    StreamError,
    StreamEvent,
    ToolUseInput,
    ToolUseStart,
    Usage,
)


@dataclass(frozen=True, slots=True)
class ScriptedCall:
    name: str
    arguments: dict[str, Any] | str


@dataclass(frozen=True, slots=True)
class ScriptedTurn:
    """One turn: text chunks, then tool calls; or an error after the chunks."""

    chunks: Sequence[str] = ()
    calls: Sequence[ScriptedCall] = ()
    error: str | None = None


TurnSource = Sequence[ScriptedTurn] | Callable[[ChatRequest, int], ScriptedTurn]


@dataclass(slots=True)
class ScriptedProvider:
    turns: TurnSource
    name: str = "scripted"
    model: str = "scripted"
    requests: list[ChatRequest] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _turn(self, request: ChatRequest, index: int) -> ScriptedTurn:
        if callable(self.turns):
            return self.turns(request, index)
        if index < len(self.turns):
            return self.turns[index]
        return ScriptedTurn(chunks=("(script exhausted)",))

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        index = len(self.requests)
        self.requests.append(request)
        turn = self._turn(request, index)
        yield MessageStart()
        for chunk in turn.chunks:
            yield ContentDelta(chunk)
        if turn.error is not None:
            yield StreamError(turn.error, "provider_error")
            return
        for i, call in enumerate(turn.calls):
            call_id = f"call_{next(self._ids)}"
            yield ToolUseStart(call_id, call.name, i)
            raw = call.arguments if isinstance(call.arguments, str) else orjson.dumps(call.arguments).decode()
            yield ToolUseInput(call_id, raw)
        out = sum(len(c) for c in turn.chunks) // 4
        yield MessageComplete(stop_for_tool_use=bool(turn.calls), usage=Usage(10, out), stop_reason="stop")

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "scripted provider")

    async def aclose(self) -> None:
        return None
