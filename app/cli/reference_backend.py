"""The reference backend beside ``agentchat serve``: its own process, started and stopped.

``python -m backend`` always runs in a process of its own: the agent talks to it over
HTTP only, as it would to the real one, and never imports it. Starting that child (its
port checked first, its ``/healthz`` awaited), starting it again when it exits unasked
(``app/cli/backend_keeper.py``), and stopping it on the way out, is one job apart from the
serving itself (``app/cli/serve.py``), which only asks for its URL and state file;
``agentchat backend`` (here too: its options and ``run_backend``) runs the same command
line in place.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli.ranges import integer_in
from app.config_env import PORT_BOUNDS, Bounds

if TYPE_CHECKING:  # imported where the backend starts: every command's parser imports this module
    from app.cli.backend_keeper import BackendKeeper
    from app.config import Settings

log = logging.getLogger("agentchat.cli")

#: The reference backend's port: a port of its own to listen on, so not 0 (any free one).
BACKEND_PORT_BOUNDS = Bounds(1, PORT_BOUNDS.hi)
BACKEND_START_TIMEOUT_S = 30.0


def default_backend_port(settings: Settings) -> int:
    """The reference backend's port when none is named: ``serve``'s rule, the agent's port
    plus one (8001 by default), so ``agentchat backend`` alone listens where ``serve``
    starts it. ``AGENT_PORT`` 0 (any free port) or the last port has no such neighbour:
    then the default agent port's."""
    from app.config import Settings

    if 0 < settings.port < BACKEND_PORT_BOUNDS.hi:
        return settings.port + 1
    return Settings().port + 1


def backend_db(settings: Settings, explicit: str | None = None) -> Path:
    """The backend's SQLite file: ``explicit``, else beside ``AGENT_DB_PATH``."""
    return Path(explicit) if explicit else settings.db_path.parent / "backend.sqlite3"


def backend_argv(
    host: str,
    port: int,
    db: Path,
    *,
    log_level: str = "info",
    log_format: str = "text",
    allowed_hosts: tuple[str, ...] = ("auto",),
    fds: tuple[int, ...] = (),
) -> list[str]:
    """``python -m backend``'s command line; ``log_format``: the agent's (``AGENT_LOG_FORMAT``,
    ``app.ops.logs``), so both services' lines are JSON or neither's; ``allowed_hosts``:
    ``AGENT_ALLOWED_HOSTS``, the same Host guard as the agent's (``backend/host_check.py``);
    ``fds``: sockets bound to ``host:port`` (one per address of ``host``) it inherits and
    listens on."""
    return [sys.executable, "-m", "backend", "--host", host, "--port", str(port), "--db", str(db),
            "--allowed-hosts", ",".join(allowed_hosts), "--log-level", log_level, "--log-format", log_format,
            *(arg for fd in fds for arg in ("--fd", str(fd)))]


def _wait_until_up(proc: subprocess.Popen[bytes], url: str, timeout_s: float = BACKEND_START_TIMEOUT_S) -> None:
    """Block until ``url/healthz`` answers 200; exit with a message if the process dies or never answers."""
    import httpx

    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while (code := proc.poll()) is None:
            try:
                if client.get(f"{url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                print(f"agentchat: the reference backend did not answer at {url} within {timeout_s:g} s",
                      file=sys.stderr)
                raise SystemExit(1)
            time.sleep(0.05)
    # Its port was found free just before: the backend's own lines above say why it ended.
    print(f"agentchat: the reference backend exited with code {code} before answering at {url} "
          "(its reason is in the lines above)", file=sys.stderr)
    raise SystemExit(1)


@dataclass(frozen=True, slots=True)
class StartedBackend:
    """The reference backend ``serve`` started: where it answers, and the file its
    keeper's state is in (``app/ops/backend_state.py``), both for the app; and what
    ``serve``'s SIGTERM/SIGINT handler calls (``BackendKeeper.serve_stopping``)."""

    url: str
    state_file: Path
    serve_stopping: Callable[[], None]

    def env(self) -> dict[str, str]:
        """For an app in another process (``--workers``, ``--reload``)."""
        from app.ops.backend_state import STATE_FILE_ENV

        return {"AGENT_BACKEND_URL": self.url, STATE_FILE_ENV: str(self.state_file)}


