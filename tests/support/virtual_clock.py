"""The running event loop's clock, moved by the test: timers fire when the test says the
time has come, so a test of a timeout neither sleeps nor depends on this machine's speed.
Works on asyncio's own loop (whose ``time`` is a Python method)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class VirtualClock:
    """The running loop's ``time()``, moved only by :meth:`advance` (or ``now +=``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.now = loop.time()
        loop.time = lambda: self.now  # type: ignore[method-assign]

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for _ in range(5):  # let the loop run what became due (and what that woke)
            await asyncio.sleep(0)


@asynccontextmanager
async def virtual_clock() -> AsyncIterator[VirtualClock]:
    loop = asyncio.get_running_loop()
    try:
        yield VirtualClock(loop)
    finally:
        del loop.time  # the loop's own clock again
