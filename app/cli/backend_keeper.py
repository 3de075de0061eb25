"""Keeps the reference backend that ``agentchat serve`` started running: a child that
exits unasked (killed, crashed) is started again on the same port and database.

It used to be logged once and left dead, the agent serving on with every workflow and
table tool failing until someone restarted ``serve``. Now each exit is an ERROR line
saying when the next start is tried; the starts back off (``FIRST_DELAY_S`` doubling up
to ``MAX_DELAY_S``), and a backend that exits ``RESTART_LIMIT`` + 1 times within
``RESTART_WINDOW_S`` is not started again (it would only crash again: a broken database
file, a port someone else took) - one ERROR line says so, as the supervisor of
``--workers`` stops restarting a worker that keeps dying (``app/cli/workers.py``). Its
state goes to ``/readyz`` through a file (``app/ops/backend_state.py``).

A thread of ``serve``'s process waits on the child (the main thread serves); it starts
the next child itself, which then gets SIGTERM if ``serve`` dies outright
(``app/cli/children.py``: the thread outlives every child it starts).

A stop that signals every process at once is no crash: systemd's default stop
(``KillMode=control-group``) SIGTERMs the unit's whole cgroup, the backend with
``serve``, and the backend ends at once while ``serve`` drains its live runs. ``serve``'s
own SIGTERM/SIGINT handler tells the keeper (``serve_stopping``); a backend that ends on
SIGTERM then - or up to ``STOP_SIGNAL_WINDOW_S`` before it: the two signals arrive
together, and either process may run its handler first - is one INFO line and started
again at once, so the drain's workflow and table tools still have a backend; it counts
towards no give-up, and the stop ends it after the drain as usual.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import threading
import time
from pathlib import Path

from app.cli.children import die_with_parent
from app.cli.counts import plural
from app.ops.backend_state import GIVEN_UP, RESTARTING, RUNNING, KeptBackend, exit_described, write_state

log = logging.getLogger("agentchat.cli")

#: Restarts allowed within ``RESTART_WINDOW_S``; one more exit in the window ends them.
RESTART_LIMIT = 5
RESTART_WINDOW_S = 60.0
#: The wait before the first restart after a quiet window, doubled for each further exit
#: within the window, up to ``MAX_DELAY_S``.
FIRST_DELAY_S = 0.5
MAX_DELAY_S = 8.0
#: How long a restarted backend has to answer ``/healthz``; past it, it is killed and
#: counts as one more exit.
START_TIMEOUT_S = 30.0
#: ``serve``'s stop waits this long for the keeper's thread.
JOIN_TIMEOUT_S = 15.0
#: A backend ended by SIGTERM waits this long for ``serve``'s own stop signal before its
#: exit counts as unasked (a stop that signals both: whichever handler runs first).
STOP_SIGNAL_WINDOW_S = 2.0
#: How often the keeper's thread looks for ``serve``'s stop signal while it waits for it
#: (``serve_stopped`` is a plain flag: the signal handler takes no lock).
SERVE_STOP_POLL_S = 0.02
#: How a child ended by SIGTERM exits: killed by it, or exiting ``128 + 15`` after its
#: own handler (uvicorn's shutdown re-raises it).
SIGTERM_EXITS = frozenset({-signal.SIGTERM, 128 + signal.SIGTERM})


class BackendKeeper:
    """Watches ``first`` (already answering at ``url``) and starts ``argv`` again whenever
    the child exits unasked; ``stop`` ends the child and the watching."""

    def __init__(
        self,
        argv: list[str],
        url: str,
        first: subprocess.Popen[bytes],
        state_file: Path,
        *,
        restart_limit: int = RESTART_LIMIT,
        window_s: float = RESTART_WINDOW_S,
        first_delay_s: float = FIRST_DELAY_S,
    ) -> None:
        self.argv = argv
        self.restart_limit = restart_limit
        self.window_s = window_s
        self.first_delay_s = first_delay_s
        self.url = url
        self.state_file = state_file
        self._proc = first
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        #: ``serve`` received SIGTERM/SIGINT (``serve_stopping``): it drains, then stops us.
        #: A plain attribute, not a ``threading.Event``: it is set in a signal handler, and
        #: ``Event.set`` holds a non-reentrant lock that a second signal's handler, run
        #: between two of its bytecodes, waited on for ever (``serve``'s main thread hung).
        self.serve_stopped = False
        self._exits: list[float] = []
        self._restarts = 0
        self._last_exit: str | None = None
        #: Why the last start made no child at all (``_start_again``), until counted.
        self._not_started: str | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._say(KeptBackend(RUNNING))
        self._thread = threading.Thread(target=self._keep, name="backend-keeper", daemon=True)
        self._thread.start()

    def serve_stopping(self) -> None:
        """``serve`` received SIGTERM or SIGINT and drains (called from its signal handler):
        a backend ending on SIGTERM now is stopped with it, not crashed. One attribute
        store, no lock: another signal may run this again between any two bytecodes."""
        self.serve_stopped = True

    def stop(self) -> None:
        """End the child (SIGTERM, then SIGKILL after 10 s) and the watching; a start under
        way is not begun, or is ended."""
        self._stopping.set()
        with self._lock:
            proc = self._proc
        stop_child(proc)
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
        with self._lock:
            stop_child(self._proc)  # one the thread started after the stop began
        self.state_file.unlink(missing_ok=True)

    def _keep(self) -> None:
        while True:
            proc = self._proc
            not_started, self._not_started = self._not_started, None
            code = proc.wait()  # the last child's, at once when the last start made none
            if self._stopping.is_set():
                return
            if not not_started and self._stopped_with_serve(proc.pid, code):
                if not self._start_again():
                    return
                continue
            if self._stopping.is_set():  # stopped while it waited for serve's signal
                return
            now = time.monotonic()
            self._exits = [t for t in self._exits if now - t < self.window_s] + [now]
            how = self._last_exit = f"not started: {not_started}" if not_started else exit_described(code)
            if len(self._exits) > self.restart_limit:
                self._give_up(proc.pid, code, how)
                return
            delay = min(MAX_DELAY_S, self.first_delay_s * 2 ** (len(self._exits) - 1))
            log.error(
                "the reference backend exited (%s): starting it again in %g s (restart %d of at most %d within "
                "%g s); workflow and table tools fail meanwhile", how, delay, len(self._exits), self.restart_limit,
                self.window_s,
                extra={"url": self.url, "backend_pid": proc.pid, "exit_code": code, "restart_in_s": delay},
            )
            self._say(KeptBackend(RESTARTING, self._restarts, how, time.time() + delay))
            if self._stopping.wait(delay) or not self._start_again():
                return

    def _stopped_with_serve(self, pid: int, code: int) -> bool:
        """Whether this exit is the backend's share of a stop that signalled ``serve`` too
        (then said at INFO, and the backend is started again for the drain)."""
        if code not in SIGTERM_EXITS or not self._serve_stops_within(STOP_SIGNAL_WINDOW_S):
            return False
        if self._stopping.is_set():  # the drain is over meanwhile: nothing to start again for
            return True
        self._last_exit = exit_described(code)
        log.info(
            "the reference backend was stopped with serve (%s: a stop that signals every process, as systemd's "
            "KillMode=control-group does): starting it again for the drain's workflow and table tools",
            self._last_exit, extra={"url": self.url, "backend_pid": pid, "exit_code": code},
        )
        self._say(KeptBackend(RESTARTING, self._restarts, self._last_exit, time.time()))
        return True

    def _serve_stops_within(self, window_s: float) -> bool:
        """Whether ``serve`` is stopping or starts to within ``window_s``: the flag looked
        at every ``SERVE_STOP_POLL_S`` (this thread's wait; the handler only sets it)."""
        deadline = time.monotonic() + window_s
        while not self.serve_stopped:
            if time.monotonic() >= deadline:
                return False
            time.sleep(SERVE_STOP_POLL_S)
        return True

    def _start_again(self) -> bool:
        """Start the next child and wait until it answers; ``False`` when stopping."""
        with self._lock:
            if self._stopping.is_set():
                return False
            # In a session of its own, as the first (``reference_backend``): a Ctrl-C reaches serve alone.
            try:
                self._proc = subprocess.Popen(
                    self.argv, preexec_fn=die_with_parent(thread_outlives_child=True), start_new_session=True
                )
            except OSError as exc:  # no child at all: its interpreter gone (a virtualenv made anew), no memory
                # Counted as one more exit (``_keep``): it ended this thread, /readyz saying restarting for ever.
                self._not_started = f"{type(exc).__name__}: {exc}"[:300]
                return True
            proc = self._proc
        self._restarts += 1
        deadline = time.monotonic() + START_TIMEOUT_S
        while proc.poll() is None and not self._stopping.is_set():
            if _answers_healthz(self.url):
                log.log(
                    logging.INFO if self.serve_stopped else logging.WARNING,  # a stop's, or a crash's
                    "the reference backend answers again (restarted %s)", plural(self._restarts, "time"),
                    extra={"url": self.url, "backend_pid": proc.pid, "restarts": self._restarts},
                )
                self._say(KeptBackend(RUNNING, self._restarts, self._last_exit))
                return True
            if time.monotonic() > deadline:
                log.error("the restarted reference backend did not answer within %g s; killed", START_TIMEOUT_S,
                          extra={"url": self.url, "backend_pid": proc.pid})
                proc.kill()
                break
            self._stopping.wait(0.1)
        return not self._stopping.is_set()  # it exited: the loop counts that exit

    def _give_up(self, pid: int, code: int, how: str) -> None:
        log.error(
            "the reference backend exited (%s), %d times within %g s: not started again; workflow and table tools "
            "fail until agentchat serve is restarted", how, len(self._exits), self.window_s,
            extra={"url": self.url, "backend_pid": pid, "exit_code": code, "restarts": self._restarts},
        )
        self._say(KeptBackend(GIVEN_UP, self._restarts, how, None, len(self._exits), self.window_s))

    def _say(self, state: KeptBackend) -> None:
        """Write the state for ``/readyz``; a file that cannot be written costs ``/readyz``
        its view, never the restarts."""
        try:
            write_state(self.state_file, state)
        except OSError as exc:
            log.warning("cannot write the reference backend's state for /readyz: %s", exc,
                        extra={"path": str(self.state_file)})


def stop_child(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (uvicorn shuts down gracefully and the database is closed), SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _answers_healthz(url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200
    except httpx.TransportError:
        return False


__all__ = ["RESTART_LIMIT", "RESTART_WINDOW_S", "BackendKeeper", "stop_child"]
