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
forwards each SIGTERM/SIGINT to every worker (each drains; a second signal, past
``app.cli.serving.SAME_STOP_S`` after the first, ends their grace at once), restarts a
worker that dies unasked (its runs are handed over by lease, as after any crash, and the
new worker is a new replica), and exits when all have stopped. A worker that cannot start
at all stops the whole service (exit 3) rather than loop.

The parent always exits within ``stop_after_s`` of the first signal (the workers' drain,
``--grace``, plus ``STOP_MARGIN_S`` for their own close — the sum of the bounds of the
close's steps, ``app/ops/close_budget.py``, so a worker still within them is never
killed): a worker still running then — hung in its close, stopped (SIGSTOP), ignoring
SIGTERM — is SIGKILLed and the parent exits 1. Its runs are durable: their leases lapse
and the next process carries them on, as after any SIGKILL (``docs/scaling.md``). The
signal handler only counts signals; the watch loop (woken at once through
``signal.set_wakeup_fd``) forwards them to every live worker it knows, so a worker
started while a signal arrives — the first ones, or one being restarted — is signalled
too, never missed.

The parent also makes a private runtime directory for its workers (``AGENT_WORKERS_DIR``,
removed when it exits, or by the next parent when it was killed) where each serves its
``/metrics`` figures to its siblings (``app/ops/worker_metrics.py``). Workers on one
SQLite file meet where the file's feed is anyway (``storage/sqlite/runtime_dir.py``,
which ``serve`` tidies before and after the workers); on PostgreSQL, which wakes
followers and carries cancels itself, this directory is the only thing the workers of
one port share besides it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from app.cli.interrupts import end_early_sigterm
from app.ops.close_budget import CLOSE_BUDGET_S
from storage.file_lock import process_alive

log = logging.getLogger("agentchat.workers")

#: A worker's exit code when its app never started (``app/cli/serve.py``).
NEVER_STARTED = 3
#: How often the parent looks at its workers.
WATCH_EVERY_S = 0.2
#: The workers' runtime directory (see the module docstring).
WORKERS_DIR_ENV = "AGENT_WORKERS_DIR"
#: Its name in the system's temporary directory: ``<prefix><supervisor's pid>-<random>``.
RUNTIME_PREFIX = "agentchat-workers-"
#: In it, the file its supervisor holds an ``flock`` on while it runs (``runtime_directory``).
OWNER_LOCK = "supervisor.lock"
#: Workers that die this many times within ``CRASH_WINDOW_S`` stop the service.
MAX_CRASHES = 5
CRASH_WINDOW_S = 60.0
#: After the workers' drain (``--grace``), how long they may take to close before SIGKILL:
#: their close budget, every bounded step of the close at its bound (uvicorn's graceful
#: shutdown, the background tasks' end, the leader, the storage's close…;
#: ``app/ops/close_budget.py``), never a number of its own that the steps outgrow.
STOP_MARGIN_S = CLOSE_BUDGET_S
#: Exit code when a worker had to be SIGKILLed on the way out.
KILLED_ON_STOP = 1


def worker_argv(fds: Sequence[int], index: int, count: int, *, grace: float | None) -> list[str]:
    """The command of worker ``index``: ``agentchat serve`` on the inherited sockets ``fds``
    (one per address of ``--host``)."""
    argv = [
        sys.executable,
        "-m",
        "app.cli",
        "serve",
        *(arg for fd in fds for arg in ("--listen-fd", str(fd))),
        "--no-backend",
        "--worker",
        f"{index}/{count}",
    ]
    if grace is not None:
        argv += ["--grace", repr(grace)]
    return argv


