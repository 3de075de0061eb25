"""uvicorn, with a drain on the first SIGTERM/SIGINT instead of an immediate stop.

Plain uvicorn stops accepting connections at once and then waits for open streams; a
long agent run either outlives that wait and is cut off, or holds the process. Here the
first signal starts a drain — new runs are refused with 503 and ``Retry-After`` (the
listener stays open so clients get that answer instead of a refused connection), live
runs go on for ``AGENT_SHUTDOWN_GRACE_S``, the rest are released as *interrupted* for
the next process — and only then does uvicorn shut down. A second signal ends the grace
at once: the live runs are released then, and the close is the same (``DrainingServer``) —
unless it comes within ``SAME_STOP_S`` of the first: that is the same stop delivered twice
(systemd's default stop signals every process of the unit, and ``serve --workers``'
supervisor forwards its own signal to each worker too), and it changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import importlib.util
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import uvicorn

from app.cli.header_guard import KEEP_ALIVE_S, MAX_HEADER_BYTES, GuardedH11Protocol
from app.cli.no_websockets import RefuseWebSocket

__all__ = [
    "MAX_HEADER_BYTES",
    "SAME_STOP_S",
    "DrainingServer",
    "Stack",
    "choose_stack",
    "http_protocol",
    "run",
    "uvicorn_config",
]

log = logging.getLogger("agentchat.serving")
T = TypeVar("T")

#: A second SIGTERM/SIGINT this soon after the first is the same stop delivered twice, not a
#: person's second one (``DrainingServer``): systemd's duplicate reaches a worker within
#: milliseconds of its supervisor's (seconds would take a machine stalled), while a person
#: who reads "draining" and signals again takes longer; one who presses twice faster is told
#: to signal again.
SAME_STOP_S = 1.0


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
    SIGTERM), and a second SIGINT there skips the app's close altogether.

    A second signal within ``SAME_STOP_S`` of the first is ignored (one INFO line): it is
    the first one delivered twice. systemd's default stop (``KillMode=control-group``)
    SIGTERMs every process of the unit, so a ``--workers`` worker got systemd's SIGTERM and
    its supervisor's forwarded one milliseconds apart and read the pair as "drain, then end
    the grace": every live run was released at once, the drain lost. The worker cannot
    tell the senders apart (Python's handlers get no ``siginfo``) and the supervisor cannot
    know whom systemd reached, so time decides. uvicorn and gunicorn escalate only on
    another signal (uvicorn: a repeated SIGTERM changes nothing, a second SIGINT forces the
    exit; gunicorn: SIGTERM is graceful, SIGINT/SIGQUIT quick); here a second SIGTERM still
    ends the grace as a second Ctrl-C does (``kill`` again is how an operator asks, and
    the documented way), once it is clearly a second stop."""

    def __init__(
        self,
        config: uvicorn.Config,
        drain: Callable[[asyncio.Event], Awaitable[None]],
        on_signal: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._drain = drain
        #: Told of every SIGTERM/SIGINT, in the handler (the reference backend's keeper:
        #: a backend that ends on the same stop is no crash).
        self._on_signal = on_signal
        self._draining = False
        #: ``time.monotonic()`` of the signal that started the drain.
        self._first_at = 0.0
        self._repeat_logged = False
        self._cut_asked = False
        self._cut = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._drain_task: asyncio.Task[None] | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._on_signal is not None:
            self._on_signal()
        if self._loop is None or not self.started:
            if not self.should_exit:
                log.info("stopping: a signal came while the service was starting", extra={"signal": sig})
            self.should_exit = True  # uvicorn stops as soon as the start-up is over
            return
        if not self._draining:
            self._draining = True
            self._first_at = time.monotonic()
            log.info("draining: new runs are refused; live runs may finish", extra={"signal": sig})
            self._loop.call_soon_threadsafe(self._start_drain)
            return
        if time.monotonic() - self._first_at < SAME_STOP_S:
            if not self._repeat_logged and not self._cut_asked:
                self._repeat_logged = True
                log.info(f"the same stop signalled again within {SAME_STOP_S:g} s: still draining "
                         "(signal again to end the grace)", extra={"signal": sig})
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
PACKAGES = ("app", "events", "llm", "toolindex", "storage", "agenttools", "knowledge", "prompts", "backend")
PROJECT_ROOT = Path(__file__).resolve().parents[2]


class BindError(Exception):
    """The address cannot be listened on; ``str()`` is one line for the operator."""


def bind_socket(host: str, port: int, *, what: str = "agentchat", hint: str = "--port or AGENT_PORT") -> socket.socket:
    """A TCP socket bound to ``host:port`` (``port`` 0 picks a free one), or ``BindError``:
    the first address ``host`` resolves to (``bind_sockets`` binds each)."""
    try:
        family, kind, proto, _, addr = _addresses(host, port, what)[0]
        return _bind(family, kind, proto, addr, v6only=False)
    except OSError as exc:
        raise _bind_error(exc, host, port, what, hint) from None


def bind_sockets(
    host: str, port: int, *, what: str = "agentchat", hint: str = "--port or AGENT_PORT"
) -> list[socket.socket]:
    """TCP sockets bound to every address ``host`` resolves to, all on one port (``port`` 0
    picks a free one for all), or ``BindError``.

    Why every address: ``localhost`` is 127.0.0.1 and ::1 on most machines, and a resolver
    may list ::1 first; bound to that one alone, a client of ``http://127.0.0.1:P`` is
    refused. uvicorn given the name binds each address (asyncio's ``create_server``); so
    does this, and, as there, an address whose family the machine has not enabled (no
    socket of it, or ``EADDRNOTAVAIL``) is left out when another one binds. IPv6 sockets
    beside others are IPv6-only, so ``::`` does not take the IPv4 port ``0.0.0.0`` has."""
    found = list(dict.fromkeys((f, k, p, a) for f, k, p, _, a in _addresses(host, port, what)))
    for _attempt in range(20):  # port 0: another process may take the first's port on another address
        sockets: list[socket.socket] = []
        skipped: OSError | None = None
        try:
            for family, kind, proto, addr in found:
                if sockets and port == 0:
                    addr = (addr[0], bound_port(sockets[0]), *addr[2:])
                try:
                    sockets.append(_bind(family, kind, proto, addr, v6only=len(found) > 1))
                except OSError as exc:
                    if len(found) == 1 or exc.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                        raise
                    skipped = skipped or exc
        except OSError as exc:
            for sock in sockets:
                sock.close()
            if port == 0 and sockets and exc.errno == errno.EADDRINUSE:
                continue
            raise _bind_error(exc, host, port, what, hint) from None
        if not sockets:
            assert skipped is not None
            raise _bind_error(skipped, host, port, what, hint)
        return sockets
    raise BindError(f"{what}: cannot listen on {host}:{port}: no port free on every address of {host}")


def _addresses(host: str, port: int, what: str) -> list[tuple[Any, ...]]:
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise BindError(f"{what}: cannot listen on {host}:{port}: unknown host ({exc.strerror})") from None


def _bind(family: int, kind: int, proto: int, addr: Any, *, v6only: bool) -> socket.socket:
    """One listening address's socket, bound (``OSError`` when it cannot be).

    Not inheritable (Python's default): the ``--workers`` supervisor hands it on with
    ``pass_fds``, ``--reload`` through multiprocessing's own descriptor passing and
    ``agentchat backend`` across its exec after ``set_inheritable``; an inheritable listener
    leaked into every subprocess a serve starts without closing inherited descriptors (MCP
    stdio servers under uvloop), which kept the port."""
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if v6only and family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
    except OSError:
        sock.close()
        raise
    return sock


def _bind_error(exc: OSError, host: str, port: int, what: str, hint: str) -> BindError:
    if exc.errno == errno.EADDRINUSE:
        why = f"the port is already in use (another agentchat? pick another with {hint})"
    elif exc.errno == errno.EACCES:
        why = f"permission denied (ports below 1024 need privileges; pick another with {hint})"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = "this machine has no such address"
    else:
        why = exc.strerror or str(exc)
    return BindError(f"{what}: cannot listen on {host}:{port}: {why}")


def closing(sockets: list[socket.socket]) -> contextlib.ExitStack:
    """One ``with`` (or ``.close()``) closing every listening socket ``bind_sockets`` gave."""
    stack = contextlib.ExitStack()
    for sock in sockets:
        stack.enter_context(sock)
    return stack


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
