"""The one background worker that runs the buckets' graph DDL (``kb_graphs``): builds
and drops queued by ``kb_graph_builds.GraphUpkeep``, one at a time, on one autocommit
connection, under a DDL lock shared with every replica.

Why apart: *when* a graph is due (a write, a load's end, the repair at open) is one
question, *how* a build runs without deadlocking writers or other replicas is another;
this module is the second.

One graph DDL at a time on ``kb_chunks``, in a process (one task, one connection) and
across replicas (a session advisory lock). The lock is only ever *tried*, and polled:
a session blocked in ``pg_advisory_lock`` keeps a snapshot open, and the concurrent build
holding the lock waits for every older snapshot before it finishes — a deadlock. Two
concurrent builds of different graphs would wait for each other the same way (a partial
expression index is not one PostgreSQL lets other builds ignore), hence one lock for
every graph, not one per graph.

A build that fails leaves an INVALID index: it is dropped at once when the connection
still works, else by the next build of that graph (a write into the bucket, the next
open's repair), which drops an invalid leftover (``DROP INDEX CONCURRENTLY``) before
building; failures are logged and listed in the KB's status (``status``) and the bucket
stays searchable, exactly. ``stop`` (the storage's close) cancels the build on the server
(``cancel_safe``) and closes the connection, releasing the lock; the cancelled build's
invalid leftover is the next repair's. Whoever waited for a job the close cancelled is
told ``False`` (not built here), never a ``CancelledError`` of a cancel it did not ask for.

Each build asks for the memory its graph needs (``kb_graphs.graph_build_memory_kb``), not
a flat 2 GB. A parallel build allocates that memory whole as one dynamic shared memory
segment; where ``/dev/shm`` is too small for it (Docker's 64 MB) the build fails
("could not resize shared memory segment") and is run again serially, which needs no
segment — said in a WARNING naming the fix (``shm_size``), counted (``serial_builds``,
``/metrics``) and listed in the status (``graph_builds_serial``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.kb_graphs import (
    buckets_past,
    drop_ddl,
    graph_ddl,
    graph_name,
    graph_state,
    index_state,
    set_build_memory,
    shared_memory_short,
)

log = logging.getLogger("agentchat.storage")

#: The advisory lock every graph build and drop of the service takes (tried, never waited on).
DDL_LOCK = "kb_chunks_hnsw:ddl"
#: The builders' connections, by name (``pg_stat_activity``; the tests find them so).
APPLICATION_NAME = "agentchat-kb-graphs"
#: How long the close's cancel of a build on the server may take (``cancel_safe``).
CANCEL_S = 5.0


@dataclass(slots=True)
class GraphJob:
    """A build of one graph, or a drop of named graphs; ``waiters`` learn how it went."""

    dim: int = 0
    bucket: str = ""
    drop: tuple[str, ...] = ()
    #: Drop only those still invalid (the repair's leftovers: another replica may have
    #: built one of them whole since they were read).
    only_invalid: bool = False
    #: Drop only while this bucket is still gone: a bucket of that name made again
    #: since has rows the graph (a partial index on the name) indexes, as its own.
    gone_bucket: str | None = None
    waiters: list[asyncio.Future[bool]] = field(default_factory=list)

    @property
    def key(self) -> tuple[Any, ...]:
        return ("drop", self.drop) if self.drop else ("build", self.dim, self.bucket)


def _tell(job: GraphJob, outcome: bool | BaseException) -> None:
    """Each waiter of ``job`` not answered yet learns ``outcome`` (a result or an error)."""
    for fut in job.waiters:
        if fut.done():
            continue
        if isinstance(outcome, BaseException):
            fut.set_exception(outcome)
        else:
            fut.set_result(outcome)


async def _cancel_on_server(conn: Conn) -> None:
    """Cancel the connection's statement on the server. Failing to (the cancel request
    timed out: the server unreachable) is logged, not raised: the worker's close goes on
    (its waiters told, its connection closed) as it would have."""
    try:
        await conn.cancel_safe(timeout=CANCEL_S)
    except Exception as exc:
        log.warning(
            "knowledge base: cancelling a graph build on the server failed: %s: %s; its session is closed",
            type(exc).__name__,
            exc,
        )


def _quiet(fut: asyncio.Future[bool]) -> None:
    """A build nobody awaits (``after_write``'s) must not warn 'exception never retrieved'."""
    if not fut.cancelled():
        fut.exception()


class GraphBuildQueue:
    """The queued graph jobs and the one task that runs them (see the module
    docstring); ``GraphUpkeep`` builds on it and decides what to queue."""

    def __init__(
        self,
        db: PostgresDatabase,
        threshold: Callable[[], int],
        *,
        changed: Callable[[], None] = lambda: None,
        connect_timeout: int = 10,
    ) -> None:
        self._db = db
        self._threshold = threshold
        #: Told when a graph was built or dropped here: the searches' cached counts of
        #: which graphs are valid go stale (``VectorSearch.changed``).
        self._changed = changed
        self.connect_timeout = connect_timeout
        #: How often a build waiting for another replica's (the DDL lock) tries again.
        self.lock_poll_s = 0.5
        self._jobs: dict[tuple[Any, ...], GraphJob] = {}
        self._worker: asyncio.Task[None] | None = None
        #: The job this process runs now, and the graphs whose last build failed (why).
        self._running: GraphJob | None = None
        self.failed: dict[tuple[int, str], str] = {}
        #: Builds here that failed in parallel for want of shared memory and ran again
        #: serially (``/metrics``), and the graphs whose last build did (why; status).
        self.serial_builds = 0
        self.serial: dict[tuple[int, str], str] = {}
        #: Set by ``GraphUpkeep.stop`` (the storage's close): no new worker after it.
        self._stopped = False

    # ------------------------------------------------------------------ the worker
    def request(self, dim: int, bucket: str) -> asyncio.Future[bool]:
        """Queue the build of the bucket's graph (once: a build already queued is
        shared); the future says whether it was built here (``False``: it was there,
        the bucket is not past the threshold any more, or the storage closed first —
        the next open's repair builds it)."""
        return self._queue(GraphJob(dim=dim, bucket=bucket))

    def _queue(self, job: GraphJob) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        fut.add_done_callback(_quiet)
        if self._stopped:
            fut.set_result(False)  # not built here: the next open's repair builds it
            return fut
        self._jobs.setdefault(job.key, job).waiters.append(fut)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work(), name="kb-graph-builds")
        return fut

    async def _connect(self) -> Conn:
        conn: Conn = await psycopg.AsyncConnection.connect(
            self._db.url, autocommit=True, connect_timeout=self.connect_timeout, application_name=APPLICATION_NAME
        )
        # No statement or lock timeout: waiting here holds no writer, and a timeout in a
        # concurrent build's last phase would waste the build. Its memory is set per
        # build, for the bucket's graph (``_build``).
        await conn.execute("SET statement_timeout = 0")
        await conn.execute("SET lock_timeout = 0")
        return conn

    async def _work(self) -> None:
        """Run the queued jobs one after another, on one connection, until none is left.
        However it ends, every waiter of a job it took or left queued is told: ``False``
        when cancelled (the storage's close), the error when the worker itself failed
        (not a build: a build's failure is its own waiters' answer) - never left waiting."""
        conn: Conn | None = None
        current: GraphJob | None = None
        try:
            while self._jobs:
                key, current = next(iter(self._jobs.items()))
                self._running = current
                try:
                    if conn is None or conn.closed or conn.broken:
                        conn = await self._connect()
                    outcome: bool | BaseException = await self._run(conn, current)
                except asyncio.CancelledError:
                    if conn is not None and not conn.closed:
                        await _cancel_on_server(conn)
                    raise
                except Exception as exc:
                    outcome = exc
                finally:
                    self._running = None
                self._jobs.pop(key, None)
                if outcome is True:
                    self._changed()
                _tell(current, outcome)
                current = None
        except asyncio.CancelledError:
            # The storage's close (``GraphUpkeep.stop``): the jobs are not done *here*,
            # which is what ``False`` says; a cancel would reach a waiter that was not
            # cancelled itself (a bulk load whose rows committed) as its own cancellation.
            self._tell_all(current, False)
            raise
        except Exception as exc:
            # Not a build's failure (each is its waiters' answer above) but the worker's
            # own (``changed`` raising, a bug): the waiters of the job it ran and of every
            # queued one hear it; the next request starts a new worker.
            log.error("knowledge base: the graph builds' worker failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
            self._tell_all(current, exc)
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()  # releases the DDL lock with the session

    def _tell_all(self, current: GraphJob | None, outcome: bool | BaseException) -> None:
        """Answer the job the worker was on and every queued one with ``outcome``; forget them."""
        if current is not None:
            _tell(current, outcome)
        for job in self._jobs.values():
            _tell(job, outcome)
        self._jobs.clear()

    async def _run(self, conn: Conn, job: GraphJob) -> bool:
        """One job under the DDL lock. Cancelled, the lock is left to the worker, which
        cancels the statement on the server and closes the session (releasing it): the
        connection is still busy with the cancelled statement here."""
        await self._lock(conn)
        try:
            if job.drop and job.gone_bucket is not None and await _bucket_exists(conn, job.gone_bucket):
                outcome = False
            elif job.drop:
                for name in job.drop:
                    if not (job.only_invalid and await index_state(conn, name) is not False):
                        await conn.execute(drop_ddl(name))
                outcome = True
            else:
                outcome = await self._build(conn, job.dim, job.bucket)
        except psycopg.Error as exc:
            what = f"dropping {', '.join(job.drop)}" if job.drop else f"building the graph of bucket {job.bucket!r}"
            log.warning(
                "knowledge base: %s failed: %s: %s; the bucket is searched exactly, and the next write into it "
                "or the next open tries again",
                what,
                type(exc).__name__,
                exc,
            )
            if not job.drop:
                self.failed[(job.dim, job.bucket)] = f"{type(exc).__name__}: {exc}"
            await self._unlock(conn)
            raise
        await self._unlock(conn)
        return outcome

    @staticmethod
    async def _unlock(conn: Conn) -> None:
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):
                await conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (DDL_LOCK,))

    async def _lock(self, conn: Conn) -> None:
        """The DDL lock, tried until it is free (see the module docstring: never waited on)."""
        while True:
            cur = await conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (DDL_LOCK,))
            row = await cur.fetchone()
            if row is not None and row[0]:
                return
            await asyncio.sleep(self.lock_poll_s)

    async def _build(self, conn: Conn, dim: int, bucket: str) -> bool:
        """Under the DDL lock: nothing when the graph is valid or the bucket no longer
        past the threshold; an invalid leftover dropped first (no build of ours is under
        way: we hold the lock); then ``CREATE INDEX CONCURRENTLY``, its invalid index
        dropped at once if it fails."""
        state = await graph_state(conn, dim, bucket)
        if state:
            self.failed.pop((dim, bucket), None)
            return False
        name = graph_name(dim, bucket)
        if state is False:
            log.info(
                "knowledge base: dropping the invalid graph %s of bucket %r (a failed or cancelled build)", name, bucket
            )
            await conn.execute(drop_ddl(name))
        if (dim, bucket) not in await buckets_past(conn, self._threshold(), [bucket]):
            return False
        memory_kb = await set_build_memory(conn, dim, bucket)
        log.info(
            "knowledge base: building the graph of bucket %r (%d dimensions) concurrently in %d MB",
            bucket,
            dim,
            -(-memory_kb // 1024),
        )
        started = time.monotonic()
        try:
            await _create(conn, dim, bucket)
            self.serial.pop((dim, bucket), None)
        except psycopg.Error as exc:
            if not shared_memory_short(exc):
                raise
            await self._build_serially(conn, dim, bucket, memory_kb, exc)
        log.info(
            "knowledge base: built the graph of bucket %r (%d dimensions) in %.1f s",
            bucket,
            dim,
            time.monotonic() - started,
        )
        self.failed.pop((dim, bucket), None)
        return True

    async def _build_serially(self, conn: Conn, dim: int, bucket: str, memory_kb: int, exc: psycopg.Error) -> None:
        """The parallel build's shared memory segment (``maintenance_work_mem`` whole)
        did not fit ``/dev/shm``: build again without workers (no segment), several times
        slower on a server with cores to spare — said in the log, ``/metrics`` and the
        KB's status (``graph_builds_serial``), never silently."""
        self.serial_builds += 1
        self.serial[(dim, bucket)] = f"{type(exc).__name__}: {exc}"
        log.warning(
            "knowledge base: building the graph of bucket %r in parallel failed for want of shared memory (%s); "
            "building it serially, more slowly. Give PostgreSQL more /dev/shm than its maintenance_work_mem "
            "(%d MB here): Docker's default is 64 MB, raise the container's shm_size (compose) or --shm-size",
            bucket,
            exc,
            -(-memory_kb // 1024),
        )
        await conn.execute("SET max_parallel_maintenance_workers = 0")
        try:
            if await graph_state(conn, dim, bucket) is False:
                # The failed build's invalid index is still there (``_create``'s drop
                # failed): dropped now or the build fails, else ``IF NOT EXISTS`` would
                # keep it and the graph be reported built.
                await conn.execute(drop_ddl(graph_name(dim, bucket)))
            await _create(conn, dim, bucket)
        finally:
            if not conn.broken:
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("RESET max_parallel_maintenance_workers")

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """What this process is building or will build, and which builds failed last."""
        running = self._running
        return {
            "graph_build_running": (
                None if running is None else (list(running.drop) if running.drop else running.bucket)
            ),
            "graph_builds_queued": sorted({j.bucket for j in self._jobs.values() if not j.drop and j is not running}),
            "graph_builds_failed": {b: why for (_d, b), why in sorted(self.failed.items())},
            # Built serially (slower) because a parallel build found too little shared memory.
            "graph_builds_serial": {b: why for (_d, b), why in sorted(self.serial.items())},
        }

    async def idle(self) -> None:
        """Wait until no build or drop is queued or running here (benches and tests;
        the caller bounds the wait)."""
        while (task := self._worker) is not None and not task.done():
            await asyncio.wait([task])


__all__ = ["APPLICATION_NAME", "DDL_LOCK", "GraphBuildQueue", "GraphJob"]


async def _create(conn: Conn, dim: int, bucket: str) -> None:
    """``CREATE INDEX CONCURRENTLY`` of the graph; the invalid index a failure leaves is
    dropped at once (when the connection still works)."""
    try:
        await conn.execute(graph_ddl(dim, bucket))
    except psycopg.Error:
        if not conn.broken:
            with contextlib.suppress(psycopg.Error):
                await conn.execute(drop_ddl(graph_name(dim, bucket)))
        raise


async def _bucket_exists(conn: Conn, bucket: str) -> bool:
    cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM kb_buckets WHERE name = %s)", (bucket,))
    row = await cur.fetchone()
    return bool(row and row[0])
