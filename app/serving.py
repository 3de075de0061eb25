"""uvicorn, with a drain on the first SIGTERM/SIGINT instead of an immediate stop.

Plain uvicorn stops accepting connections at once and then waits for open streams; a
long agent run either outlives that wait and is cut off, or holds the process. Here the
first signal starts a drain — new runs are refused with 503 and ``Retry-After`` (the
listener stays open so clients get that answer instead of a refused connection), live
runs go on for ``AGENT_SHUTDOWN_GRACE_S``, the rest are released as *interrupted* for
the next process — and only then does uvicorn shut down. A second signal exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from types import FrameType

import uvicorn

log = logging.getLogger("agentchat.serving")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain: Callable[[], Awaitable[None]]) -> None:
        super().__init__(config)
        self._drain = drain
        self._draining = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._draining or self._loop is None or not self.started:
            uvicorn.Server.handle_exit(self, sig, frame)  # a second signal: stop now
            return
        self._draining = True
        log.info("draining: new runs are refused; live runs may finish", extra={"signal": sig})
        self._loop.call_soon_threadsafe(self._start_drain)

    def _start_drain(self) -> None:
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain_then_exit(), name="drain")

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain()
        except Exception:
            log.exception("drain failed; stopping anyway")
        finally:
            self.should_exit = True