@dataclass(slots=True)
class Supervisor:
    """Starts ``count`` workers on ``sockets`` (one per address of ``--host``) and keeps
    them running until told to stop."""

    sockets: Sequence[socket.socket]
    count: int
    env: dict[str, str]
    grace: float | None = None
    preexec: Callable[[], None] | None = None
    #: Descriptors every worker inherits besides the socket: the SQLite file's writer
    #: lock, which the workers share with the supervisor (``storage.sqlite.writer_lock``).
    keep_fds: tuple[int, ...] = ()
    #: How long after the first SIGTERM/SIGINT the workers may run before SIGKILL
    #: (``stop_deadline_s`` of their drain; 20 s is ``AGENT_SHUTDOWN_GRACE_S``'s default).
    stop_after_s: float = 20.0 + STOP_MARGIN_S
    procs: list[subprocess.Popen[bytes] | None] = field(default_factory=list)
    stopping: bool = False
    crashes: list[float] = field(default_factory=list)
    restarts: int = 0
    #: SIGTERM/SIGINT received (counted by the handler, forwarded by the watch loop).
    signals: int = 0
    #: Told of each SIGTERM/SIGINT, in the handler (the reference backend's keeper: a
    #: backend that ends on the same stop is no crash).
    on_signal: Callable[[], None] | None = None
    #: ``time.monotonic()`` past which live workers are SIGKILLed (set by the first stop).
    deadline: float | None = None
    #: SIGTERMs sent to each worker, by pid.
    forwarded: dict[int, int] = field(default_factory=dict)
    #: Workers SIGKILLed on the way out (pids), for the exit code and the log.
    killed: list[int] = field(default_factory=list)

    def spawn(self, index: int) -> subprocess.Popen[bytes]:
        fds = tuple(sock.fileno() for sock in self.sockets)
        proc = subprocess.Popen(
            worker_argv(fds, index, self.count, grace=self.grace),
            env=self.env,
            pass_fds=(*fds, *self.keep_fds),
            preexec_fn=self.preexec,
            # A Ctrl-C in the terminal reaches the parent only; it forwards it once.
            start_new_session=True,
        )
        log.info("worker started", extra={"worker": self.named(index), "worker_pid": proc.pid})
        return proc

    def named(self, index: int) -> str:
        """Worker ``index`` (0-based, as ``--worker`` hands it out) as its own lines name
        it (``[worker 1/2]``, ``app/cli/serve.py``): the supervisor's lines about a worker
        say the same ``1/2``, not ``0``."""
        return f"{index + 1}/{self.count}"

    def signalled(self, sig: int, frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT: counted only; the watch loop forwards it (``_forward``). Sending
        from here would miss a worker whose ``Popen`` this signal interrupted (not yet in
        ``procs``), and that worker would then keep the parent waiting for ever."""
        self.signals += 1
        if self.on_signal is not None:
            self.on_signal()
        self._begin_stop()

    def _begin_stop(self) -> None:
        self.stopping = True
        if self.deadline is None:
            self.deadline = time.monotonic() + self.stop_after_s

    def run(self) -> int:
        # Handlers first: a signal while the workers start is counted, not the default
        # action (which would leave the runtime directory behind).
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        end_early_sigterm()  # what is restored below is the default action, not ``app.cli.main``'s
        previous = {s: signal.signal(s, self.signalled) for s in (signal.SIGTERM, signal.SIGINT)}
        previous_fd = signal.set_wakeup_fd(wake_w)
        try:
            with runtime_directory() as directory:
                self.env = {**self.env, WORKERS_DIR_ENV: str(directory)}
                for sock in self.sockets:
                    sock.listen(2048)  # connections queue from now on, while the workers start
                self.procs = [None] * self.count
                try:
                    for i in range(self.count):
                        if self.stopping:
                            break
                        self.procs[i] = self.spawn(i)
                    return self._watch(wake_r)
                finally:
                    self._stop_all()
        finally:
            signal.set_wakeup_fd(previous_fd)
            for s, handler in previous.items():
                signal.signal(s, handler)
            os.close(wake_r)
            os.close(wake_w)

    def _watch(self, wake: int) -> int:
        code = 0
        while True:
            if self.stopping:
                self._forward()
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
                    self.signals = max(self.signals, 1)
                    self._begin_stop()
                    self.procs[i] = None
                    continue
                self.procs[i] = self.spawn(i)
                self.restarts += 1
                alive += 1
            if self.stopping and (alive == 0 or self._past_deadline()):
                return KILLED_ON_STOP if self.killed and code == 0 else code
            self._pause(wake)

    def _forward(self) -> None:
        """Every live worker gets as many SIGTERMs as the parent was sent, once each — also
        one started after the signal came. All of them, not two: a worker takes a second one
        that comes within ``SAME_STOP_S`` of its first for the same stop (a person's quick
        double Ctrl-C too), so the third is the one that ends its grace."""
        wanted = self.signals
        for proc in self.procs:
            if proc is None or proc.poll() is not None:
                continue
            while self.forwarded.get(proc.pid, 0) < wanted:
                proc.send_signal(signal.SIGTERM)
                self.forwarded[proc.pid] = self.forwarded.get(proc.pid, 0) + 1

    def _past_deadline(self) -> bool:
        """Past the deadline: SIGKILL every worker still running (reaped, unless stuck
        in the kernel) and forget it; True when there was a deadline to pass."""
        if self.deadline is None or time.monotonic() < self.deadline:
            return False
        live = [(i, p) for i, p in enumerate(self.procs) if p is not None and p.poll() is None]
        if live:
            log.error(
                "workers still running past the stop deadline; killed (their runs are carried on "
                "when their leases lapse)",
                extra={"pids": [p.pid for _, p in live], "after_s": self.stop_after_s},
            )
        for i, proc in live:
            proc.kill()
            self.killed.append(proc.pid)
            self.procs[i] = None
        for _, proc in live:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        return True

    def _pause(self, wake: int) -> None:
        """Sleep ``WATCH_EVERY_S``, or less: a signal writes to ``wake`` and ends it."""
        timeout = WATCH_EVERY_S
        if self.deadline is not None:
            timeout = max(0.0, min(timeout, self.deadline - time.monotonic()))
        ready, _, _ = select.select([wake], [], [], timeout)
        if ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(wake, 512):
                    pass

    def _died(self, index: int, proc: subprocess.Popen[bytes], status: int) -> str | None:
        """A worker exited unasked: ``None`` to start another, else why the service stops."""
        how = f"signal {signal.Signals(-status).name}" if status < 0 else f"exit code {status}"
        log.warning("a worker stopped unasked", extra={"worker": self.named(index), "worker_pid": proc.pid, "how": how})
        if status == NEVER_STARTED:
            return "a worker could not start the service"
        now = time.monotonic()
        self.crashes = [t for t in self.crashes if now - t < CRASH_WINDOW_S] + [now]
        if len(self.crashes) >= MAX_CRASHES:
            return f"workers stopped {len(self.crashes)} times within {CRASH_WINDOW_S:g} s"
        log.info(
            "starting another worker; the stopped one's runs are handed over by lease",
            extra={"worker": self.named(index)},
        )
        return None

    def _stop_all(self) -> None:
        """On the way out (also after an error here): no worker outlives the parent."""
        live = [p for p in self.procs if p is not None and p.poll() is None]
        for proc in live:
            if not self.forwarded.get(proc.pid):
                proc.send_signal(signal.SIGTERM)
        deadline = self.deadline if self.deadline is not None else time.monotonic() + self.stop_after_s
        for proc in live:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                self.killed.append(proc.pid)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(10)


def stop_deadline_s(grace_s: float, close_budget_s: float = STOP_MARGIN_S) -> float:
    """How long the parent waits for its workers after the first signal: their drain
    (``--grace`` / ``AGENT_SHUTDOWN_GRACE_S``) and their close budget (``STOP_MARGIN_S``;
    a test gives a short one)."""
    return grace_s + close_budget_s


@contextlib.contextmanager
def runtime_directory() -> Iterator[Path]:
    """A directory only this user can enter (``mkdtemp``: mode 0700, a fresh name), in
    the system's temporary one — short, so a Unix socket's path fits — removed at the end.

    Named after this process (``agentchat-workers-<pid>-<random>``), and this process
    holds an ``flock`` on its ``supervisor.lock`` (``OWNER_LOCK``) for as long as it
    runs: a supervisor killed by SIGKILL removes nothing, so the next one removes the
    directories whose lock nobody holds (``remove_dead_runtime_directories``) before it
    makes its own. The directory is made and locked under a hidden name and then renamed
    to its own, so no other supervisor ever sees it unlocked."""
    parent = Path(tempfile.gettempdir())
    remove_dead_runtime_directories(parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{RUNTIME_PREFIX}{os.getpid()}-", dir=parent))
    directory, owner = staging.with_name(staging.name[1:]), -1
    try:
        owner = os.open(staging / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # not inheritable
        fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a file no one else has open
        if os.path.lexists(directory):  # rename would replace an empty directory of that name
            raise FileExistsError(errno.EEXIST, "a runtime directory of that name exists", str(directory))
        os.rename(staging, directory)
    except BaseException:
        if owner >= 0:
            os.close(owner)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)
        os.close(owner)


def remove_dead_runtime_directories(parent: Path) -> None:
    """Remove this user's ``agentchat-workers-<pid>-…`` directories in ``parent`` whose
    supervisor no longer runs (``owner_gone``): nothing else uses one (its workers die
    with it)."""
    for path in parent.glob(f"{RUNTIME_PREFIX}*-*"):
        pid = path.name[len(RUNTIME_PREFIX):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and owner_gone(path, int(pid)):
                shutil.rmtree(path, ignore_errors=True)


def owner_gone(directory: Path, pid: int) -> bool:
    """Whether the supervisor that made ``directory`` has ended: nobody holds the lock
    on its ``OWNER_LOCK`` (the kernel released it with the holder's last descriptor,
    however it died). Not whether process ``pid`` runs: a temporary directory shared
    between containers (a pod's volume, a bind-mounted ``/tmp``) holds supervisors of
    other pid namespaces, whose pids name nothing or someone else here — a live
    supervisor's directory was removed under its workers, and a dead one's pid 1 kept
    its directory for good. A flock is one across namespaces. Only a directory without
    the file (made before the lock was) is judged by ``pid``."""
    try:
        fd = os.open(directory / OWNER_LOCK, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return not process_alive(pid)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def worker_env(base: dict[str, str] | None, count: int, backend_url: str | None) -> dict[str, str]:
    """The workers' environment: they know they are ``count`` replicas on one database."""
    env = dict(os.environ if base is None else base)
    env["AGENT_WORKERS"] = str(count)
    if backend_url is not None:
        env["AGENT_BACKEND_URL"] = backend_url
    return env


__all__: Sequence[str] = (
    "STOP_MARGIN_S",
    "WORKERS_DIR_ENV",
    "Supervisor",
    "runtime_directory",
    "stop_deadline_s",
    "worker_argv",
    "worker_env",
)
