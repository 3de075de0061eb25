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
scanned exactly, which costs less than a graph walk). This module says what a graph is
and reads the catalog; ``kb_graph_builds`` builds them, always ``CREATE INDEX
CONCURRENTLY`` on a connection of its own, outside any write: after the commit of a
write that took a bucket past that threshold, at a bulk load's end for the buckets it
loaded, at open for any bucket whose build a crash, a cancel or an upgrade left undone;
and drops them with their bucket.

A concurrent build that fails or is cancelled leaves an INVALID index behind (and one
under way is not valid yet): ``graph_names`` counts only a graph that is valid and
ready (``pg_index.indisvalid AND indisready``), so the search scans such a bucket
exactly until its graph is whole; ``graph_states`` tells the others apart for the
builder (which drops an invalid leftover and builds again) and for the KB's status.

Bucket names are user text: the predicate's literal is quoted by psycopg
(``sql.Literal``) and the index is named from a hash of the name, never from the name.
A query can only use a partial index whose predicate the planner proves from the
statement's own constants, so the vector query carries the bucket as the same literal
(``bucket_literal``), not as a parameter: under a generic plan (psycopg prepares a
statement after 5 runs, PostgreSQL goes generic after 5 more) a parameter proves
nothing.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re

import psycopg
from psycopg import sql

from storage.postgres.database import Conn
from storage.postgres.kb_ddl import index_exists

log = logging.getLogger("agentchat.storage")

#: pgvector's HNSW limit for ``vector`` columns; larger vectors are always scanned exactly.
HNSW_MAX_DIM = 2000
#: The most memory a graph build asks for (``graph_build_memory_kb``'s cap, unless the
#: server's own ``maintenance_work_mem`` is higher): the graph of a million 384-dimension
#: vectors; a larger one does not fit, and pgvector says so and goes on, more slowly.
HNSW_BUILD_MEMORY = "2GB"
HNSW_BUILD_MEMORY_KB = 2 * 1024 * 1024
#: pgvector's (0.6-0.8) in-memory graph per element, besides the vector's own
#: ``8 + 4 × dim`` bytes, at m = 16: the element (ten heap TIDs, its lock, pointers) and
#: its neighbour arrays (2m slots of 16 bytes on level 0, m per level above).
#: Measured, not derived: a build at a known ``maintenance_work_mem`` reports the tuples
#: after which the graph "no longer fits" — 2,250 bytes a vector at 384 dimensions (1,544
#: the vector), serial and parallel alike (pgvector 0.6.2).
HNSW_ELEMENT_BYTES = 706
#: Room over the count read before the build: rows written meanwhile, the levels' draw.
HNSW_BUILD_HEADROOM = 1.25
_NAME = re.compile(r"^kb_chunks_hnsw_(\d+)_b([0-9a-f]{16})$")


def graph_build_memory_kb(vectors: int, dim: int, server_kb: int) -> int:
    """The ``maintenance_work_mem`` (kB) a build of a graph of ``vectors`` vectors of
    ``dim`` dimensions asks for. Why not a flat 2 GB: it is a per-backend allowance a
    small server cannot give (the OOM killer), and a parallel build (pgvector ≥ 0.6)
    allocates it whole up front as one dynamic shared memory segment, which a container's
    64 MB ``/dev/shm`` refuses. So: what the graph needs with headroom, capped at
    ``HNSW_BUILD_MEMORY_KB``, never below ``server_kb`` (the server's own setting: a DBA's
    higher value wins, even over the cap)."""
    need = max(0, vectors) * (8 + 4 * max(0, dim) + HNSW_ELEMENT_BYTES) * HNSW_BUILD_HEADROOM
    return max(server_kb, min(HNSW_BUILD_MEMORY_KB, math.ceil(need / 1024)))


async def server_build_memory_kb(conn: Conn) -> int:
    """The session's ``maintenance_work_mem`` as the server, role or database set it (kB):
    ``reset_val`` is what ``RESET`` restores, whatever this session ``SET`` since."""
    cur = await conn.execute("SELECT reset_val::bigint FROM pg_settings WHERE name = 'maintenance_work_mem'")
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def set_build_memory(conn: Conn, dim: int, bucket: str, *, local: bool = False) -> int:
    """Size the session's (``local``: the transaction's) ``maintenance_work_mem`` for the
    bucket's graph (``graph_build_memory_kb``); the kB set."""
    kb = graph_build_memory_kb(await bucket_vectors(conn, dim, bucket), dim, await server_build_memory_kb(conn))
    await conn.execute("SELECT set_config('maintenance_work_mem', %s, %s)", (f"{kb}kB", local))
    return kb


