"""A scripted provider whose turns can stop at gates the test opens.

Resume, cancel and reload tests need a run that is provably *in the middle* of its
answer when the client leaves: a turn here is a list of steps, where a string is a
streamed chunk and an ``asyncio.Event`` is a gate the stream waits on. ``reached``
tells the test that the stream is parked at a gate, so nothing depends on timing.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from llm.provider import ProviderHealth
from llm.scripted import ScriptedCall
from llm.types import (
    ChatRequest,
    ContentDelta,
    MessageComplete,
    MessageStart,
    StreamEvent,
    ToolUseInput,
    ToolUseStart,
    Usage,
)


@dataclass(slots=True)
class Gate:
    """A point in a turn the stream waits at until ``open()``."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)
    reached: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self) -> None:
        self.opened.set()


Step = str | Gate


@dataclass(frozen=True, slots=True)
class GatedTurn:
    steps: Sequence[Step] = ()
    calls: Sequence[ScriptedCall] = ()


TurnFn = Callable[[ChatRequest, int], GatedTurn]


@dataclass(slots=True)
class GatedProvider:
    """``turns`` is a sequence (played in order across all runs) or a function of the
    request and its index (to script by question)."""

    turns: Sequence[GatedTurn] | TurnFn
    name: str = "gated"
    model: str = "gated"
    requests: list[ChatRequest] = field(default_factory=list)
    _ids: Any = field(default_factory=lambda: itertools.count(1))

    def _turn(self, request: ChatRequest, index: int) -> GatedTurn:
        if callable(self.turns):
            return self.turns(request, index)
        if index < len(self.turns):
            return self.turns[index]
        return GatedTurn(steps=("(script exhausted)",))

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        index = len(self.requests)
        self.requests.append(request)
        turn = self._turn(request, index)
        yield MessageStart()
        out = 0
        for step in turn.steps:
            if isinstance(step, Gate):
                step.reached.set()
                await step.opened.wait()
            else:
                out += len(step)
                yield ContentDelta(step)
        for i, call in enumerate(turn.calls):
            call_id = f"call_{next(self._ids)}"
            yield ToolUseStart(call_id, call.name, i)
            raw = call.arguments if isinstance(call.arguments, str) else orjson.dumps(call.arguments).decode()
            yield ToolUseInput(call_id, raw)
        yield MessageComplete(stop_for_tool_use=bool(turn.calls), usage=Usage(10, out // 4), stop_reason="stop")

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "gated provider")

    async def aclose(self) -> None:
        return None


def last_user_text(request: ChatRequest) -> str:
    """The newest user message with text (tool-result messages carry none)."""
    for m in reversed(request.messages):
        if m.role == "user" and m.content:
            return m.content
    return ""
