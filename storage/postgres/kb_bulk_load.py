"""A bulk load on PostgreSQL (``PostgresKBIndex.bulk_load``): the indexes it leaves for
its end, built there at once, and the vacuum and ``ANALYZE`` after them.

Apart from ``kb_index`` (the index's reads and writes) because it is upkeep around many
writes rather than a part of any one: it has its own state (how many loads are open,
which indexes wait for the outermost one's end) and its own rule on failure — the load's
rows are committed whatever happens here, so upkeep that cannot run (the vacuum, the
``ANALYZE``) is logged, never raised as a failed load. The writes only ask whether a load
is open (``active``) and whether the postings' B-tree waits for its end
(``postings_index_deferred``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import psycopg

from storage.errors import StorageUnavailable
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_ddl import POSTINGS_TEXT_INDEX, TSV_TEXT_INDEX, defer_index, ensure_index
from storage.postgres.kb_graph_builds import GraphUpkeep
from storage.postgres.kb_vacuum import vacuum_after_load

log = logging.getLogger("agentchat.storage")


class BulkLoad:
    """The bulk loads of one ``PostgresKBIndex``: ``open()`` around each, its end built by
    the outermost one. ``build_graphs`` builds the named buckets' graphs and waits for
    them (``PostgresKBIndex.ensure_bucket_graphs``); ``changed`` tells the index's
    searches that the tables' statistics moved."""

    def __init__(
        self,
        db: PostgresDatabase,
        graphs: GraphUpkeep,
        *,
        build_graphs: Callable[[Sequence[str]], Awaitable[object]],
        changed: Callable[[], None],
    ) -> None:
        self._db = db
        self._graphs = graphs
        self._build_graphs = build_graphs
        self._changed = changed
        #: Loads open now (they nest); the writes see it through ``active``.
        self.depth = 0
        #: The load dropped (or found missing) the postings' B-tree: built at its end.
        self.postings_index_deferred = False
        #: Likewise the chunks' GIN index.
        self._tsv_index_deferred = False

    @property
    def active(self) -> bool:
        """A load is open: its writes post their own chunks and leave graphs for its end."""
        return bool(self.depth)

    @contextlib.asynccontextmanager
    async def open(self, *, own_postings: bool) -> AsyncIterator[None]:
        """One load (loads nest: the outermost one's end builds). ``own_postings``: each
        batch posts its own chunks (``BULK_POSTINGS``), so a first load's postings B-tree
        can wait for the end."""
        if not self.depth and own_postings:
            deferring = functools.partial(defer_index, index=POSTINGS_TEXT_INDEX)
            self.postings_index_deferred = await self._db.transact(deferring)
        if not self.depth:
            self._tsv_index_deferred = await self._db.transact(functools.partial(defer_index, index=TSV_TEXT_INDEX))
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            if not self.depth:
                await self._build_deferred()

    async def _build_deferred(self) -> None:
        """The indexes a bulk load left for its end, each on a connection of its own at
        the same time: pgvector builds an HNSW graph with parallel workers, the postings'
        B-tree sort and the GIN build take a backend each. The buckets' graphs are built
        one after another (their sizes add up to what one graph over every bucket was;
        each build is pgvector's, with its parallel workers), concurrently, so writers
        outside the load go on; after the chunks' GIN build, never beside it: a plain
        build on ``kb_chunks`` waiting for the concurrent one's lock would hold a
        snapshot the concurrent build waits for (a deadlock, one of them aborted)."""
        builds: list[Awaitable[object]] = []
        if self.postings_index_deferred:
            self.postings_index_deferred = False
            builds.append(self._db.transact(functools.partial(ensure_index, index=POSTINGS_TEXT_INDEX)))
        tsv = self._tsv_index_deferred
        self._tsv_index_deferred = False
        loaded = self._graphs.take_deferred()
        if tsv or loaded:
            builds.append(self._chunk_indexes(tsv, loaded))
        try:
            outcomes = await asyncio.gather(*builds, return_exceptions=True)
            await self._vacuum_postings()
        finally:
            self._changed()
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        if loaded:
            # Fresh planner statistics for the loaded rows (autovacuum would get there later).
            # Upkeep, like the vacuum: another replica's graph build holds the lock ANALYZE
            # needs past the pool's lock_timeout, and the load stands without it.
            try:
                async with self._db.reading() as conn:
                    await conn.execute("ANALYZE kb_chunks")
            except (StorageUnavailable, psycopg.Error) as exc:
                log.warning("the ANALYZE after a bulk load did not run (%s: %s)", type(exc).__name__, exc)
            self._changed()

    async def _chunk_indexes(self, tsv: bool, loaded: list[str]) -> None:
        """The chunks' GIN index (plain, a first load's), then the loaded buckets' graphs."""
        if tsv:
            await self._db.transact(functools.partial(ensure_index, index=TSV_TEXT_INDEX))
        if loaded:
            await self._build_graphs(loaded)

    async def _vacuum_postings(self) -> None:
        """``VACUUM kb_postings, kb_chunks`` once a bulk load ends, so that the postings'
        reads (and a filtered scope's lookup of its chunk ids, migration 25) are
        index-only in fact. Every text search reads them through index-only scans of
        ``kb_postings_impact``; a page not yet marked all-visible in the visibility map
        costs a heap visit per posting. Autovacuum marks a table's inserts only once they
        reach a fifth of its rows: after a 100k-chunk load the last 320k postings (the
        last bucket loaded) stayed unmarked, and a text search of that bucket's lexemes
        read the heap for every posting (server CPU 22 → 8 ms per search once vacuumed).
        The vacuum visits only pages not yet all-visible (0.8 s for 4.4M postings).

        With ``synchronous_commit`` off a row whose commit (or any commit of its clog
        group) is not yet flushed cannot be hinted committed, so the vacuum waits for the
        WAL to be flushed and vacuums again while a pass left pages unmarked
        (``kb_vacuum``, which says why).

        Upkeep, not part of the load: one that cannot run (a lock another session holds
        past ``lock_timeout``, a statement timeout, no connection) is logged and the
        load stands — its rows are committed and its indexes built; autovacuum marks
        the pages later."""
        try:
            await self._vacuum_now()
        except (StorageUnavailable, psycopg.Error) as exc:
            log.warning(
                "the vacuum after a bulk load did not run (%s: %s); text searches may read the heap per "
                "posting until autovacuum marks the new pages",
                type(exc).__name__,
                exc,
            )

    async def _vacuum_now(self) -> None:
        async with self._db.reading() as conn:
            unmarked = await vacuum_after_load(conn)
        if unmarked:
            log.info(
                "the vacuum after a bulk load left %d postings pages unmarked (a concurrent writer, "
                "or commits not yet flushed)",
                unmarked,
            )


__all__ = ["BulkLoad"]