async def bucket_vectors(conn: Conn, dim: int, bucket: str) -> int:
    """The vectors of ``dim`` dimensions in ``bucket`` (what its graph holds)."""
    cur = await conn.execute(
        "SELECT coalesce(sum(chunk_count), 0) FROM kb_documents WHERE embed_dim = %s AND bucket = %s",
        (int(dim), bucket),
    )
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


def shared_memory_short(exc: BaseException) -> bool:
    """A build that failed for want of dynamic shared memory: a parallel build's segment
    (sized by ``maintenance_work_mem``) did not fit ``/dev/shm`` — Docker's is 64 MB —
    "could not resize shared memory segment … No space left on device" (53100; 53200
    when the kernel says out of memory; the message whatever the errno: a sandbox's
    tmpfs said ENOENT). A serial build needs no such segment."""
    if not isinstance(exc, psycopg.Error):
        return False
    said = (exc.diag.message_primary or str(exc)) if exc.diag is not None else str(exc)
    if said.startswith("could not resize shared memory segment"):
        return True
    return isinstance(exc, (psycopg.errors.DiskFull, psycopg.errors.OutOfMemory)) and "shared memory segment" in said


def bucket_key(bucket: str) -> str:
    """A stable, identifier-safe key of a bucket name (any text)."""
    return hashlib.sha256(bucket.encode("utf-8")).hexdigest()[:16]


def graph_name(dim: int, bucket: str) -> str:
    return f"kb_chunks_hnsw_{int(dim)}_b{bucket_key(bucket)}"


def bucket_literal(conn: Conn, bucket: str) -> str:
    """``bucket`` as a quoted SQL literal, the same text the index predicate holds. A
    ``%`` is doubled: the statement it goes into also has ``%(name)s`` parameters."""
    return sql.Literal(bucket).as_string(conn).replace("%", "%%")


def graph_ddl(dim: int, bucket: str, *, concurrently: bool = True) -> sql.Composed:
    """The ``CREATE INDEX`` of the bucket's graph (pgvector's defaults: m 16, ef_construction 64).
    ``concurrently`` (the service's builds, on an autocommit connection): writers of
    ``kb_chunks`` go on while it builds; plain (``migrate-db``'s fresh target, the
    benches): one scan instead of two, under a SHARE lock that holds every writer."""
    d = sql.SQL(str(int(dim)))
    return sql.SQL(
        "CREATE INDEX {how} IF NOT EXISTS {name} ON kb_chunks USING hnsw ((embedding::vector({d})) vector_cosine_ops) "
        "WHERE vector_dims(embedding) = {d} AND bucket = {bucket}"
    ).format(
        how=sql.SQL("CONCURRENTLY" if concurrently else ""),
        name=sql.Identifier(graph_name(dim, bucket)),
        d=d,
        bucket=sql.Literal(bucket),
    )


#: Every per-bucket graph in the catalog, whether valid and ready (an index a
#: concurrent build is making, or one a failed or cancelled build left, is not).
_GRAPHS = (
    "SELECT c.relname, i.indisvalid AND i.indisready FROM pg_index i"
    " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid"
    " WHERE t.relname = 'kb_chunks' AND t.relnamespace = c.relnamespace"
    " AND starts_with(c.relname, 'kb_chunks_hnsw_') AND pg_table_is_visible(t.oid)"
)


async def graph_states(conn: Conn) -> dict[tuple[int, str], bool]:
    """``(dim, bucket_key)`` -> whether that graph is valid and ready, for every
    per-bucket graph in the catalog (under way, left invalid, or whole)."""
    cur = await conn.execute(_GRAPHS)
    out: dict[tuple[int, str], bool] = {}
    for name, ok in await cur.fetchall():
        m = _NAME.match(str(name))
        if m:
            out[(int(m.group(1)), m.group(2))] = bool(ok)
    return out


async def graph_names(conn: Conn) -> set[tuple[int, str]]:
    """``(dim, bucket_key)`` of every per-bucket graph a search may use: valid and
    ready. An invalid one (a concurrent build under way, failed or cancelled) is left
    out: the planner would skip it anyway, and the bucket is scanned exactly."""
    return {k for k, ok in (await graph_states(conn)).items() if ok}


async def graph_state(conn: Conn, dim: int, bucket: str) -> bool | None:
    """The bucket's graph: ``True`` valid and ready, ``False`` in the catalog but not
    (under way, or left by a failed build), ``None`` absent."""
    return await index_state(conn, graph_name(dim, bucket))


async def index_state(conn: Conn, name: str) -> bool | None:
    """``graph_state`` of a graph by its index name."""
    cur = await conn.execute(_GRAPHS + " AND c.relname = %s", (name,))
    row = await cur.fetchone()
    return None if row is None else bool(row[1])


