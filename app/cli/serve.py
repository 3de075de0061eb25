"""``agentchat serve``: its options, and serving in one of three ways — one process, the
supervisor of ``--workers`` (``app/cli/workers.py``) or uvicorn's reloader (``--reload``,
``app/cli/reloader.py``).

Every way takes the SQLite file's writer lock first (``app/cli/writer_wait.py``), before
it starts anything else, then the reference backend beside it
(``app/cli/reference_backend.py``), then the app. The parser and the other commands live
in ``app/cli/commands.py``; everything heavier than the standard library and the settings
(uvicorn, the app, the storage) is imported inside the functions here, so the other
commands never pay for it. The parser (``add_serve_command``) is built by every command,
``--help`` included: asyncio, the settings, the reloader, logging's formatters and the
reference backend's keeper are imported where ``serve`` runs, not at the top.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.cli.gcpolicy import tune_for_serving
from app.cli.interrupts import EXIT_INTERRUPTED, EXIT_TERMINATED
from app.cli.ranges import integer_in, number_in
from app.cli.reference_backend import BACKEND_PORT_BOUNDS, reference_backend
from app.config_env import PORT_BOUNDS, SHUTDOWN_GRACE_BOUNDS, WORKERS_BOUNDS, Bounds

if TYPE_CHECKING:
    import asyncio

    from app.config import Settings
    from storage.sqlite.writer_lock import WriterLock

log = logging.getLogger("agentchat.cli")

#: ``--listen-fd`` (set by ``--workers``, once per listening socket): a descriptor number.
FD_BOUNDS = Bounds(0, 1 << 20)


def add_serve_command(sub: Any) -> None:
    serve = sub.add_parser("serve", help="serve the agent (and, unless AGENT_BACKEND_URL is set, the bundled reference "
                                         "backend: the workflow/table REST service its tools call)")
    serve.add_argument("--host", help="address to listen on (default AGENT_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=integer_in(PORT_BOUNDS),
                       help="port to listen on, 0 for any free one (default AGENT_PORT, 8000)")
    serve.add_argument("--backend-port", type=integer_in(BACKEND_PORT_BOUNDS),
                       help="port of the bundled reference backend, the workflow/table REST service the "
                            "tools call (default: port+1)")
    serve.add_argument("--no-backend", action="store_true", help="do not start the reference backend")
    serve.add_argument("--grace", type=number_in(SHUTDOWN_GRACE_BOUNDS), default=None,
                       help="seconds live runs may go on after SIGTERM before they are released "
                            "for the next process (default AGENT_SHUTDOWN_GRACE_S, 20)")
    serve.add_argument("--reload", action="store_true", help="restart on code changes (development)")
    serve.add_argument("--workers", type=integer_in(WORKERS_BOUNDS), default=None,
                       help="serving processes on this machine, one per core when one is CPU-bound; each a replica "
                            "on the same database (default AGENT_WORKERS, 1)")
    serve.add_argument("--listen-fd", type=integer_in(FD_BOUNDS), action="append", default=None,
                       help=argparse.SUPPRESS)  # set by --workers, once per socket
    serve.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # "i/N", set by --workers


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # uvicorn handles SIGTERM while it serves, then restores this handler and re-raises the
    # signal; the default action would kill the process before the backend is stopped.
    raise SystemExit(128 + signum)


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    """``agentchat serve`` with its parsed options; returns the exit code."""
    from app.cli.reloader import reload_config, run_reloader
    from app.cli.serving import BindError, bind_sockets, bound_port, choose_stack, closing
    from app.cli.serving import run as serving_run
    from app.config_checks import hosts_answered

    host = args.host or settings.host
    port = args.port if args.port is not None else settings.port
    workers = args.workers if args.workers is not None else settings.workers
    if workers < 1 or (workers > 1 and args.reload):
        print("agentchat: --workers takes a number from 1, and does not go with --reload", file=sys.stderr)
        return 2
    if args.listen_fd is None:  # said once, by the process the operator started (not each worker)
        _warn_of_settings(settings, host)
    if args.listen_fd is not None:  # a worker of ``--workers``: the parent bound the port
        import socket

        sockets = [socket.socket(fileno=fd) for fd in args.listen_fd]
        for sock in sockets:
            # ``pass_fds`` made it inheritable here: an MCP stdio server started under uvloop
            # (which closes no inherited descriptor) would keep the port after this worker.
            sock.set_inheritable(False)
    else:
        # Bind before anything else starts: a taken port is one line and exit code 1. A
        # name is bound at each of its addresses (``localhost``: 127.0.0.1 and ::1).
        try:
            sockets = bind_sockets(host, port)
        except BindError as exc:
            print(exc, file=sys.stderr)
            return 1
    port = bound_port(sockets[0])
    # The address the socket is bound to (the first, when a name has several), not the one
    # asked for, is what the app knows as AGENT_HOST: the Host guard (app/server/host_check.py)
    # decides from it. A worker of --workers inherits the sockets, not --host; --reload's
    # child reads AGENT_HOST.
    bound = str(sockets[0].getsockname()[0])
    # A name of this machine given as --host (devbox -> 127.0.1.1) is answered too; the
    # workers and the reload child read that from the environment, as AGENT_HOST.
    answered = hosts_answered(settings.allowed_hosts, host, bound)
    if answered != settings.allowed_hosts:
        os.environ["AGENT_ALLOWED_HOSTS"] = ",".join(answered)
    settings = settings.with_(host=bound, allowed_hosts=answered)
    if workers > 1 and args.listen_fd is None:
        return _supervise(args, settings, sockets, workers, port)
    lock = _writer_lock(settings)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # A fatal signal (SIGBUS: SQLite's memory-mapped -shm cut short under the server)
    # leaves a line and the Python stack on stderr instead of a silent death.
    faulthandler.enable()
    with closing(sockets):
        # The file first: a serve waiting for another group's file starts nothing else (no
        # reference backend on the same backend.sqlite3 beside the holder's).
        try:
            if not _become_writer(lock, sockets, settings, args):
                return 0
        except CannotStart as exc:
            print(exc, file=sys.stderr)
            return 3
        if args.reload:
            os.environ["AGENT_PORT"] = str(port)
            os.environ["AGENT_HOST"] = settings.host
            # The reloader re-imports the app in a child process; the backend keeps running
            # in its own, so reloads do not reset it. At WARNING as without --reload: at INFO
            # `make dev`'s first address was the backend's "Uvicorn running on
            # http://127.0.0.1:8001", which a newcomer opened instead of the agent's.
            with reference_backend(settings, args, port, "warning") as backend:
                if backend is not None:
                    os.environ.update(backend.env())
                run_reloader(
                    reload_config(host, port, settings, log_format=args.log_format), sockets, lock,
                    serving_line=_serving_line(host, port, "  [reloading on changes]"),
                )
            return 0
        with reference_backend(settings, args, port, "warning") as backend:
            if backend is not None:
                settings = settings.with_(backend_url=backend.url, backend_state_file=backend.state_file)
            try:
                on_signal = None if backend is None else backend.serve_stopping
                started = serving_run(
                    _serve_agent(args, settings, host, sockets, lock, on_signal), choose_stack(settings.server_stack)
                )
            except CannotStart as exc:
                print(exc, file=sys.stderr)
                return 3
            except KeyboardInterrupt:  # Ctrl-C before uvicorn answers signals (the app's imports take seconds)
                print("agentchat serve: interrupted", file=sys.stderr)
                return EXIT_INTERRUPTED
            except SystemExit as exc:  # SIGTERM then (``_exit_on_sigterm``): the same one line as earlier
                if exc.code == EXIT_TERMINATED:
                    print("agentchat serve: terminated (SIGTERM)", file=sys.stderr)
                raise
    return 0 if started else 3


def _warn_of_settings(settings: Settings, host: str) -> None:
    """A WARNING line each for an ``AGENT_*`` variable nothing reads and for no auth on
    an address other machines reach (``app.config_checks.serve_warnings``)."""
    from app.config import known_variables
    from app.config_checks import serve_warnings

    for line in serve_warnings(os.environ, known_variables(settings), auth=settings.auth, host=host):
        log.warning(line)


def _writer_lock(settings: Settings) -> WriterLock | None:
    """The SQLite file's writer lock (``storage.sqlite.writer_lock``); ``None`` on PostgreSQL."""
    from storage.open import is_postgres_url
    from storage.sqlite.writer_lock import WriterLock

    target = settings.database_url or settings.db_path
    return None if is_postgres_url(target) else WriterLock(target)


