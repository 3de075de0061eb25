"""Run any ASGI app on a real uvicorn server bound to a free loopback port.

Streaming must be tested over a real socket: httpx's ASGITransport buffers whole
responses and hides streaming, timing and disconnect bugs.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from uvicorn.config import LifespanType

from app.server.sse_response import LiveStreams

#: How long an app's start-up (its lifespan) may take before the test fails.
STARTUP_GUARD_S = 120.0
#: How long a stop may take before the server task is cancelled.
SHUTDOWN_GUARD_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Server(uvicorn.Server):
    """uvicorn's main loop looks at ``should_exit`` every 0.1 s; a test server is told
    when to stop, so it wakes at once (0.05 s saved on average, for every app a test serves)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.wake = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """A test's server takes none of the process's signals: it is stopped by the test.
        uvicorn's own installs its ``handle_exit`` for SIGTERM and restores what was there
        at its end, so two servers of one test stopped in the order they started (replicas,
        workers) left the first one's handler installed for every later test of the
        process - and ``app.server.sse_response.uvicorn_exiting`` read that stopped
        server's ``should_exit`` as the stop of whatever app was serving then. The app's
        streams are ended by ``shutdown`` instead."""
        yield

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown (0.30-0.54), its steps in the same order, without its fixed
        waits: it sleeps 0.1 s after asking the connections to close, then looks every
        0.1 s until they and its tasks are gone - 0.1-0.2 s of every stop, and the suite
        stops an app for most of its tests. Here it looks every 5 ms; the bound
        (``timeout_graceful_shutdown``) and what happens past it are uvicorn's."""
        # An agentchat app's open streams end now, as ``agentchat serve``'s do when its
        # uvicorn stops (``LiveStreams``); else each waited for the graceful timeout.
        streams = getattr(getattr(getattr(self.config.app, "state", None), "services", None), "streams", None)
        if isinstance(streams, LiveStreams):
            streams.stop()
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            await asyncio.wait_for(self._drained(), timeout=self.config.timeout_graceful_shutdown)
        except TimeoutError:
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()

    async def _drained(self) -> None:
        """Until every connection and every task of the server has ended."""
        while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()


@asynccontextmanager
async def serve_app(app: Any, *, lifespan: LifespanType = "on", port: int = 0, **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1:<free port> (or ``port``: a server that comes up where a
    client already looks) inside the current event loop; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Without it, Nagle's algorithm delays small responses by ~40 ms on loopback.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", port))
    port = sock.getsockname()[1]
    cfg = uvicorn.Config(
        app,
        lifespan=lifespan,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=2,
        **config,
    )
    server = _Server(cfg)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        # A lifespan start-up that never finishes (a dependency that never answers) fails
        # here, named, instead of hanging the test: the deadline only guards against that.
        deadline = time.monotonic() + STARTUP_GUARD_S
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn exited before starting")
            if time.monotonic() > deadline:
                raise AssertionError(f"the app served on port {port} did not start within {STARTUP_GUARD_S} s")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.wake.set()
        try:
            await stopped(task, port)
        finally:
            sock.close()


async def stopped(task: asyncio.Task[None], port: int) -> None:
    """Wait for the server task to end: 10 s for a graceful stop, then cancelled and 5 s
    more. ``asyncio.wait_for`` would wait without limit for a cancelled task that does not
    end (a shutdown swallowing the cancellation); this fails, naming it, instead."""
    done, _ = await asyncio.wait({task}, timeout=SHUTDOWN_GUARD_S)
    if not done:
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        if not done:
            raise AssertionError(
                f"the app served on port {port} did not stop within {SHUTDOWN_GUARD_S + 5} s, even cancelled"
            )
    if not task.cancelled():
        task.result()  # an error of the server's own (uvicorn logs its app's errors itself)
