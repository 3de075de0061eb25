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
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

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


# --- listening: bind first, say so after; guard connections that never finish a request ----

#: The project's packages: ``--reload`` watches these and nothing else (not ``.venv``).
PACKAGES = ("app", "llm", "toolindex", "storage", "agenttools", "knowledge", "prompts", "backend")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class BindError(Exception):
    """The address cannot be listened on; ``str()`` is one line for the operator."""


def bind_socket(host: str, port: int, *, what: str = "agentchat", hint: str = "--port or AGENT_PORT") -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 picks a free one), or ``BindError``."""
    try:
        family, kind, proto, _, addr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise BindError(f"{what}: cannot listen on {host}:{port}: unknown host ({exc.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            why = f"the port is already in use (another agentchat? pick another with {hint})"
        elif exc.errno == errno.EACCES:
            why = f"permission denied (ports below 1024 need privileges; pick another with {hint})"
        elif exc.errno == errno.EADDRNOTAVAIL:
            why = "this machine has no such address"
        else:
            why = exc.strerror or str(exc)
        raise BindError(f"{what}: cannot listen on {host}:{port}: {why}") from None
    sock.set_inheritable(True)  # --reload hands it to the serving child
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def display_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_config(app: Any, *, host: str, port: int, header_timeout_s: float, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config for the agent: h11 with a header deadline, a short keep-alive,
    no access log (stream URLs carry tokens)."""
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedH11Protocol,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        access_log=False,
        **kwargs,
    )
    # Read by GuardedH11Protocol; an attribute (not a closure) so --reload can pickle it.
    config.header_timeout_s = header_timeout_s  # type: ignore[attr-defined]
    return config


KEEP_ALIVE_S = 5
MAX_HEADER_BYTES = 16 * 1024
DEFAULT_HEADER_TIMEOUT_S = 10.0


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for a request's headers.

    uvicorn times out idle keep-alive connections, but a connection that sends nothing,
    or trickles its request line and headers a byte at a time, is held forever. Here the
    headers of every request must be complete within ``header_timeout_s`` of its first
    byte (or of the connection); else the client gets ``408`` and the connection is
    closed, with one INFO line. Bodies have their own deadline (``read_json_body``).
    """

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any], _loop: Any = None) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout_s = float(getattr(config, "header_timeout_s", DEFAULT_HEADER_TIMEOUT_S))
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._awaiting_headers():
            self._arm_header_timer()
        else:
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE

    def _arm_header_timer(self) -> None:
        if self._header_timer is None and self.header_timeout_s > 0:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_timed_out)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._awaiting_headers():
            return
        if self.timeout_keep_alive_task is not None:
            return  # an idle keep-alive connection: uvicorn's own timer closes it
        peer = self.client[0] if self.client else "unknown"
        log.info("request headers too slow; closing", extra={"client": peer, "timeout_s": self.header_timeout_s})
        self.transport.write(
            b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"connection: close\r\ncontent-length: 36\r\n\r\nthe request headers arrived too late"
        )
        self.transport.close()