async def _wait_to_write(
    lock: WriterLock | None, sockets: list[Any], settings: Settings, args: argparse.Namespace
) -> bool:
    """Hold ``lock`` for the rest of this process (``app/cli/writer_wait.py``): a worker of
    ``--workers`` shares its supervisor's; anyone else takes it, waiting while another
    group holds it, then waits while a process of a release before the live log (which
    takes no lock) has the file open. False when stopped before it was ours."""
    from app.cli.serving import choose_stack
    from app.cli.writer_wait import share_inherited, wait_for_older_release, wait_for_writer_lock

    if lock is None:
        return True
    if args.listen_fd is not None and share_inherited(lock, dict(os.environ)):
        return True  # the supervisor waited for the lock and for an earlier release before it started us
    stack = choose_stack(settings.server_stack)
    try:
        if not await wait_for_writer_lock(lock, sockets, stack, log_format=args.log_format):
            return False
    except OSError as exc:  # the database's directory is not there or not writable: nor would the file be
        why = exc.strerror or str(exc)
        raise CannotStart(f"agentchat: cannot take the database's writer lock {lock.path}: {why}") from None
    # An upgrade from a release without the lock: its serve may still have the file open.
    if not await wait_for_older_release(lock.db_path, sockets, stack, log_format=args.log_format):
        lock.release()
        return False
    return True


