"""One streamed model turn: provider events become run events; text and tool calls are
collected for the agent loop. Kept apart from the loop, which stores each turn.

Provider events (``llm.types``) are told apart by class in one ``match``, so each branch
sees its own fields typed; run events are the ``events`` classes (``MessageStart`` there
is aliased ``TurnStarted`` here, next to the provider's own ``MessageStart``)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, assert_never

import orjson

from app.agent.answer_stream import AnswerReader, ShownText
from app.agent.output_caps import TurnTextCap
from app.runs.run import Run
from events import ContentChunk, ToolCallStart
from events import MessageStart as TurnStarted
from llm.provider import Provider
from llm.types import (
    ChatRequest,
    ContentDelta,
    MessageComplete,
    MessageStart,
    StreamError,
    ThinkingDelta,
    ToolCall,
    ToolUseInput,
    ToolUseStart,
    Usage,
)

log = logging.getLogger("agentchat.agent")


@dataclass(slots=True)
class TurnOutcome:
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    stop_for_tool_use: bool = False
    usage: Usage = Usage()
    replay: dict[str, Any] | None = None
    error: tuple[str, str] | None = None  # (message, code)
    #: Wall-clock time of the turn's first streamed text (for time-to-first-token).
    first_text_at: float | None = None


async def stream_turn(
    provider: Provider,
    run: Run,
    request: ChatRequest,
    turn: int,
    *,
    idle_timeout_s: float,
    partial: list[str],
    cap: TurnTextCap | None = None,
    answer_tool: str | None = None,
    shown: ShownText | None = None,
) -> TurnOutcome:
    """Stream one model turn into run events; collect its text and tool calls. Text is
    also appended to ``partial`` as it arrives, so a cancelled run keeps what was said.

    A call of ``answer_tool`` (``generate_response``) has its ``answer`` argument streamed
    as ``content_chunk`` while the call's arguments arrive (``app.agent.answer_stream``);
    ``shown``, the run's streamed text, keeps an answer that repeats it from showing twice."""
    out = TurnOutcome()
    shown = shown if shown is not None else ShownText()
    shown.new_turn()
    answers: dict[str, AnswerReader] = {}
    text_parts: list[str] = []
    order: list[str] = []
    names: dict[str, str] = {}
    args: dict[str, list[str]] = {}
    completed = False
    stream = provider.stream_chat(request)
    loop = asyncio.get_running_loop()
    watch = IdleWatch(loop, idle_timeout_s)
    try:
        async with watch:
            async for ev in stream:
                watch.last = loop.time()
                match ev:
                    case ContentDelta(text=text):
                        if cap is not None:
                            text = cap.admit(text)
                        if text:
                            text_parts.append(text)
                            shown.text(text)
                            _say(run, out, partial, text)
                    case ToolUseStart(id=cid, name=name):
                        if cid not in names:
                            order.append(cid)
                            args[cid] = []
                            if answer_tool is not None and name == answer_tool:
                                answers[cid] = AnswerReader()
                                shown.answer_begins()
                        names[cid] = name
                        run.emit(ToolCallStart(tool_use_id=cid, tool_name=name))
                    case ToolUseInput(id=cid, partial_json=piece):
                        args.setdefault(cid, []).append(piece)
                        reader = answers.get(cid)
                        if reader is not None:
                            text = shown.answer(reader.feed(piece))
                            if cap is not None and text:
                                text = cap.admit(text)
                            if text:
                                _say(run, out, partial, text)
                    case MessageStart():
                        run.emit(TurnStarted(turn=turn))
                    case MessageComplete(stop_for_tool_use=stop, usage=usage, replay=replay):
                        out.stop_for_tool_use, out.usage, out.replay = stop, usage, replay
                        completed = True
                    case ThinkingDelta(text=text):
                        log.debug("thinking", extra={"run_id": run.id, "text": text[:2000]})
                    case StreamError(message=message, code=code):
                        out.error = (message, code)
                        break
                    case _:
                        assert_never(ev)  # mypy: every provider event has a branch
    except TimeoutError:
        out.error = (f"The model sent nothing for {idle_timeout_s:g} s.", "provider_timeout")
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    out.text = "".join(text_parts)
    if cap is not None and cap.cut:
        log.warning(
            "model output cut to its caps",
            extra={"run_id": run.id, "chunks_cut": cap.chunks_cut, "chars_dropped": cap.chars_dropped},
        )
    if out.error is None and not completed:
        out.error = ("The model's stream ended before the turn was complete.", "provider_error")
    if out.error is None:
        out.calls = [parse_call(cid, names.get(cid, ""), "".join(args.get(cid, []))) for cid in order]
        if out.calls and not out.stop_for_tool_use:
            log.info("tool calls with a non-tool stop reason; executing them anyway", extra={"run_id": run.id})
    return out


def _say(run: Run, out: TurnOutcome, partial: list[str], text: str) -> None:
    """Text the client is shown now: a ``content_chunk``, kept in ``partial`` (a cancelled
    run keeps what was said) and timed for time-to-first-token."""
    if out.first_text_at is None:
        out.first_text_at = time.time()
    partial.append(text)
    run.emit(ContentChunk(chunk=text))


class IdleWatch:
    """The model's idle timeout: the task is cancelled (``TimeoutError`` out of the
    ``async with``) once ``idle_s`` pass with no event, however long the whole turn.

    Why not ``asyncio.timeout`` rescheduled per event: that cancels and re-creates a
    timer for every streamed token. Here an event only stamps ``last`` (one float), and
    one timer checks the deadline lazily: when it fires before ``last + idle_s`` (tokens
    kept coming) it is re-armed there, so a steady stream costs one timer per idle period.
    Cancellation is told apart as ``asyncio.timeout`` does it: only the cancel this watch
    made becomes ``TimeoutError``; anyone else's propagates."""

    __slots__ = ("_cancelling", "_handle", "_task", "fired", "idle_s", "last", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, idle_s: float) -> None:
        self.loop, self.idle_s = loop, idle_s
        self.last = loop.time()
        self.fired = False
        self._task: asyncio.Task[Any] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._cancelling = 0

    async def __aenter__(self) -> IdleWatch:
        task = asyncio.current_task()
        assert task is not None
        self._task, self._cancelling = task, task.cancelling()
        self.last = self.loop.time()
        self._handle = self.loop.call_at(self.last + self.idle_s, self._check)
        return self

    def _check(self) -> None:
        due = self.last + self.idle_s
        if self.loop.time() < due:
            self._handle = self.loop.call_at(due, self._check)
            return
        self._handle = None
        self.fired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self.fired and self._task is not None:
            ours = self._task.uncancel() <= self._cancelling  # our cancel is withdrawn either way
            if ours and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc


def parse_call(call_id: str, name: str, raw: str) -> ToolCall:
    text = raw.strip()
    if not text:
        return ToolCall(call_id, name, {}, raw)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return ToolCall(call_id, name, {}, raw, parse_error=str(exc))
    if not isinstance(value, dict):
        return ToolCall(call_id, name, {}, raw, parse_error=f"expected an object, got {type(value).__name__}")
    return ToolCall(call_id, name, value, raw)
