"""uvicorn, with a drain on the first SIGTERM/SIGINT instead of an immediate stop.

Plain uvicorn stops accepting connections at once and then waits for open streams; a
long agent run either outlives that wait and is cut off, or holds the process. Here the
first signal starts a drain — new runs are refused with 503 and ``Retry-After`` (the
listener stays open so clients get that answer instead of a refused connection), live
runs go on for ``AGENT_SHUTDOWN_GRACE_S``, the rest are released as *interrupted* for
the next process — and only then does uvicorn shut down. A second signal ends the grace
at once: the live runs are released then, and the close is the same (``DrainingServer``).
"""

from __future__ import annotations

import asyncio
import errno
import importlib.util
import logging
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import uvicorn

from app.cli.header_guard import KEEP_ALIVE_S, MAX_HEADER_BYTES, GuardedH11Protocol
from app.cli.no_websockets import RefuseWebSocket

__all__ = ["MAX_HEADER_BYTES", "DrainingServer", "Stack", "choose_stack", "http_protocol", "run", "uvicorn_config"]

log = logging.getLogger("agentchat.serving")
T = TypeVar("T")


# --- the serving stack: uvloop + httptools when installed, else asyncio + h11 ------------------


@dataclass(frozen=True, slots=True)
class Stack:
    """The event loop and HTTP parser the agent is served with, and why, when either is
    the portable one. uvloop and httptools cut the CPU each streamed token costs (the
    parser and the loop are C); asyncio's loop and h11 run everywhere Python does."""

    loop: str  # "uvloop" | "asyncio"
    http: str  # "httptools" | "h11"
    why: str = ""
    #: The outbound pools' HTTP/1.1 client (``Settings.outbound_http1``, ``llm.pool``).
    outbound: str = "httptools"

    def describe(self) -> str:
        return f"{self.loop} + {self.http}, outbound {self.outbound}" + (f" ({self.why})" if self.why else "")


def choose_stack(setting: str = "auto") -> Stack:
    """``auto``: each of uvloop and httptools when importable; ``portable``: neither."""
    if setting == "portable":
        return Stack("asyncio", "h11", "AGENT_SERVER_STACK=portable", outbound="httpcore")
    missing = [name for name in ("uvloop", "httptools") if importlib.util.find_spec(name) is None]
    return Stack(
        "asyncio" if "uvloop" in missing else "uvloop",
        "h11" if "httptools" in missing else "httptools",
        f"{' and '.join(missing)} not installed" if missing else "",
    )


def run(main: Coroutine[Any, Any, T], stack: Stack) -> T:
    """``asyncio.run`` on the stack's event loop."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if stack.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


class DrainingServer(uvicorn.Server):
    """uvicorn that drains on the first SIGTERM/SIGINT (see the module docstring).

    A second signal while it drains ends the grace now (``cut``: the live runs are released
    for the next process at once), then the same close; later ones change nothing. A signal
    before the app has started stops it once started (nothing to drain yet). No signal
    reaches uvicorn's own ``handle_exit``: it records the signal and raises it again after
    the close, when ``agentchat serve``'s SIGTERM handler turned it into an exit that read
    as a failed start-up ("the service did not start", exit 0 - the newcomer's double
    SIGTERM), and a second SIGINT there skips the app's close altogether."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[asyncio.Event], Awaitable[None]]) -> None:
        super().__init__(config)
        self._drain = drain
        self._draining = False
        self._cut_asked = False
        self._cut = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._loop is None or not self.started:
            if not self.should_exit:
                log.info("stopping: a signal came while the service was starting", extra={"signal": sig})
            self.should_exit = True  # uvicorn stops as soon as the start-up is over
            return
        if not self._draining:
            self._draining = True
            log.info("draining: new runs are refused; live runs may finish", extra={"signal": sig})
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        if not self._cut_asked:
            self._cut_asked = True
            log.info("a second signal: the grace ends now; live runs are released for the next process",
                     extra={"signal": sig})
            self._loop.call_soon_threadsafe(self._cut.set)

    def _start_drain(self) -> None:
        assert self._loop is not None
        self._drain_task = self._loop.create_task(self._drain_then_exit(), name="drain")

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain(self._cut)
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
    # Not inheritable (Python's default): the ``--workers`` supervisor hands it on with
    # ``pass_fds`` and ``--reload`` through multiprocessing's own descriptor passing; an
    # inheritable listener leaked into every subprocess a serve starts without closing
    # inherited descriptors (MCP stdio servers under uvloop), which kept the port.
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


def display_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def uvicorn_config(
    app: Any, *, host: str, port: int, header_timeout_s: float, stack: Stack | None = None, **kwargs: Any
) -> uvicorn.Config:
    """uvicorn's config for the agent: the stack's parser with a header deadline (and
    the stack's loop when uvicorn runs the loop itself: ``--reload``), a short
    keep-alive, no access log (stream URLs carry tokens), WebSocket handshakes refused
    (``app/cli/no_websockets.py``: the agent has no WebSocket route)."""
    stack = stack or choose_stack()
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        http=http_protocol(stack),
        loop=stack.loop,
        timeout_keep_alive=KEEP_ALIVE_S,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        access_log=False,
        ws=RefuseWebSocket,  # no WebSocket route: refused without a WebSocket library
        **kwargs,
    )
    # Read by GuardedH11Protocol; an attribute (not a closure) so --reload can pickle it.
    config.header_timeout_s = header_timeout_s  # type: ignore[attr-defined]
    return config


def http_protocol(stack: Stack) -> type[asyncio.Protocol]:
    """The guarded protocol class of the stack's parser (httptools is imported only here)."""
    if stack.http == "httptools":
        from app.cli.guarded_httptools import GuardedHttpToolsProtocol

        return GuardedHttpToolsProtocol
    return GuardedH11Protocol