class CannotStart(Exception):
    """The service cannot start at all; ``str()`` is one line for the operator (exit 3)."""


def _become_writer(lock: WriterLock | None, sockets: list[Any], settings: Settings, args: argparse.Namespace) -> bool:
    """``_wait_to_write`` outside an event loop, before ``serve`` starts anything else (the
    reference backend, the reloader, the workers, the app)."""
    if lock is None:
        return True
    from app.cli.serving import choose_stack
    from app.cli.serving import run as serving_run

    return serving_run(_wait_to_write(lock, sockets, settings, args), choose_stack(settings.server_stack))


def _serving_line(host: str, port: int, extra: str = "") -> str:
    from app.cli.serving import display_url

    return (f"agentchat: serving on {display_url(host, port)}  (playground at /, stream at POST /v1/agent/chat)"
            f"{extra}")


def _supervise(args: argparse.Namespace, settings: Settings, sockets: list[Any], workers: int, port: int) -> int:
    """``--workers N``: the reference backend once, then N serving processes on ``sockets``
    (``app/cli/workers.py``); returns when they have all stopped."""
    from app.cli.children import die_with_parent
    from app.cli.serving import closing
    from app.cli.workers import NEVER_STARTED, Supervisor, stop_deadline_s, worker_env
    from storage.sqlite.runtime_dir import runtime_dir, tidy_runtime_dir
    from storage.sqlite.writer_lock import INHERITED_FD_ENV

    faulthandler.enable()
    grace_s = settings.shutdown_grace_s if args.grace is None else args.grace
    lock = _writer_lock(settings)
    # The workers are one writer group: the supervisor holds the file's lock and each
    # worker inherits the open lock file, so the lock lives while any of them does. It is
    # taken (or waited for) before the reference backend starts.
    try:
        if not _become_writer(lock, sockets, settings, args):
            closing(sockets).close()
            return 0
    except CannotStart as exc:
        closing(sockets).close()
        print(exc, file=sys.stderr)
        return NEVER_STARTED
    with closing(sockets), reference_backend(settings, args, port, "warning") as backend:
        env = worker_env(None, workers, None)
        if backend is not None:
            env.update(backend.env())
        keep: tuple[int, ...] = ()
        if lock is not None:
            keep = (lock.fileno(),)
            env[INHERITED_FD_ENV] = str(lock.fileno())
        supervisor = Supervisor(
            sockets, workers, env, grace=args.grace,
            preexec=die_with_parent(), stop_after_s=stop_deadline_s(grace_s), keep_fds=keep,
            on_signal=None if backend is None else backend.serve_stopping,
        )
        if lock is None:
            return supervisor.run()
        # The workers' meeting place on the file (``storage.sqlite.runtime_dir``): what a
        # killed group left there goes before they start, and the directory once they
        # have all stopped. No other group can be in it meanwhile: this one holds the
        # file's writer lock.
        meeting = runtime_dir(settings.db_path)
        tidy_runtime_dir(meeting)  # at best: what it cannot remove, the workers live with
        try:
            return supervisor.run()
        finally:
            if not tidy_runtime_dir(meeting):
                log.warning("the workers' directory was left: something in it still runs",
                            extra={"directory": str(meeting)})


