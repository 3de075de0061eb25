"""``agentchat serve --workers N``: several serving processes on one machine.

One agent process is bound by one core (the event loop is a single thread). With N
workers the parent binds the port once and starts N copies of ``agentchat serve`` that
each accept connections on that same listening socket (the kernel hands each new
connection to one of them). Each worker is a replica of its own on the shared database —
the SQLite file or PostgreSQL — with its own replica id, leases, live runs and event
loop, so runs, followers, cancels and hand-over work across workers exactly as they do
across machines (``docs/scaling.md``).

Why not uvicorn's ``workers=``: its supervisor imports the app by path in each child and
knows nothing of the drain (``app/cli/serving.py``) or of the reference backend, and a
worker it restarts is the same code path as ours anyway. Here the parent stays small: it
forwards SIGTERM/SIGINT to every worker (each drains; a second signal stops them at
once), restarts a worker that dies unasked (its runs are handed over by lease, as after
any crash, and the new worker is a new replica), and exits when all have stopped. A
worker that cannot start at all stops the whole service (exit 3) rather than loop.

The parent also makes a private runtime directory for its workers (``AGENT_WORKERS_DIR``,
removed when it exits) where each serves its ``/metrics`` figures to its siblings
(``app/ops/worker_metrics.py``). Workers on one SQLite file meet beside the file anyway
(its feed's ``<db>.workers/``); on PostgreSQL, which wakes followers and carries cancels
itself, this directory is the only thing the workers of one port share besides it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

log = logging.getLogger("agentchat.workers")

#: A worker's exit code when its app never started (``app/cli/commands.py``).
NEVER_STARTED = 3
#: How often the parent looks at its workers.
WATCH_EVERY_S = 0.2
#: The workers' runtime directory (see the module docstring).
WORKERS_DIR_ENV = "AGENT_WORKERS_DIR"
#: Workers that die this many times within ``CRASH_WINDOW_S`` stop the service.
MAX_CRASHES = 5
CRASH_WINDOW_S = 60.0


def worker_argv(fd: int, index: int, count: int, *, grace: float | None) -> list[str]:
    """The command of worker ``index``: ``agentchat serve`` on the inherited socket ``fd``."""
    argv = [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        "--listen-fd",
        str(fd),
        "--no-backend",
        "--worker",
        f"{index}/{count}",
    ]
    if grace is not None:
        argv += ["--grace", repr(grace)]
    return argv


@dataclass(slots=True)
class Supervisor:
    """Starts ``count`` workers on ``sock`` and keeps them running until told to stop."""

    sock: socket.socket
    count: int
    env: dict[str, str]
    grace: float | None = None
    preexec: Callable[[], None] | None = None
    procs: list[subprocess.Popen[bytes] | None] = field(default_factory=list)
    stopping: bool = False
    crashes: list[float] = field(default_factory=list)
    restarts: int = 0

    def spawn(self, index: int) -> subprocess.Popen[bytes]:
        fd = self.sock.fileno()
        proc = subprocess.Popen(
            worker_argv(fd, index, self.count, grace=self.grace),
            env=self.env,
            pass_fds=(fd,),
            preexec_fn=self.preexec,
            # A Ctrl-C in the terminal reaches the parent only; it forwards it once.
            start_new_session=True,
        )
        log.info("worker started", extra={"worker": index, "pid": proc.pid})
        return proc

    def forward(self, sig: int, frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT: every worker drains (a second one stops them at once)."""
        self.stopping = True
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM if sig == signal.SIGINT else sig)

    def run(self) -> int:
        with runtime_directory() as directory:
            self.env = {**self.env, WORKERS_DIR_ENV: str(directory)}
            self.sock.listen(2048)  # connections queue from now on, while the workers start
            self.procs = [self.spawn(i) for i in range(self.count)]
            previous = {s: signal.signal(s, self.forward) for s in (signal.SIGTERM, signal.SIGINT)}
            try:
                return self._watch()
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
                self._stop_all()

    def _watch(self) -> int:
        code = 0
        while True:
            alive = 0
            for i, proc in enumerate(self.procs):
                if proc is None:
                    continue
                status = proc.poll()
                if status is None:
                    alive += 1
                    continue
                if self.stopping:
                    self.procs[i] = None
                    continue
                reason = self._died(i, proc, status)
                if reason is not None:
                    log.error("stopping every worker", extra={"reason": reason})
                    code = NEVER_STARTED if status == NEVER_STARTED else 1
                    self.forward(signal.SIGTERM)
                    self.procs[i] = None
                    continue
                self.procs[i] = self.spawn(i)
                self.restarts += 1
                alive += 1
            if self.stopping and alive == 0:
                return code
            time.sleep(WATCH_EVERY_S)

    def _died(self, index: int, proc: subprocess.Popen[bytes], status: int) -> str | None:
        """A worker exited unasked: ``None`` to start another, else why the service stops."""
        how = f"signal {signal.Signals(-status).name}" if status < 0 else f"exit code {status}"
        log.warning("a worker stopped unasked", extra={"worker": index, "pid": proc.pid, "how": how})
        if status == NEVER_STARTED:
            return "a worker could not start the service"
        now = time.monotonic()
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S] + [now]
        if len(self.crashes) >= MAX_CRASHES:
            return f"workers stopped {len(self.crashes)} times within {CRASH_WINDOW_S:g} s"
        log.info("starting another worker; the stopped one's runs are handed over by lease", extra={"worker": index})
        return None

    def _stop_all(self, timeout_s: float = 60.0) -> None:
        """On the way out (also after an error here): no worker outlives the parent."""
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in live:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def runtime_directory() -> Iterator[Path]:
    """A directory only this user can enter (``mkdtemp``: mode 0700, a fresh name), in
    the system's temporary one — short, so a Unix socket's path fits — removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="agentchat-workers-"))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def worker_env(base: dict[str, str] | None, count: int, backend_url: str | None) -> dict[str, str]:
    """The workers' environment: they know they are ``count`` replicas on one database."""
    env = dict(os.environ if base is None else base)
    env["AGENT_WORKERS"] = str(count)
    if backend_url is not None:
        env["AGENT_BACKEND_URL"] = backend_url
    return env


__all__: Sequence[str] = ("WORKERS_DIR_ENV", "Supervisor", "runtime_directory", "worker_argv", "worker_env")
