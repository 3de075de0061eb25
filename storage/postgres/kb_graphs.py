"""One HNSW graph per (dimension, bucket) on PostgreSQL: what each is, when it exists.

Why per bucket: every vector query is scoped to buckets (one, several, or all of them
taken one by one: ``kb_vectors``). A single graph per dimension answered a bucket that
holds a quarter of the index by walking four times as far and throwing three quarters
of what it found away (post-filtering): at 100k chunks ``ef_search`` climbed to 1,000,
at 1M the bucket's top 10 agreed with the exact scan only 0.92 of the time. A graph
that holds the bucket alone is walked as an unscoped search is.

Each graph is a partial index, ``... USING hnsw ((embedding::vector(D))
vector_cosine_ops) WHERE vector_dims(embedding) = D AND bucket = '<bucket>'``, over the
chunk's own copy of its document's bucket (migration 26). It exists for buckets that
hold more than ``exact_scope_vectors`` vectors of that dimension (smaller ones are
scanned exactly, which costs less than a graph walk); it is built when a write takes a
bucket past that threshold (under an advisory lock, so two writers do not both build
it), at a bulk load's end for the buckets it loaded, at open for any bucket whose build
a crash or an upgrade left undone, and dropped with its bucket.

Bucket names are user text: the predicate's literal is quoted by psycopg
(``sql.Literal``) and the index is named from a hash of the name, never from the name.
A query can only use a partial index whose predicate the planner proves from the
statement's own constants, so the vector query carries the bucket as the same literal
(``bucket_literal``), not as a parameter: under a generic plan (psycopg prepares a
statement after 5 runs, PostgreSQL goes generic after 5 more) a parameter proves
nothing.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
from collections.abc import Callable, Sequence

import psycopg
from psycopg import sql

from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.kb_ddl import index_exists

#: pgvector's HNSW limit for ``vector`` columns; larger vectors are always scanned exactly.
HNSW_MAX_DIM = 2000
#: Memory for building an HNSW graph in one go (a bulk load's end, the repair at open):
#: the graph of a million 384-dimension vectors takes about 2 GB; when it does not fit,
#: pgvector says so and goes on, more slowly. Only the building backend uses it.
HNSW_BUILD_MEMORY = "2GB"
log = logging.getLogger("agentchat.storage")
_NAME = re.compile(r"^kb_chunks_hnsw_(\d+)_b([0-9a-f]{16})$")


def bucket_key(bucket: str) -> str:
    """A stable, identifier-safe key of a bucket name (any text)."""
    return hashlib.sha256(bucket.encode("utf-8")).hexdigest()[:16]


def graph_name(dim: int, bucket: str) -> str:
    return f"kb_chunks_hnsw_{int(dim)}_b{bucket_key(bucket)}"


def bucket_literal(conn: Conn, bucket: str) -> str:
    """``bucket`` as a quoted SQL literal, the same text the index predicate holds. A
    ``%`` is doubled: the statement it goes into also has ``%(name)s`` parameters."""
    return sql.Literal(bucket).as_string(conn).replace("%", "%%")


def graph_ddl(dim: int, bucket: str) -> sql.Composed:
    """The ``CREATE INDEX`` of the bucket's graph (pgvector's defaults: m 16, ef_construction 64)."""
    d = sql.SQL(str(int(dim)))
    return sql.SQL(
        "CREATE INDEX IF NOT EXISTS {name} ON kb_chunks USING hnsw ((embedding::vector({d})) vector_cosine_ops) "
        "WHERE vector_dims(embedding) = {d} AND bucket = {bucket}"
    ).format(name=sql.Identifier(graph_name(dim, bucket)), d=d, bucket=sql.Literal(bucket))


async def graph_names(conn: Conn) -> set[tuple[int, str]]:
    """``(dim, bucket_key)`` of every per-bucket graph there is."""
    cur = await conn.execute(
        "SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunks' AND indexname LIKE 'kb\\_chunks\\_hnsw\\_%'"
    )
    out: set[tuple[int, str]] = set()
    for (name,) in await cur.fetchall():
        m = _NAME.match(str(name))
        if m:
            out.add((int(m.group(1)), m.group(2)))
    return out


async def graph_exists(conn: Conn, dim: int, bucket: str) -> bool:
    return await index_exists(conn, graph_name(dim, bucket))


async def ensure_graph(conn: Conn, dim: int, bucket: str, *, bulk_build: bool = False) -> bool:
    """Create the bucket's graph of ``dim``-dimension vectors unless it exists (under an
    advisory lock per graph). ``bulk_build``: over many rows at once (more memory, no
    statement timeout). Whether it was created here."""
    if not 0 < dim <= HNSW_MAX_DIM or await graph_exists(conn, dim, bucket):
        return False
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("kb_chunks_hnsw:" + graph_name(dim, bucket),)
    )
    if await graph_exists(conn, dim, bucket):
        return False
    if bulk_build:
        await conn.execute(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")  # type: ignore[arg-type]
        await conn.execute("SET LOCAL statement_timeout = 0")
    await conn.execute(graph_ddl(dim, bucket))
    return True


async def drop_graphs(conn: Conn, bucket: str) -> None:
    """Every graph of ``bucket`` (all dimensions): the bucket is gone."""
    key = bucket_key(bucket)
    for dim, k in await graph_names(conn):
        if k == key:
            await conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(graph_name(dim, bucket))))


async def buckets_past(conn: Conn, threshold: int, buckets: list[str] | None = None) -> list[tuple[int, str]]:
    """``(dim, bucket)`` of the buckets (all, or those of ``buckets``) holding more than
    ``threshold`` vectors of a dimension pgvector can index."""
    cur = await conn.execute(
        "SELECT embed_dim, bucket FROM kb_documents WHERE embed_dim BETWEEN 1 AND %s"
        " AND (%s::text[] IS NULL OR bucket = ANY(%s::text[]))"
        " GROUP BY embed_dim, bucket HAVING coalesce(sum(chunk_count), 0) > %s ORDER BY 1, 2",
        (HNSW_MAX_DIM, buckets, buckets, int(threshold)),
    )
    return [(int(d), str(b)) for d, b in await cur.fetchall()]


class GraphUpkeep:
    """Building the buckets' graphs when due; ``PostgresKBIndex`` calls it from its
    writes, its bulk loads and ``open``. Whether a graph exists is asked of the catalog
    each time (one indexed lookup), never remembered: another replica may have dropped
    it since (the bucket deleted, then written again), and a remembered graph would
    never be built again here while the bucket grew."""

    def __init__(self, db: PostgresDatabase, threshold: Callable[[], int]) -> None:
        self._db = db
        self._threshold = threshold
        #: How long the repair at open waits for a lock (the graph's advisory lock, the
        #: table's SHARE lock its build needs) before it leaves that graph for later: a
        #: build queued behind a long ingest would queue every later writer behind it.
        self.repair_lock_timeout_ms = 5_000
        #: (dimension, bucket) written during a bulk load whose graph did not exist yet.
        self.deferred: set[tuple[int, str]] = set()

    async def written(self, conn: Conn, dim: int, bucket: str, *, bulk: bool) -> None:
        """Vectors of ``dim`` dimensions were written into ``bucket`` in ``conn``'s
        transaction: its graph once the bucket holds more than the threshold — or, in a
        bulk load, noted to be built when the load ends. A graph made once is maintained
        by every insert; the count is read only while a bucket has none."""
        key = (dim, bucket)
        if key in self.deferred or not 0 < dim <= HNSW_MAX_DIM or await graph_exists(conn, dim, bucket):
            return
        if bulk:
            self.deferred.add(key)
        elif key in await buckets_past(conn, self._threshold(), [bucket]):
            await ensure_graph(conn, dim, bucket)

    async def any_bucket_grew(self, conn: Conn, dims: Sequence[int]) -> None:
        """Vectors attached to stored chunks, of any bucket (``attach_vectors``)."""
        for dim, bucket in await buckets_past(conn, self._threshold()):
            if dim in dims:
                await ensure_graph(conn, dim, bucket)  # nothing when it exists

    def take_deferred(self) -> list[str]:
        """The buckets a bulk load left graphs for, forgotten here."""
        buckets = sorted({b for _d, b in self.deferred})
        self.deferred = set()
        return buckets

    async def ensure_all(self, buckets: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """Build the graph of every bucket (of ``buckets``) past the threshold that has
        none; one transaction per graph, one graph at a time (each build uses pgvector's
        parallel workers). The graphs built here."""
        async with self._db.reading() as conn:
            wanted = await buckets_past(conn, self._threshold(), None if buckets is None else list(buckets))
        built: list[tuple[int, str]] = []
        for dim, bucket in wanted:
            if await self._db.transact(functools.partial(ensure_graph, dim=dim, bucket=bucket, bulk_build=True)):
                built.append((dim, bucket))
        return built

    async def repair(self, url: str, connect_timeout: int) -> list[tuple[int, str]]:
        """``ensure_all`` for the repair at open, on a connection of its own: a database
        upgraded past migration 26 (or left by a crash before a bulk load's end) may
        need graphs over millions of vectors, which take minutes to build. Run in the
        background (``PostgresKBIndex.start_graph_repair``), it leaves the pool alone
        and the start quick (searches of such a bucket are exact until its graph is
        there). Cancelled (the storage closes), it cancels the build on the server: an
        index build is one transaction, rolled back and done again at the next open.

        A build that fails is rolled back and the others go on; the failed ones are
        tried once more at the end. Right after an upgrade every big bucket lacks its
        graph, and a write into one of them builds it in its own transaction
        (``written``): holding the table's ROW EXCLUSIVE lock it asks for the graph's
        advisory lock, which the repair holds while its ``CREATE INDEX`` waits for that
        very writer - a deadlock PostgreSQL ends by aborting one side. Aborting the
        repair must not leave every other bucket exact until the next open.

        Each build waits at most ``repair_lock_timeout_ms`` for its locks: PostgreSQL
        queues lock requests in order, so a ``CREATE INDEX`` waiting behind a long
        ingest would hold every later writer of ``kb_chunks`` back as well. A graph left
        for that reason is built by the next write that finds it missing, or the next
        open."""
        built: list[tuple[int, str]] = []
        async with await psycopg.AsyncConnection.connect(
            url, connect_timeout=connect_timeout, application_name="agentchat-kb-graphs"
        ) as conn:
            try:
                async with conn.transaction():
                    wanted = await buckets_past(conn, self._threshold())
                for last_pass in (False, True):
                    failed: list[tuple[int, str]] = []
                    for dim, bucket in wanted:
                        try:
                            async with conn.transaction():
                                await conn.execute(
                                    f"SET LOCAL lock_timeout = {int(self.repair_lock_timeout_ms)}"  # type: ignore[arg-type]
                                )
                                if await ensure_graph(conn, dim, bucket, bulk_build=True):
                                    built.append((dim, bucket))
                        except psycopg.Error as exc:
                            if conn.broken:
                                raise
                            log.warning(
                                "knowledge base: building the graph of bucket %r (%d dimensions) failed%s: %s: %s",
                                bucket,
                                dim,
                                "" if last_pass else "; it is tried again after the others",
                                type(exc).__name__,
                                exc,
                            )
                            failed.append((dim, bucket))
                    wanted = failed
                    if not wanted:
                        break
            except asyncio.CancelledError:
                await conn.cancel_safe(timeout=5.0)
                raise
        return built

    async def drop(self, bucket: str) -> None:
        await self._db.transact(functools.partial(drop_graphs, bucket=bucket))


__all__ = [
    "HNSW_BUILD_MEMORY",
    "HNSW_MAX_DIM",
    "GraphUpkeep",
    "bucket_key",
    "bucket_literal",
    "buckets_past",
    "drop_graphs",
    "ensure_graph",
    "graph_ddl",
    "graph_exists",
    "graph_name",
    "graph_names",
]