@contextlib.contextmanager
def reference_backend(
    settings: Settings, args: argparse.Namespace, port: int, log_level: str
) -> Iterator[StartedBackend | None]:
    """Start ``python -m backend`` beside the agent unless ``AGENT_BACKEND_URL`` or
    ``--no-backend`` says otherwise; yield it once it answers, kept running
    (``app/cli/backend_keeper.py``); stop it on the way out."""
    from app.cli.backend_keeper import BackendKeeper, stop_child
    from app.cli.children import die_with_parent
    from app.cli.serving import BindError, bind_socket

    if settings.backend_url is not None or args.no_backend:
        yield None
        return
    backend_port = args.backend_port or port + 1
    if backend_port > BACKEND_PORT_BOUNDS.hi:  # the agent on the last port: port + 1 is none
        print(f"agentchat: the reference backend's port would be {backend_port}; "
              "pick one with --backend-port, or --no-backend or AGENT_BACKEND_URL", file=sys.stderr)
        raise SystemExit(2)
    url = f"http://127.0.0.1:{backend_port}"
    try:  # a taken port is one clear line here, not the child's error after a wait
        bind_socket("127.0.0.1", backend_port, what="agentchat (reference backend)",
                    hint="--backend-port, --no-backend or AGENT_BACKEND_URL").close()
    except BindError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    db = backend_db(settings)
    argv = backend_argv("127.0.0.1", backend_port, db, log_level=log_level, log_format=_log_format(args),
                        allowed_hosts=settings.allowed_hosts)
    # A Ctrl-C in the terminal reaches serve alone (as its workers, app/cli/workers.py):
    # the backend stays up while serve drains its runs, and is stopped below after them.
    proc = subprocess.Popen(argv, preexec_fn=die_with_parent(), start_new_session=True)
    keeper: BackendKeeper | None = None
    try:
        _wait_until_up(proc, url)
        log.info("reference backend started beside the agent", extra={"url": url, "backend_pid": proc.pid})
        keeper = BackendKeeper(argv, url, proc, db.parent / f"backend-{backend_port}.state.json")
        keeper.start()
        yield StartedBackend(url, keeper.state_file, keeper.serve_stopping)
    finally:
        if keeper is not None:
            keeper.stop()
        else:
            stop_child(proc)


def _log_format(args: argparse.Namespace) -> str:
    """The format the agent's logging chose (``configure_logging`` in ``app.cli.commands``
    sets ``args.log_format``: ``AGENT_LOG_FORMAT``, else the command's default)."""
    return str(getattr(args, "log_format", None) or "text")


def add_backend_command(sub: Any) -> None:
    backend = sub.add_parser(
        "backend",
        help="run the bundled reference backend alone (the workflow/table REST service the agent's tools call)",
        description="Run the bundled reference backend alone: the workflow and table-configuration REST "
        "service the agent's workflow and table tools call, with the caller's own token, and seed data for "
        "demos and tests. In production AGENT_BACKEND_URL points the agent at the real service instead.",
    )
    backend.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    backend.add_argument("--port", type=integer_in(BACKEND_PORT_BOUNDS), default=None,
                         help="port to listen on (default AGENT_PORT + 1, 8001: the port serve starts it on)")
    backend.add_argument("--db", help="SQLite file (default: beside AGENT_DB_PATH)")


def run_backend(args: argparse.Namespace, settings: Settings) -> int:
    """``agentchat backend``: become ``python -m backend`` (same pid, signals and exit code).
    Its port is by default the one ``serve`` starts it on (``AGENT_PORT`` + 1): one port
    for the reference backend, however it was started (it was 8081 here, 8001 beside
    ``serve``).

    The port is bound here, before the exec, with ``serve``'s own messages: a port in use
    is the one line ``serve`` says (``cannot listen on …: the port is already in use``) and
    exit code 1 - uvicorn, binding it after the backend's start-up, ended in a ~40-line
    traceback and exit code 3. Every address ``--host`` resolves to is bound, as uvicorn
    did with the name (``localhost``: 127.0.0.1 and ::1, whichever the resolver lists
    first), and each socket is inherited (``--fd``, once per socket), so no other process
    can take the port between the check and the backend's listen."""
    from app.cli.serving import BindError, bind_sockets

    port = args.port if args.port is not None else default_backend_port(settings)
    try:
        sockets = bind_sockets(args.host, port, what="agentchat backend", hint="--port")
    except BindError as exc:
        print(exc, file=sys.stderr)
        return 1
    for sock in sockets:
        sock.set_inheritable(True)  # kept across the exec; the backend closes them on exit
    argv = backend_argv(args.host, port, backend_db(settings, args.db), log_format=_log_format(args),
                        allowed_hosts=settings.allowed_hosts, fds=tuple(sock.fileno() for sock in sockets))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)
    return 0  # not reached


__all__ = [
    "BACKEND_PORT_BOUNDS",
    "StartedBackend",
    "add_backend_command",
    "backend_argv",
    "backend_db",
    "default_backend_port",
    "reference_backend",
    "run_backend",
]
