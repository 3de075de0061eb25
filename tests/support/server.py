"""Run any ASGI app on a real uvicorn server bound to a free loopback port.

Streaming must be tested over a real socket: httpx's ASGITransport buffers whole
responses and hides streaming, timing and disconnect bugs.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn


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

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            try:
                await asyncio.wait_for(self.wake.wait(), 0.1)
            except TimeoutError:
                pass
            should_exit = await self.on_tick(counter)


@asynccontextmanager
async def serve_app(app: Any, *, lifespan: str = "on", **config: Any) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1:<free port> inside the current event loop; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Without it, Nagle's algorithm delays small responses by ~40 ms on loopback.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
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
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn exited before starting")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        server.wake.set()
        try:
            await asyncio.wait_for(task, timeout=10)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            task.cancel()
        sock.close()
