"""A live run's followers tick (the SSE heartbeat) after ``idle`` seconds without an event,
each on its own deadline, never while events keep coming (``app/runs/live_reader.py``,
``app/runs/idle.py``). Time is the loop's own clock moved by the test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from app.runs.idle import IdleClock
from app.runs.live_reader import read_durable
from app.runs.run import Run, RunEvent
from events import ContentChunk
from tests.support.virtual_clock import VirtualClock, finished, virtual_clock

IDLE_S = 10.0


@pytest.fixture(name="clock")
async def clock_fixture() -> AsyncIterator[VirtualClock]:
    async with virtual_clock() as clock:
        yield clock


class Reader:
    """A follower read by its own task; what it got, in order (``None``: a tick)."""

    def __init__(self, run: Run) -> None:
        self.got: list[list[RunEvent] | None] = []
        self.follower = read_durable(run, 0, idle=IDLE_S)
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for batch in self.follower:
            self.got.append(batch)

    def ticks(self) -> int:
        return sum(1 for b in self.got if b is None)

    def chunks(self) -> list[str]:
        return [ev.data for b in self.got if b is not None for ev in b]


def new_run() -> Run:
    return Run(id="r1", conversation_id="c1", user_id="u1", context_type="workflow")


async def test_no_tick_while_events_come_then_one_per_idle_period(clock: VirtualClock) -> None:
    run = new_run()
    reader = Reader(run)
    await clock.advance(0)
    for i in range(30):  # 30 events 0.9 x idle apart: ~27 idle periods, no silence that long
        await clock.advance(IDLE_S * 0.9)
        run.emit(ContentChunk(chunk=f"t{i}"))
        await clock.advance(0)
    assert reader.ticks() == 0
    assert len(reader.chunks()) == 30
    await clock.advance(IDLE_S * 0.9)
    assert reader.ticks() == 0
    await clock.advance(IDLE_S * 0.2)
    assert reader.ticks() == 1
    await clock.advance(IDLE_S)
    assert reader.ticks() == 2
    run.emit(ContentChunk(chunk="late"))
    await clock.advance(0)
    assert reader.got[-1] is not None and reader.chunks()[-1] == ContentChunk(chunk="late").to_json().decode()
    reader.task.cancel()


async def test_each_follower_ticks_on_its_own_deadline(clock: VirtualClock) -> None:
    """B starts waiting half a period after A: A's tick (which wakes every waiter of the
    run) is not B's, and B ticks half a period later."""
    run = new_run()
    a = Reader(run)
    await clock.advance(0)  # A waits from now
    await clock.advance(IDLE_S / 2)
    b = Reader(run)
    await clock.advance(0)  # B waits from now
    await clock.advance(IDLE_S / 2)
    assert (a.ticks(), b.ticks()) == (1, 0)
    await clock.advance(IDLE_S / 2)
    assert (a.ticks(), b.ticks()) == (1, 1)
    a.task.cancel()
    b.task.cancel()


async def test_a_follower_that_leaves_leaves_no_timer(clock: VirtualClock) -> None:
    run = new_run()
    reader = Reader(run)
    await clock.advance(0)
    await clock.advance(IDLE_S / 2)
    reader.task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finished(reader.task, "the follower's cancel")
    loop = asyncio.get_running_loop()
    live = [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
    assert not any(getattr(h._callback, "__self__", None).__class__ is IdleClock for h in live)  # type: ignore[attr-defined]


async def test_a_finished_run_ends_its_followers_without_a_tick(clock: VirtualClock) -> None:
    from app.runs.run import terminal_event

    run = new_run()
    reader = Reader(run)
    await clock.advance(0)
    await clock.advance(IDLE_S / 2)
    run.emit(terminal_event(run, "completed"))
    await finished(reader.task, "the follower's end")
    assert reader.ticks() == 0 and [b[-1].event for b in reader.got if b] == ["message_complete"]
