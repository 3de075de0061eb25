"""One model turn's idle timeout (``app/agent/turn.py``): it fires after ``idle_timeout_s``
with no event from the model, never while events keep coming, however long the turn.

Time here is the event loop's own clock, moved by the test (``VirtualClock``): the loop's
timers fire when the test says the time has come, so nothing depends on how fast this
machine is, and the test never sleeps."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from app.agent.turn import IdleWatch, stream_turn
from app.runs.run import Run
from llm.types import ChatRequest, ContentDelta, Message, MessageComplete, MessageStart, StreamEvent, Usage
from tests.support.virtual_clock import VirtualClock, finished, virtual_clock

IDLE_S = 10.0


@pytest.fixture(name="clock")
async def clock_fixture() -> AsyncIterator[VirtualClock]:
    async with virtual_clock() as clock:
        yield clock


class SteppedProvider:
    """A model that sends each next event only when the test releases it."""

    def __init__(self, events: list[StreamEvent], *, then_silence: bool = True) -> None:
        self.events, self.then_silence = events, then_silence
        self.release: asyncio.Queue[None] = asyncio.Queue()
        self.sent = 0
        self.closed = False

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        try:
            for event in self.events:
                await self.release.get()
                self.sent += 1
                yield event
            if self.then_silence:
                await asyncio.Event().wait()  # for ever
        finally:
            self.closed = True


def request() -> ChatRequest:
    return ChatRequest(system_prompt="", messages=[Message(role="user", content="hi")], tools=[])


def new_run() -> Run:
    return Run(id="r1", conversation_id="c1", user_id="u1", context_type="workflow")


async def step(provider: SteppedProvider, clock: VirtualClock, gap_s: float, turn: asyncio.Task[object]) -> None:
    """Release one event after ``gap_s`` of (virtual) silence, and wait until it was read
    (or the turn ended)."""
    await clock.advance(gap_s)
    before = provider.sent
    provider.release.put_nowait(None)
    # The loop's clock is virtual here (asyncio.timeout would never expire): the guard
    # against a provider that never reads its release is on the real clock.
    guard = time.monotonic() + 60
    while provider.sent == before and not turn.done():
        assert time.monotonic() < guard, f"the turn did not read event {before + 1} within 60 s"
        await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_tokens_coming_keep_a_long_turn_alive_and_silence_ends_it(clock: VirtualClock) -> None:
    tokens = [ContentDelta(text=f"t{i} ") for i in range(30)]
    provider = SteppedProvider([MessageStart(), *tokens])
    run = new_run()
    turn = asyncio.create_task(
        stream_turn(provider, run, request(), 1, idle_timeout_s=IDLE_S, partial=[])  # type: ignore[arg-type]
    )
    for _ in range(31):  # 31 gaps of 0.9 x the timeout: the turn lasts ~28 timeouts
        await step(provider, clock, IDLE_S * 0.9, turn)
        assert not turn.done()
    await clock.advance(IDLE_S * 0.9)
    assert not turn.done()  # silent for less than the timeout so far
    await clock.advance(IDLE_S * 0.2)
    out = await finished(turn, "the idle timeout")
    assert out.error is not None and out.error[1] == "provider_timeout"
    assert out.text == "".join(t.text for t in tokens)
    assert provider.closed
    assert [e.event for e in run.events].count("content_chunk") == 30


async def test_a_turn_that_ends_in_time_is_not_a_timeout(clock: VirtualClock) -> None:
    provider = SteppedProvider(
        [MessageStart(), ContentDelta(text="done"), MessageComplete(False, Usage(1, 1))], then_silence=False
    )
    turn = asyncio.create_task(
        stream_turn(provider, new_run(), request(), 1, idle_timeout_s=IDLE_S, partial=[])  # type: ignore[arg-type]
    )
    for _ in range(3):
        await step(provider, clock, IDLE_S * 0.99, turn)
    out = await finished(turn, "the end of the turn")
    assert out.error is None and out.text == "done"


async def test_someone_elses_cancel_is_not_turned_into_a_timeout(clock: VirtualClock) -> None:
    """A run cancelled while its model is silent stays cancelled (the watch only converts
    its own cancel), even when the idle deadline falls in the same instant."""
    provider = SteppedProvider([MessageStart()])
    turn = asyncio.create_task(
        stream_turn(provider, new_run(), request(), 1, idle_timeout_s=IDLE_S, partial=[])  # type: ignore[arg-type]
    )
    await step(provider, clock, 0, turn)
    clock.now += IDLE_S * 2
    await asyncio.sleep(0)  # the loop's next pass runs this task, then the watch's timer
    turn.cancel()  # before the turn's task runs again: both cancels are pending
    with pytest.raises(asyncio.CancelledError):
        await finished(turn, "the cancel")


async def test_the_watchs_own_cancel_is_a_timeout(clock: VirtualClock) -> None:
    provider = SteppedProvider([MessageStart()])
    turn = asyncio.create_task(
        stream_turn(provider, new_run(), request(), 1, idle_timeout_s=IDLE_S, partial=[])  # type: ignore[arg-type]
    )
    await step(provider, clock, 0, turn)
    await clock.advance(IDLE_S * 2)
    out = await finished(turn, "the idle timeout")
    assert out.error is not None and out.error[1] == "provider_timeout"


async def test_the_watch_rearms_once_per_idle_period_not_per_event(clock: VirtualClock) -> None:
    """The point of the watch: events only stamp the time; its one timer is re-armed when
    it fires early, so a steady stream schedules about one timer per idle period."""
    loop = asyncio.get_running_loop()
    armed = 0
    real_call_at = loop.call_at

    def counting_call_at(when, callback, *args, context=None):  # type: ignore[no-untyped-def]
        nonlocal armed
        if getattr(callback, "__self__", None).__class__ is IdleWatch:
            armed += 1
        return real_call_at(when, callback, *args, context=context)

    loop.call_at = counting_call_at  # type: ignore[method-assign]
    async with IdleWatch(loop, IDLE_S) as watch:
        for _ in range(100):  # 100 events 0.1 timeout apart: 10 periods
            await clock.advance(IDLE_S * 0.1)
            watch.last = loop.time()
    assert not watch.fired
    assert 1 <= armed <= 12
