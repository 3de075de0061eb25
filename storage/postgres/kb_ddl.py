"""The knowledge base's own indexes on PostgreSQL, and when they are built.

A first bulk load into empty tables drops the full-text indexes (the postings' B-tree
and the chunks' GIN index) and builds each once at its end, sorted, instead of row by
row (the vectors' HNSW graphs, one per bucket and dimension, are ``kb_graphs``').
``PostgresKBIndex`` (``kb_index``) decides when; this module says
what each index is and how it is built. Split out of ``kb_index`` to keep it one job.
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.postgres.database import Conn

POSTINGS_INDEX = "kb_postings_impact"
_CREATE_POSTINGS_INDEX = (
    f"CREATE INDEX IF NOT EXISTS {POSTINGS_INDEX} ON kb_postings(lexeme, impact DESC, chunk_id)"
    " INCLUDE (bucket, tf, ntok)"
)
#: Sort memory for building the postings' B-tree in one go (only that backend, only then).
POSTINGS_BUILD_MEMORY = "512MB"
#: The chunks' full-text GIN index (migration 1's definition). Inserting into it chunk
#: by chunk goes through its pending list and merges it again and again; built once
#: over a first load's rows it costs a fraction of that (``bulk_load``).
TSV_INDEX = "kb_chunks_tsv"
_CREATE_TSV_INDEX = f"CREATE INDEX IF NOT EXISTS {TSV_INDEX} ON kb_chunks USING gin(tsv)"


def hnsw_index_name(dim: int) -> str:
    """The name of a graph over every bucket's vectors of ``dim`` dimensions, which
    releases before migration 26 built (it drops them; ``kb_graphs`` builds one graph
    per bucket instead). The benches that measure that design build it under this name."""
    return f"kb_chunks_hnsw_{int(dim)}"


@dataclass(frozen=True, slots=True)
class TextIndex:
    """A full-text index a first bulk load builds once at its end instead of row by row."""

    name: str
    create: str
    lock: str
    #: The table whose emptiness says "a first load": the index is dropped only then.
    table: str


#: The postings' B-tree: inserting millions of rows into it in random lexeme order costs
#: more than the rest of the load (each batch touches most of its leaf pages), and
#: ``CREATE INDEX`` sorts them once. Searches stay exact without it, but read the table.
POSTINGS_TEXT_INDEX = TextIndex(POSTINGS_INDEX, _CREATE_POSTINGS_INDEX, "kb_postings_index", "kb_postings")
#: The chunks' GIN index (matching stays exact without it, but reads every chunk).
TSV_TEXT_INDEX = TextIndex(TSV_INDEX, _CREATE_TSV_INDEX, "kb_chunks_tsv_index", "kb_chunks")


async def index_exists(conn: Conn, name: str) -> bool:
    cur = await conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (name,))
    return await cur.fetchone() is not None


async def ensure_index(conn: Conn, index: TextIndex) -> None:
    """Build ``index`` unless it exists: at the end of a first bulk load, or at open
    after a load that died before its end."""
    if await index_exists(conn, index.name):
        return
    await conn.execute(f"SELECT pg_advisory_xact_lock(hashtextextended('{index.lock}', 0))")  # type: ignore[arg-type]
    await conn.execute(f"SET LOCAL maintenance_work_mem = '{POSTINGS_BUILD_MEMORY}'")  # type: ignore[arg-type]
    await conn.execute("SET LOCAL statement_timeout = 0")
    await conn.execute(index.create)  # type: ignore[arg-type]


async def defer_index(conn: Conn, index: TextIndex) -> bool:
    """At the start of a bulk load into an empty table, drop ``index`` (``CREATE INDEX``
    at the end sorts once what row-by-row upkeep would scatter). Loads into a populated
    table keep it (rebuilding it would cost more than the load saves; a writer that is
    not bulk loading keeps it up to date as usual). Whether the index is (now) missing."""
    await conn.execute(f"SELECT pg_advisory_xact_lock(hashtextextended('{index.lock}', 0))")  # type: ignore[arg-type]
    cur = await conn.execute(f"SELECT EXISTS (SELECT 1 FROM {index.table})")  # type: ignore[arg-type]
    row = await cur.fetchone()
    if row is not None and not row[0]:
        await conn.execute(f"DROP INDEX IF EXISTS {index.name}")  # type: ignore[arg-type]
    return not await index_exists(conn, index.name)


async def ensure_text_indexes(conn: Conn) -> None:
    """Both full-text indexes a bulk load may have left for its end (``open`` calls it)."""
    await ensure_index(conn, POSTINGS_TEXT_INDEX)
    await ensure_index(conn, TSV_TEXT_INDEX)


__all__ = [
    "POSTINGS_TEXT_INDEX",
    "TSV_TEXT_INDEX",
    "TextIndex",
    "defer_index",
    "ensure_index",
    "ensure_text_indexes",
    "hnsw_index_name",
    "index_exists",
]
