"""Building the buckets' HNSW graphs (``kb_graphs``) without holding knowledge-base writers.

Why this shape: a plain ``CREATE INDEX`` holds a SHARE lock on ``kb_chunks`` for the
whole build, and every insert (ROW EXCLUSIVE) waits for it — minutes at 1M vectors after
an upgrade, seconds when a write took a bucket past the threshold inside its own
transaction. ``CREATE INDEX CONCURRENTLY`` takes SHARE UPDATE EXCLUSIVE, which writers
do not conflict with: it scans the table twice (build, then validate: the rows written
meanwhile) and waits, between its phases, for the transactions older than each phase.
It cannot run in a transaction block, so every build here runs on an autocommit
connection of its own, in one background task per process, never inside a write:

* after the commit of a write that took a bucket past the threshold (``after_write``:
  one catalog lookup while the bucket has a graph, its count only while it has none);
  the write returns before the build starts, and the bucket is scanned exactly (as a
  small one is) until the graph is valid and ready (``kb_graphs.graph_names``);
* at a bulk load's end, for the buckets it loaded (``build_now``, awaited by the load:
  a load does not exclude other writers — the API's ingests, attachments, other
  replicas — so its builds are concurrent too; the load ends with its graphs built);
* after open, for any bucket whose graph a crash, a cancel or the upgrade left missing
  or invalid (``start_repair``); an invalid index of a bucket no longer past the
  threshold (or gone) is dropped.

How the builds run — one at a time, under a DDL lock only ever tried, a failed
build's invalid leftover dropped — is ``kb_graph_queue``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.kb_graph_queue import GraphBuildQueue, GraphJob
from storage.postgres.kb_graphs import (
    HNSW_MAX_DIM,
    bucket_graphs,
    bucket_key,
    buckets_past,
    graph_exists,
    graph_states,
)

log = logging.getLogger("agentchat.storage")


class GraphUpkeep(GraphBuildQueue):
    """The buckets' graphs, built and dropped when due (see the module docstring);
    ``PostgresKBIndex`` calls it after its writes, at its bulk loads' ends, at open and
    at close. Whether a graph exists is asked of the catalog each time, never
    remembered: another replica may have dropped it since (the bucket deleted, then
    written again), and a remembered graph would never be built again here."""

    def __init__(
        self,
        db: PostgresDatabase,
        threshold: Callable[[], int],
        *,
        changed: Callable[[], None] = lambda: None,
        connect_timeout: int = 10,
    ) -> None:
        super().__init__(db, threshold, changed=changed, connect_timeout=connect_timeout)
        #: (dimension, bucket) written during a bulk load whose graph did not exist yet.
        self.deferred: set[tuple[int, str]] = set()
        self._repair: asyncio.Task[list[tuple[int, str]]] | None = None

    # ------------------------------------------------------------------ when due
    async def written(self, conn: Conn, dim: int, bucket: str) -> None:
        """Vectors of ``dim`` dimensions were bulk-loaded into ``bucket`` in ``conn``'s
        transaction: its graph, if it has none yet, is built when the load ends."""
        key = (dim, bucket)
        if key in self.deferred or not 0 < dim <= HNSW_MAX_DIM or await graph_exists(conn, dim, bucket):
            return
        self.deferred.add(key)

    def take_deferred(self) -> list[str]:
        """The buckets a bulk load left graphs for, forgotten here."""
        buckets = sorted({b for _d, b in self.deferred})
        self.deferred = set()
        return buckets

    async def after_write(self, dims: Sequence[int], buckets: Sequence[str] | None) -> list[tuple[int, str]]:
        """A write committed vectors of ``dims`` into ``buckets`` (``None``: any bucket):
        the graphs it made due are queued for the background build (not awaited), and
        listed. A bucket whose every graph is valid costs one catalog lookup."""
        dims = [d for d in dims if 0 < d <= HNSW_MAX_DIM]
        if not dims:
            return []
        async with self._db.reading() as conn:
            states = await graph_states(conn)
            if buckets is not None and all(states.get((d, bucket_key(b))) for d in dims for b in buckets):
                return []
            past = await buckets_past(conn, self._threshold(), None if buckets is None else list(buckets))
        due = [(d, b) for d, b in past if d in dims and not states.get((d, bucket_key(b)))]
        for dim, bucket in due:
            self.request(dim, bucket)
        return due

    async def build_now(self, buckets: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """Build the graph of every bucket (of ``buckets``) past the threshold that has
        none, and wait for them (a bulk load's end). The graphs built; the first failure
        is raised once every build has run. A build the storage's close cancelled is not
        built here and not an error: the load's rows have committed, and the next open's
        repair builds the graph (``stop`` logs which)."""
        async with self._db.reading() as conn:
            wanted = await buckets_past(conn, self._threshold(), None if buckets is None else list(buckets))
        futures = [(key, self.request(*key)) for key in wanted]
        if futures:  # minutes at 1M vectors: say what the load's end waits for
            buckets_due = sorted({b for _d, b in wanted})
            log.info("knowledge base: the load ends once the graphs of buckets %s are built", buckets_due)
        built: list[tuple[int, str]] = []
        error: BaseException | None = None
        for key, fut in futures:
            try:
                if await asyncio.shield(fut):
                    built.append(key)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return built

    async def drop(self, bucket: str) -> asyncio.Future[bool] | None:
        """Every graph of ``bucket`` (the bucket is gone), concurrently, in the
        background once no build runs: the bucket's delete has committed and does not
        wait — a build under way, another bucket's or another replica's, may take
        minutes — nor fail for it (a failed drop is logged; the graph indexes no row,
        and serves a bucket of that name made again, which the drop then leaves alone).
        The future (for tests) says whether it dropped."""
        try:
            async with self._db.reading() as conn:
                names = tuple(await bucket_graphs(conn, bucket))
        except Exception as exc:
            log.warning("knowledge base: the graphs of deleted bucket %r were not dropped: %s", bucket, exc)
            return None
        return self._queue(GraphJob(drop=names, gone_bucket=bucket)) if names else None

    # ------------------------------------------------------------------ the repair at open
    def start_repair(self, connect_timeout: int) -> None:
        """At open: every graph a bucket past the threshold lacks (or has invalid), and
        every invalid leftover of another bucket, in the background (``repair``)."""
        self.connect_timeout = connect_timeout
        self._repair = asyncio.create_task(self._repair_logged(), name="kb-graph-repair")

    async def repaired(self) -> list[tuple[int, str]]:
        """The graphs the repair at open built, once it is done (``[]``: none ran, or
        the storage's close cancelled it — a cancel of the caller itself still raises)."""
        repair = self._repair
        if repair is None:
            return []
        try:
            return await asyncio.shield(repair)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not repair.cancelled() or (task is not None and task.cancelling()):
                raise
            return []

    async def _repair_logged(self) -> list[tuple[int, str]]:
        try:
            return await self.repair()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the searches stay exact; the next open tries again
            log.warning("knowledge base: repairing the bucket graphs failed: %s: %s", type(exc).__name__, exc)
            return []

    async def repair(self) -> list[tuple[int, str]]:
        """Build what is missing or invalid, drop invalid leftovers nobody wants; a
        build that fails is tried once more after the others (a failure may be
        transient: the server restarting, a deadlock with an operator's DDL). The
        graphs built."""
        async with self._db.reading() as conn:
            wanted = await buckets_past(conn, self._threshold())
            states = await graph_states(conn)
        keys = {(d, bucket_key(b)) for d, b in wanted}
        # Invalid graphs of buckets not (any more) past the threshold; a wanted one's
        # leftover is dropped by its build.
        leftovers = tuple(
            f"kb_chunks_hnsw_{d}_b{k}" for (d, k), ok in sorted(states.items()) if not ok and (d, k) not in keys
        )
        if leftovers:
            with contextlib.suppress(Exception):  # logged by the worker; tried again next open
                await asyncio.shield(self._queue(GraphJob(drop=leftovers, only_invalid=True)))
        built: list[tuple[int, str]] = []
        for _pass in range(2):
            futures = [(key, self.request(*key)) for key in wanted]
            failed: list[tuple[int, str]] = []
            for key, fut in futures:
                try:
                    if await asyncio.shield(fut):
                        built.append(key)
                except Exception:
                    failed.append(key)
            wanted = failed
            if not wanted:
                break
        if built:
            log.info("knowledge base: the repair built %d bucket graph(s): %s", len(built), built)
        return built

    # ------------------------------------------------------------------ close
    async def stop(self) -> None:
        """Cancel the repair and every build (on the server too); wait for them to end.
        A build asked for afterwards (a write finishing during the close) is not started:
        its worker would open a connection nobody closes; the next open's repair builds it."""
        self._stopped = True
        pending = sorted({job.bucket for job in self._jobs.values() if not job.drop})
        if pending:
            log.warning(
                "knowledge base: closing before the graphs of buckets %s were built; the next open builds them "
                "(their searches are exact meanwhile)",
                pending,
            )
        tasks: list[asyncio.Task[Any]] = [t for t in (self._repair, self._worker) if t is not None and not t.done()]
        self._repair = self._worker = None
        for task in tasks:
            task.cancel()
        # Waited for with ``asyncio.wait``, not ``await task`` under a suppressed
        # ``CancelledError``: that swallowed a cancel of the caller itself (a server's
        # shutdown cancelled during the storage's close), which then went on as if never
        # asked to stop, and its cancel passed on to the worker cut the build's cancel on
        # the server short. ``asyncio.wait`` raises the caller's cancel every time and
        # passes it on to nothing: a cancelled caller still waits for the tasks (the
        # worker's end is bounded by ``CANCEL_S``), then stays cancelled. Only a cancel
        # that came during this wait is raised: a caller closing *because* it was
        # cancelled (its ``cancelling()`` already counts one) gets its whole close.
        cancelled = False
        running = set(tasks)
        while running:
            try:
                _, running = await asyncio.wait(running)
            except asyncio.CancelledError:
                cancelled = True
        if cancelled:
            raise asyncio.CancelledError


__all__ = ["GraphUpkeep"]
