"""The ordered background writer both engines use, and their write health.

Appends that must not slow the stream (run events, checkpoints, the tool-call log) are
*items* on a queue that one task commits in batches. An item's statements commit
together, after every item queued before it; ``on_commit`` tells its producer when it
is durable, ``on_fail`` when it never will be. A transient failure (busy, locked,
connection lost, disk full) is retried with backoff for ``retry_s``; after that the
batch and everything queued behind it fail with ``StorageUnavailable`` (so producers end
their runs loudly and in order), ``healthy`` turns false and ``stats`` counts it. It
gives up only after an attempt *begun* past the window: an attempt that outlasted the
window's end is tried once more at once. Why: a replica paused (SIGSTOP, a frozen VM)
inside an attempt finds, when it runs again, its session ended by the server and the
window spent while it was stopped — without that last try it took its own pause for an
outage and ended its runs with ``storage_unavailable`` for its followers, under ids the
replica that took the runs over meanwhile had stored other events with; the last try
meets the lease check instead (``LeaseLost``: the runs are dropped quietly). A real
outage that fails fast (server down, connection refused) is detected as before (its last
attempt already began past the window); one whose attempts hang is detected one
attempt's length later (bounded by the pool and lock timeouts). A
constraint error re-runs the batch's items one by one so only the bad one fails. An
engine that refuses outright (``StorageUnavailable`` from ``commit_batch``: SQLite's file
was removed or replaced) is not retried: the batch and everything behind it fail at once.

An engine supplies only how a batch is committed (``commit_batch``) and which errors
are transient; queueing, ordering, retries and health are this module's, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from storage.errors import StorageUnavailable

log = logging.getLogger("agentchat.storage")

T = TypeVar("T")
Statement = tuple[str, Sequence[Any]]
MAX_BATCH_ITEMS = 500


@dataclass(slots=True)
class WriteStats:
    batches: int = 0
    retries: int = 0
    failures: int = 0


@dataclass(slots=True)
class WriteItem:
    """Statements that commit together, with whoever waits on them."""

    statements: Sequence[Statement]
    on_commit: Callable[[], None] | None = None
    on_fail: Callable[[BaseException], None] | None = None
    future: asyncio.Future[None] | None = None

    def committed(self) -> None:
        if self.on_commit is not None:
            self.on_commit()
        if self.future is not None and not self.future.done():
            self.future.set_result(None)

    def failed(self, exc: BaseException) -> None:
        if self.on_fail is not None:
            try:
                self.on_fail(exc)
            except Exception:  # a failing handler must not stop the writer
                log.exception("write failure handler raised")
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)


@dataclass(slots=True)
class WriteHealth:
    """Whether writes currently succeed, why not, and how often they were retried."""

    healthy: bool = True
    last_error: str | None = None
    stats: WriteStats = field(default_factory=WriteStats)

    def succeeded(self) -> None:
        if not self.healthy:
            log.warning("storage writes succeed again")
        self.healthy = True
        self.last_error = None

    def gave_up(self, exc: BaseException) -> None:
        self.healthy = False
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self.stats.failures += 1


def backoff(attempt: int) -> float:
    return float(min(1.0, 0.025 * (2 ** min(attempt, 6))))


def group_consecutive(statements: Iterable[Statement]) -> list[tuple[str, list[Sequence[Any]]]]:
    """Runs of the same SQL, in order: one ``executemany`` per run, not one call per row."""
    groups: list[tuple[str, list[Sequence[Any]]]] = []
    for sql, params in statements:
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    return groups


async def retrying(
    attempt_once: Callable[[], Awaitable[T]],
    *,
    transient: Callable[[BaseException], bool],
    retry_s: float,
    health: WriteHealth,
    deadline: float | None = None,
) -> T:
    """Run a transaction, retried as a whole while the failure is transient; then
    ``StorageUnavailable``. Other errors propagate at once.

    ``deadline`` (``time.monotonic()``): a request not yet acknowledged has one storage
    budget for all its steps (``app/server/storage_budget.py``), so its retries stop
    there even when ``retry_s`` — the ride-out meant for acknowledged work — is longer; one already past
    it is refused without an attempt (nothing is stored that its client never hears of)."""
    if deadline is not None and time.monotonic() >= deadline:
        raise StorageUnavailable("the request's storage budget is spent")
    deadline = time.monotonic() + retry_s if deadline is None else min(deadline, time.monotonic() + retry_s)
    attempt = 0
    while True:
        try:
            return await attempt_once()
        except StorageUnavailable as exc:  # the engine refused outright (its file is gone)
            health.gave_up(exc)
            raise
        except Exception as exc:
            if not transient(exc):
                raise
            attempt += 1
            if time.monotonic() >= deadline:
                health.gave_up(exc)
                raise StorageUnavailable(f"database write failed after {attempt} attempts: {exc}") from exc
            health.stats.retries += 1
            await asyncio.sleep(backoff(attempt))


class OrderedWriter:
    """The queue and the one task that drains it (see the module docstring)."""

    def __init__(
        self,
        commit_batch: Callable[[Sequence[WriteItem]], Awaitable[None]],
        *,
        transient: Callable[[BaseException], bool],
        retry_s: float,
        health: WriteHealth,
    ) -> None:
        self._commit_batch = commit_batch
        self._transient = transient
        self.retry_s = retry_s
        self.health = health
        self._queue: asyncio.Queue[WriteItem] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name="storage-writer")

    async def close(self) -> None:
        """Commit what is queued (bounded), stop, and fail anything left loudly."""
        if self._closed:
            return
        self._closed = True
        if self._task is not None:
            with contextlib.suppress(StorageUnavailable, TimeoutError):
                await asyncio.wait_for(self._flush_open(), timeout=self.retry_s + 5)
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        while not self._queue.empty():
            self._queue.get_nowait().failed(StorageUnavailable("storage closed before this write"))

    def enqueue(
        self,
        statements: Sequence[Statement],
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Queue statements that commit together, after everything queued before them."""
        item = WriteItem(statements, on_commit, on_fail)
        if self._closed:
            item.failed(StorageUnavailable("storage is closed"))
            return
        self._queue.put_nowait(item)

    async def commit(self, statements: Sequence[Statement], *, on_commit: Callable[[], None] | None = None) -> None:
        """Queue statements and wait until they (and all before them) are committed."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        item = WriteItem(statements, on_commit, None, fut)
        if self._closed or self._task is None or self._task.done():
            item.failed(StorageUnavailable("the storage writer is not running"))
        else:
            self._queue.put_nowait(item)
        await fut

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        if self._closed or self._task is None or self._task.done():
            return
        await self.commit(())

    async def _flush_open(self) -> None:
        if self._task is None or self._task.done():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(WriteItem((), None, None, fut))
        await fut

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH_ITEMS and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            await self._write_batch(batch)

    async def _write_batch(self, batch: list[WriteItem]) -> None:
        deadline = time.monotonic() + self.retry_s
        attempt = 0
        while True:
            started = time.monotonic()
            try:
                await self._commit_batch(batch)
            except StorageUnavailable as exc:  # the engine refused outright: no retry
                self._give_up(batch, exc, exc)
                return
            except Exception as exc:
                if not self._transient(exc):
                    await self._write_one_by_one(batch)
                    return
                attempt += 1
                if started >= deadline:
                    err = StorageUnavailable(f"database write failed after {attempt} attempts: {exc}")
                    err.__cause__ = exc
                    self._give_up(batch, exc, err)
                    return
                self.health.stats.retries += 1
                if attempt == 1:
                    log.warning("storage busy; retrying", extra={"error": str(exc), "items": len(batch)})
                if time.monotonic() < deadline:
                    await asyncio.sleep(backoff(attempt))
                # Else the window ran out *during* this attempt (a process paused inside
                # it): one more at once, on a fresh connection (the module docstring).
                continue
            self.health.stats.batches += 1
            for item in batch:
                item.committed()
            return

    def _give_up(self, batch: list[WriteItem], exc: BaseException, err: StorageUnavailable) -> None:
        self.health.gave_up(exc)
        # Everything queued behind the batch would commit out of order: it fails too,
        # so producers can end their runs loudly and in order.
        while not self._queue.empty():
            batch.append(self._queue.get_nowait())
        log.error("storage write gave up", extra={"items": len(batch), "error": str(exc)})
        for item in batch:
            item.failed(err)

    async def _write_one_by_one(self, batch: list[WriteItem]) -> None:
        for item in batch:
            try:
                await self._commit_batch([item])
            except Exception as exc:
                log.error("storage write rejected", extra={"error": str(exc)})
                item.failed(exc)
            else:
                item.committed()


async def finish_even_if_cancelled(work: Awaitable[T]) -> T:
    """Await ``work``; a cancelled caller still lets it finish (commit or roll back)
    before the cancellation propagates, so no connection is left mid-transaction (both
    engines' transactions and batches run through it)."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await task
        raise


class QueuedWrites:
    """The writer-facing face both engines' database classes share: queueing through
    their ``OrderedWriter`` (``_queue``) and the health it keeps (``health``)."""

    _queue: OrderedWriter
    health: WriteHealth

    def start(self) -> None:
        """Start the background writer (after migrations)."""
        self._queue.start()

    @property
    def healthy(self) -> bool:
        return self.health.healthy

    @property
    def last_error(self) -> str | None:
        return self.health.last_error

    @property
    def stats(self) -> WriteStats:
        return self.health.stats

    def enqueue(
        self,
        statements: Sequence[Statement],
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Queue statements that commit together, after everything queued before them."""
        self._queue.enqueue(statements, on_commit=on_commit, on_fail=on_fail)

    async def commit(self, statements: Sequence[Statement], *, on_commit: Callable[[], None] | None = None) -> None:
        """Queue statements and wait until they (and all before them) are committed."""
        await self._queue.commit(statements, on_commit=on_commit)

    async def flush(self) -> None:
        """Wait until everything queued so far is committed (or has failed)."""
        await self._queue.flush()

    @property
    def queued(self) -> int:
        return self._queue.queued
