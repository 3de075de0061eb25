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
import re

from psycopg import sql

from storage.postgres.database import Conn
from storage.postgres.kb_ddl import index_exists

#: pgvector's HNSW limit for ``vector`` columns; larger vectors are always scanned exactly.
HNSW_MAX_DIM = 2000
#: Memory for building an HNSW graph in one go (every build, ``kb_graph_builds``):
#: the graph of a million 384-dimension vectors takes about 2 GB; when it does not fit,
#: pgvector says so and goes on, more slowly. Only the building backend uses it.
HNSW_BUILD_MEMORY = "2GB"
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
        await conn.execute(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")  # type: ignore[arg-type]
        await conn.execute("SET LOCAL statement_timeout = 0")
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
    "HNSW_MAX_DIM",
    "bucket_graphs",
    "bucket_key",
    "bucket_literal",
    "buckets_past",
    "drop_ddl",
    "ensure_graph",
    "graph_ddl",
    "graph_exists",
    "graph_name",
    "graph_names",
    "graph_state",
    "graph_states",
    "graphs_in_progress",
    "index_state",
]