async def _serve_agent(
    args: argparse.Namespace,
    settings: Settings,
    host: str,
    sockets: list[Any],
    lock: WriterLock | None = None,
    on_signal: Callable[[], None] | None = None,
) -> bool:
    """Serve on the bound sockets until stopped; ``False`` if the app never started.
    ``lock``: the SQLite file's writer lock, held (``_become_writer``), watched meanwhile;
    ``on_signal``: told of each SIGTERM/SIGINT (the reference backend's keeper)."""
    import asyncio

    from app.cli.serving import DrainingServer, bound_port, choose_stack, uvicorn_config
    from app.cli.start_failure import StartupWatch, report
    from app.cli.writer_wait import watch_writer_lock
    from app.factory import create_app
    from app.ops.close_budget import SERVER_CLOSE_S
    from app.ops.logs import uvicorn_log_config

    stack = choose_stack(settings.server_stack)

    grace_s = settings.shutdown_grace_s if args.grace is None else args.grace
    app = create_app(settings, shutdown_deadline_s=grace_s)

    async def drain(cut: asyncio.Event) -> None:
        svc = getattr(app.state, "services", None)
        if svc is not None:
            await svc.runs.shutdown(grace_s, cut)

    port = bound_port(sockets[0])
    watch = StartupWatch(app)  # a failed start-up is one line, not a traceback
    agent = DrainingServer(
        uvicorn_config(
            watch,
            interface="asgi3",
            host=host,
            port=port,
            header_timeout_s=settings.header_timeout_s,
            stack=stack,
            log_level="info",
            log_config=uvicorn_log_config(args.log_format),
            lifespan="on",
            timeout_graceful_shutdown=SERVER_CLOSE_S,
        ),
        drain,
        on_signal,
    )
    async def serve() -> None:
        try:
            await agent.serve(sockets=sockets)
        except SystemExit as exc:  # uvicorn's way out when the app's start-up fails; no traceback
            if not agent.started:
                report(watch, settings, exc.code)
            # Started: a SIGTERM (``_exit_on_sigterm``) in the instant after uvicorn put the
            # handlers back, its close already done - the stop is complete, as asked.

    task = asyncio.create_task(serve())
    worker = f"  [worker {_counted_from_one(args.worker)}]" if args.worker else ""
    # Only the process that took the lock locks a new lock file (the workers share theirs).
    lock_watch = None if lock is None else asyncio.create_task(watch_writer_lock(lock, relock=args.listen_fd is None))
    try:
        await _when_serving(agent, [task], _serving_line(host, port, f"{worker}  [{stack.describe()}]"))
        await task
    except asyncio.CancelledError:
        # Ctrl-C before uvicorn answers signals: ``asyncio.Runner`` cancels this task, and
        # the app would be cut off mid-start. Stop it as a signal does (the start ends, then
        # the close), and let the cancel go on: ``serve`` exits 130 with one line.
        agent.handle_exit(signal.SIGINT, None)
        await asyncio.shield(task)
        raise
    finally:
        if lock_watch is not None:
            lock_watch.cancel()
    return bool(agent.started)


async def _when_serving(server: Any, tasks: list[asyncio.Task[None]], line: str) -> None:
    """Once uvicorn accepts connections: say where, and apply the serving GC policy
    (app/cli/gcpolicy.py). Nothing is printed when it never started."""
    import asyncio

    from app.ops.logs import announce

    while not server.started and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    if server.started:
        announce(line)
        tune_for_serving()


__all__ = ["FD_BOUNDS", "CannotStart", "add_serve_command", "run_serve"]


def _counted_from_one(worker: str) -> str:
    """``--worker i/N`` (0-based, as the supervisor hands it out) as a person counts:
    ``1/2`` and ``2/2``, not ``0/2`` and ``1/2``."""
    index, _, count = worker.partition("/")
    return f"{int(index) + 1}/{count}" if index.isdigit() else worker
