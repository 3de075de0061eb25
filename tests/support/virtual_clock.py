"""The running event loop's clock, moved by the test: timers fire when the test says the
time has come, so a test of a timeout neither sleeps nor depends on this machine's speed.
Works on asyncio's own loop (whose ``time`` is a Python method)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypeVar

T = TypeVar("T")


class VirtualClock:
    """The running loop's ``time()``, moved only by :meth:`advance` (or ``now +=``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()
        loop.time = lambda: self.now  # type: ignore[method-assign]

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for _ in range(5):  # let the loop run what became due (and what that woke)
            await asyncio.sleep(0)


async def finished(task: asyncio.Task[T], what: str, guard_s: float = 60) -> T:
    """``await task`` under a virtual clock, with a deadline on the real one: the loop's
    timers (``asyncio.timeout`` included) only fire when the test moves the clock, so a
    task that waits for a timer that never fires would be awaited for ever."""
    guard = time.monotonic() + guard_s
    while not task.done():
        if time.monotonic() > guard:
            raise AssertionError(f"{what} did not happen within {guard_s} s (real time)")
        await asyncio.sleep(0)
    return await task


@asynccontextmanager
async def virtual_clock() -> AsyncIterator[VirtualClock]:
    loop = asyncio.get_running_loop()
    try:
        yield VirtualClock(loop)
    finally:
        del loop.time  # the loop's own clock again