async def graphs_in_progress(conn: Conn) -> set[tuple[int, str]]:
    """``(dim, bucket_key)`` of the graphs some session (any replica) is building now
    (``pg_stat_progress_create_index``): an invalid graph not among them is a leftover."""
    cur = await conn.execute(
        "SELECT c.relname FROM pg_stat_progress_create_index p JOIN pg_class c ON c.oid = p.index_relid"
        " WHERE starts_with(c.relname, 'kb_chunks_hnsw_')"
    )
    out: set[tuple[int, str]] = set()
    for (name,) in await cur.fetchall():
        m = _NAME.match(str(name))
        if m:
            out.add((int(m.group(1)), m.group(2)))
    return out


async def graph_memory(conn: Conn) -> tuple[int, int]:
    """``(bytes of every valid graph, the server's shared_buffers in bytes)``. A search
    walks its graph through random pages, and one outside ``shared_buffers`` is read from
    the OS (and another evicted) at each visit: at 100k chunks, graphs of 196 MB against
    64 MB of buffers took twice as long a walk (docs/scaling.md, "HNSW memory")."""
    cur = await conn.execute(
        "SELECT coalesce(sum(pg_relation_size(c.oid)), 0), pg_size_bytes(current_setting('shared_buffers'))"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid"
        " WHERE t.relname = 'kb_chunks' AND t.relnamespace = c.relnamespace"
        " AND starts_with(c.relname, 'kb_chunks_hnsw_') AND pg_table_is_visible(t.oid)"
        " AND i.indisvalid AND i.indisready"
    )
    row = await cur.fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


async def graph_exists(conn: Conn, dim: int, bucket: str) -> bool:
    """A valid, ready graph of the bucket (one under way or left invalid is not)."""
    return bool(await graph_state(conn, dim, bucket))


async def ensure_graph(conn: Conn, dim: int, bucket: str, *, bulk_build: bool = False) -> bool:
    """Create the bucket's graph of ``dim``-dimension vectors unless it exists (under an
    advisory lock per graph), plainly, inside ``conn``'s transaction: for a database no
    writer uses yet (``migrate-db``'s target; the benches). The service builds its
    graphs concurrently (``kb_graph_builds``). ``bulk_build``: over many rows at once
    (more memory, no statement timeout). Whether it was created here."""
    if not 0 < dim <= HNSW_MAX_DIM or await index_exists(conn, graph_name(dim, bucket)):
        return False
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("kb_chunks_hnsw:" + graph_name(dim, bucket),)
    )
    if await index_exists(conn, graph_name(dim, bucket)):
        return False
    if bulk_build:
        await set_build_memory(conn, dim, bucket, local=True)
        await conn.execute("SET LOCAL statement_timeout = 0")
    try:
        async with conn.transaction():  # a savepoint: a failed parallel build can be tried serially
            await conn.execute(graph_ddl(dim, bucket, concurrently=False))
    except psycopg.Error as exc:
        if not shared_memory_short(exc):
            raise
        log.warning(
            "knowledge base: building the graph of bucket %r in parallel failed for want of shared memory (%s); "
            "building it serially, more slowly. Give PostgreSQL more /dev/shm (Docker: shm_size / --shm-size) "
            "than its maintenance_work_mem",
            bucket,
            exc,
        )
        await conn.execute("SET LOCAL max_parallel_maintenance_workers = 0")
        await conn.execute(graph_ddl(dim, bucket, concurrently=False))
    return True


async def bucket_graphs(conn: Conn, bucket: str) -> list[str]:
    """The names of every graph of ``bucket`` in the catalog (all dimensions, any state)."""
    key = bucket_key(bucket)
    return [graph_name(dim, bucket) for dim, k in await graph_states(conn) if k == key]


def drop_ddl(name: str) -> sql.Composed:
    """Dropping a graph without holding writers (autocommit only, like its build)."""
    return sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name))


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


__all__ = [
    "HNSW_BUILD_MEMORY",
    "HNSW_BUILD_MEMORY_KB",
    "HNSW_MAX_DIM",
    "bucket_graphs",
    "bucket_key",
    "bucket_literal",
    "bucket_vectors",
    "buckets_past",
    "drop_ddl",
    "ensure_graph",
    "graph_build_memory_kb",
    "graph_ddl",
    "graph_exists",
    "graph_memory",
    "graph_name",
    "graph_names",
    "graph_state",
    "graph_states",
    "graphs_in_progress",
    "index_state",
    "server_build_memory_kb",
    "set_build_memory",
    "shared_memory_short",
]
