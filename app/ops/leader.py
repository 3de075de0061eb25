"""Which process runs the background jobs: one leader among the processes on one database.

Several processes on one database — the workers of ``agentchat serve --workers``, and on
PostgreSQL every replica on every machine — would each run the retention pass, keyword
pruning and the start-up back-fills: the same work N times, N writers queueing for it.
They elect one leader instead, by a lock only one of them can hold (``LeaderLock``):

* on one SQLite file (``FileLock``): an exclusive ``flock`` on
  ``<runtime dir>/leader.lock``. The kernel releases it when its holder dies however it
  dies (SIGKILL included); it cannot be lost while the process lives. ``flock`` with
  ``LOCK_NB`` never blocks, so it runs on the event loop (the try:
  ``storage.file_lock``, shared with the SQLite file's writer lock).
* on PostgreSQL (``storage/postgres/leader_lock.py``): a session-level advisory lock on a
  connection of its own — one leader per database, across workers *and* replicas. It
  goes with its session: when the process dies, and also when the connection drops
  while the process lives.

``Leader`` is the policy over either lock: every ``retry_s`` a follower tries to take
the lock and a leader checks it still holds it. Jobs are given with ``when_leading``
and run only while this process leads; a leader that loses its lock stops its jobs at
once (they are cancelled) and they wait to lead again, here or nowhere, while another
process, whose jobs start when it takes the lock, carries them on. A one-shot job that
finished while leading is not run again.

What it shows: ``/readyz`` ``workers`` (``status``: where the jobs run, which lock, how
often the lead was lost) and ``/metrics`` ``agentchat_background_jobs_leader`` (1 in the
one process that leads; with ``--workers`` one series per worker) and
``agentchat_background_jobs_leadership_lost_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from app.ops.close_budget import LEADER_STOP_S
from app.ops.stopping import cancel_and_wait
from storage.file_lock import try_lock_file, write_pid
from storage.run_feed import raise_if_cancel_lost

log = logging.getLogger("agentchat.ops")

#: How long ``aclose`` waits for the campaign and the jobs once cancelled (the campaign
#: ends within ``retry_s`` and one attempt at the lock; a job that does not end is named
#: in the log and left behind rather than holding the process's shutdown): a step of the
#: close budget.
STOP_S = LEADER_STOP_S


class LeaderLock(Protocol):
    """A lock at most one process of a database holds; ``Leader`` campaigns for it."""

    #: What kind of lock, for ``/readyz``.
    kind: str
    #: Why the last attempt failed, if it could not even ask (``None``: it could).
    last_error: str | None

    async def try_acquire(self) -> bool:
        """Take the lock if nobody holds it, without waiting; whether this process holds it."""
        ...

    async def still_held(self) -> bool:
        """Whether this process still holds the lock it took."""
        ...

    async def release(self) -> None:
        """Let the lock go (also safe when not held)."""
        ...


@dataclass(slots=True)
class FileLock:
    """An exclusive ``flock`` on ``path`` (workers on one SQLite file; module docstring)."""

    path: Path
    kind: str = "file lock"
    last_error: str | None = None
    _fd: int | None = None

    async def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        fd = try_lock_file(self.path)  # storage.file_lock, as the writer lock's
        if fd is None:
            return False
        self._fd = fd
        write_pid(fd)
        return True

    async def still_held(self) -> bool:
        return self._fd is not None  # a flock lives as long as its open file

    async def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock: a sibling takes the jobs over
            self._fd = None


@dataclass(slots=True)
class Leader:
    """Runs the jobs given to ``when_leading`` while it holds ``lock``; module docstring."""

    lock: LeaderLock
    retry_s: float = 2.0
    #: What ``/readyz`` says when another process leads.
    elsewhere: str = "another worker"
    #: Set while this process leads.
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    #: Times this process took the lead, and times it lost it while alive.
    terms: int = 0
    lost: int = 0
    _term_over: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _jobs: list[asyncio.Task[Any]] = field(default_factory=list)
    #: Set by ``aclose``: the campaign ends at its next turn even if its cancel was lost.
    _closing: bool = False

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._campaign(), name="background-leader")

    async def _campaign(self) -> None:
        # Ended by ``_closing``, not by the cancel alone: on Python 3.11 ``asyncio.wait_for``
        # (the PostgreSQL lock's round trip) returns the call's result when the cancel
        # lands just as the call completes — the cancel is lost, and a loop waiting only
        # for it went on for ever, ``aclose`` and with it a worker's shutdown waiting
        # (a ``serve --workers`` worker that never exited after SIGTERM).
        while not self._closing:
            if self.is_leader:
                if not await self._held():
                    self._step_down()
            elif await self._try() and not self._closing:
                self._take_lead()
            if not self._closing:
                await asyncio.sleep(self.retry_s)

    async def _try(self) -> bool:
        try:
            return await self.lock.try_acquire()
        except Exception as exc:  # e.g. the lock file's directory went away: try again later
            self.lock.last_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning("cannot campaign for the background jobs' lock", extra={"error": self.lock.last_error})
            return False

    async def _held(self) -> bool:
        try:
            return await self.lock.still_held()
        except Exception as exc:  # a check that cannot say counts as lost: never two leaders knowingly
            self.lock.last_error = f"{type(exc).__name__}: {exc}"[:300]
            await self.lock.release()
            return False

    def _take_lead(self) -> None:
        self.terms += 1
        self._term_over = asyncio.Event()
        self.leading.set()
        log.info("this process runs the background jobs", extra={"lock": self.lock.kind})

    def _step_down(self) -> None:
        self.lost += 1
        self.leading.clear()
        self._term_over.set()  # every running job is cancelled (``_while_leading``)
        log.warning("this process lost the lead; its background jobs stop", extra={"lock": self.lock.kind})

    def when_leading(self, job: Callable[[], Awaitable[Any]], name: str) -> asyncio.Task[Any]:
        """A task that runs ``job()`` whenever this process leads (at once if it does),
        cancels it when the lead is lost, and ends when ``job()`` returns."""
        task = asyncio.create_task(self._while_leading(job, name), name=name)
        self._jobs.append(task)
        return task

    async def _while_leading(self, job: Callable[[], Awaitable[Any]], name: str) -> Any:
        while True:
            await self.leading.wait()
            term_over = self._term_over
            run: asyncio.Task[Any] = asyncio.ensure_future(job())
            over = asyncio.create_task(term_over.wait())
            try:
                await asyncio.wait({run, over}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                over.cancel()
                if not run.done():
                    run.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await run
            # This task's own cancel (the close's) may have landed while the job was
            # stopping with the lead: the wait for it above swallowed it, and the loop
            # went back to wait for the lead, for ever - the close waited ``STOP_S`` and
            # left the task behind. The task's ``cancelling()`` count still says so.
            raise_if_cancel_lost()
            if not run.cancelled():
                return run.result()
            log.info("background job stopped with the lead", extra={"job": name})

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: where the background jobs run, by which lock."""
        out: dict[str, Any] = {
            "background_jobs": "here" if self.is_leader else self.elsewhere,
            "leader_lock": self.lock.kind,
            "lead_lost": self.lost,
        }
        if not self.is_leader and self.lock.last_error:
            out["leader_lock_error"] = self.lock.last_error
        return out

    def collector(self) -> LeaderCollector:
        return LeaderCollector(self)

    async def aclose(self) -> None:
        """Stop campaigning and every job, within ``STOP_S`` whatever they do with the
        cancel, then release the lock."""
        self._closing = True
        await cancel_and_wait([t for t in [self._task, *self._jobs] if t is not None], STOP_S)
        self._task = None
        await self.lock.release()
        self.leading.clear()


def FileLeader(path: Path, retry_s: float = 2.0) -> Leader:
    """The leader of workers on one SQLite file: an exclusive ``flock`` on ``path`` (the
    name the callers and tests of the file lock have known)."""
    return Leader(FileLock(path), retry_s=retry_s)


class LeaderCollector:
    """``/metrics``: whether this process leads, read at scrape time."""

    def __init__(self, leader: Leader) -> None:
        self._leader = leader

    def describe(self) -> Iterable[Metric]:
        return ()

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "agentchat_background_jobs_leader",
            "1 in the one process that runs the background jobs (retention, keyword pruning, back-fills).",
            value=1.0 if self._leader.is_leader else 0.0,
        )
        yield CounterMetricFamily(
            "agentchat_background_jobs_leadership_lost",
            "Times this process lost the background jobs' lock while it lived (its jobs stopped).",
            value=self._leader.lost,
        )


def attach(leader: Leader, registry: CollectorRegistry) -> None:
    registry.register(leader.collector())


__all__ = ["FileLeader", "FileLock", "Leader", "LeaderLock", "attach"]
