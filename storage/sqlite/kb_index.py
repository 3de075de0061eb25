"""``SqliteKBIndex``: the knowledge base on the shared SQLite file; the logic is
``storage.stores.kb_index`` (written once), this is what SQLite does its own way.

Why this shape:

* No connection of its own: writes are one transaction on the writer each (one batch
  of documents, never across an embedding call), reads borrow a reader of the pool.
  The tables come from the one migration runner; only the ``meta_<bucket>`` tables of
  typed fields are created here, when a bucket is (``kb_buckets``).
* Full-text ranking is FTS5 BM25 (``kb_fts``): very common terms are left out of the
  ``MATCH``, a bucket without filters is answered from a probe of the whole index when
  it holds a fair share of it, and a filtered scope is ranked exactly with the scope
  test kept out of FTS5's reach. Term and document counts are cached until the next
  write through this index.
* Vectors are float32 bytes in ``kb_chunks.vector``, searched exactly in memory
  (``iter_vectors``); chunk ids continue past the largest ever issued (one writer).
* Every process on the file holds that memory (``--workers`` siblings, and the server
  while ``agentchat ingest`` writes): each write counts the knowledge base's generation
  up (``storage.stores.kb_generation``), and a process that reads a generation it did
  not write reloads (``knowledge.freshness``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson

from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope, KBVectorRows
from storage.sql import Tx
from storage.sqlite import kb_buckets, kb_fts
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.kb_filters_sql import SQLITE_FILTERS
from storage.stores.kb_index import SqlKBIndex

_INSERT_CHUNK = (
    "INSERT INTO kb_chunks(id, doc_id, position, title, heading, text, vector, page, page_end)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: Rows per ``INSERT`` statement of a write (documents, chunks, typed fields). Each
#: statement that fires the FTS5 trigger opens a statement savepoint on the FTS table,
#: and FTS5 flushes its pending terms to a new segment at every savepoint: one row per
#: statement (``executemany``) wrote one segment per chunk, then merged them. And every
#: statement's step lets go of the GIL and must win it back from the event loop, busy
#: preparing the next batch meanwhile (20k plain rows beside a busy thread: 493 ms row by
#: row, 284 ms 250 rows a statement). Since a write runs whole on the writer's thread
#: (``SqlEngine.transact_whole``), 2,000 rows a statement - an ingest batch's whole table
#: in one statement - cost 159-166 us of CPU a chunk at 100k against 203-214 with 250
#: (fewer FTS5 segments to merge, fewer GIL hand-backs; bench/ingest_ab.py, issue 24).
#: An ingest's write now holds at most ``CHUNKS_PER_WRITE`` chunks (a larger document
#: all of its own), so its chunk statements hold that many; the CPU a chunk was the same
#: (ingest_ab_sqlite_20000_writeparts.json).
ROWS_PER_INSERT = 2000
#: The most chunks an ingest puts in one write (``KBIndex.chunks_per_write``; whole
#: documents, a larger one alone). The one writer also commits every live run's events,
#: and none while a knowledge-base write runs: an ingest batch of 256 documents in one
#: write held every stream's next token for as long as its thousands of chunks took
#: (seconds; a "docs" run of bench/kb_write_stall.py). 500 chunks are ~60-100 ms of the
#: writer's CPU; a bulk write also never queues ahead of the events that came during
#: the one before (``SqliteDatabase.transact_sync``).
CHUNKS_PER_WRITE = 500
#: Bound parameters per statement, under SQLite's limit (32,766): a bucket with many
#: typed fields gets fewer rows a statement.
MAX_PARAMETERS = 30_000


def multi_row(statement: str, rows: int) -> str:
    """``statement`` (an ``INSERT ... VALUES (?, ..., ?)``, perhaps with an upsert clause
    after it) inserting ``rows`` rows at once."""
    head, found, rest = statement.partition(" VALUES (")
    marks, closed, tail = rest.partition(")")
    if not found or not closed or set(marks) - set("?, "):
        raise ValueError(f"not a one-row INSERT ... VALUES (?, ...): {statement[:80]!r}")
    return f"{head} VALUES " + ", ".join([f"({marks})"] * rows) + tail


async def insert_rows(tx: Tx, statement: str, rows: Sequence[Sequence[Any]]) -> None:
    """``rows`` through the one-row ``statement``, ``ROWS_PER_INSERT`` rows a statement
    (see there why), in order: a later row that conflicts with an earlier one meets it
    as it would with one statement per row."""
    if not rows:
        return
    step = max(1, min(ROWS_PER_INSERT, MAX_PARAMETERS // max(1, len(rows[0]))))
    for start in range(0, len(rows), step):
        part = rows[start : start + step]
        await tx.execute(multi_row(statement, len(part)), [v for row in part for v in row])


class SqliteKBIndex(SqlKBIndex):
    """The KB index on one ``SqliteDatabase``; built by ``open_sqlite_storage``."""

    vector_column = "vector"
    unreadable_vector_sql = "c.vector IS NULL OR length(c.vector) <> 4 * ?"  # float32 blobs
    chunks_per_write = CHUNKS_PER_WRITE

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(
            SqliteSql(db), buckets=kb_buckets, filters=SQLITE_FILTERS, text=kb_fts.FtsRanker(db), location=str(db.path)
        )
        self._db = db

    async def scoped_doc_ids(self, scope: KBScope) -> list[str]:
        """The documents in scope as one JSON array built by SQLite and parsed by orjson,
        not one row per document: a filtered search by meaning needs them all (the
        vector mask), and at 1M chunks a filter keeping 38k invoices read its ids for
        ~40 ms of CPU instead of ~60 (issue 24)."""
        if scope.doc_ids is not None:
            return list(scope.doc_ids)
        sql, params = self._filters.scope_sql(scope, await self._filter_schema(scope))
        row = await self._db.fetchone(f"WITH s(id) AS ({sql}) SELECT json_group_array(id) FROM s", params)
        return list(orjson.loads(row[0])) if row and row[0] else []

    async def scoped_chunk_ids(self, scope: KBScope) -> npt.NDArray[np.int64]:
        """The chunks in scope as one JSON array built by SQLite, from the filter's own
        table through ``kb_chunks``' document index (``scope_chunks_sql``): a filtered
        search by meaning masks the in-memory matrix by chunk id, where mapping 38k
        document ids through a dict of every document cost 35-45 ms of the event loop at
        1M chunks (issue 24). Ascending, as the text ranking's scope test wants them."""
        if scope.chunk_ids is not None or scope.doc_ids is not None:
            return await super().scoped_chunk_ids(scope)
        sql, params = SQLITE_FILTERS.scope_chunks_sql(scope, await self._filter_schema(scope))
        row = await self._db.fetchone(f"WITH s(id) AS ({sql}) SELECT json_group_array(id) FROM s", params)
        ids = np.array(orjson.loads(row[0]) if row and row[0] else [], np.int64)
        ids.sort()
        return ids

    async def _chunk_ids(self, tx: Tx, count: int) -> list[int]:
        """Past every id ever issued (``kb_chunk_ids``, migration 27), never max(id)+1:
        that gave a deleted newest document's ids to the next ingest, of any bucket or
        owner, while a search's scope or a process's vector index could still hold them.
        The max of the table covers chunks written with their own ids."""
        row = await tx.fetchone(
            "UPDATE kb_chunk_ids SET issued = max(issued, (SELECT coalesce(max(id), 0) FROM kb_chunks)) + ? "
            "RETURNING issued",
            (count,),
        )
        if row is None:
            raise RuntimeError("kb_chunk_ids has no row: the database was not migrated")
        last = int(row[0])
        return list(range(last - count + 1, last + 1))

    def _document_row(self, d: KBDocumentWrite, bucket: str, now: str) -> tuple[Any, ...]:
        return (
            d.id,
            bucket,
            d.title,
            d.source,
            d.url,
            d.content_hash,
            d.embed_model,
            d.embed_dim,
            orjson.dumps(d.metadata, default=str).decode(),
            d.chars,
            len(d.chunks),
            now,
            now,
            d.origin,
            d.file_stamp,
            d.chunk_rules,
        )

    def _chunk_row(
        self,
        chunk_id: int,
        d: KBDocumentWrite,
        title: str,
        c: KBChunkWrite,
        vector: npt.NDArray[np.float32] | None,
        bucket: str,
    ) -> tuple[Any, ...]:
        blob = vector.astype(np.float32).tobytes() if vector is not None else None
        return (chunk_id, d.id, c.position, title, c.heading, c.text, blob, c.page, c.page_end)

    async def _write_chunks(self, tx: Tx, rows: Sequence[tuple[Any, ...]]) -> None:
        await insert_rows(tx, _INSERT_CHUNK, rows)

    async def _write_rows(self, tx: Tx, statement: str, rows: Sequence[tuple[Any, ...]]) -> None:
        await insert_rows(tx, statement, rows)

    async def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        sql = (
            "SELECT c.id, c.doc_id, d.bucket, c.vector FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.embed_model = ? AND d.embed_dim = ? ORDER BY c.doc_id, c.position"
        )
        expected = dim * 4
        current: str | None = None
        bucket_of = ""
        ids: list[int] = []
        vecs: list[bytes] = []
        unreadable = 0
        async with self._db.reading() as conn, conn.execute(sql, (embed_model, dim)) as cur:
            while True:
                rows = await cur.fetchmany(5000)
                if not rows:
                    break
                for cid, doc_id, bucket, blob in rows:
                    if doc_id != current:
                        if current is not None and (ids or unreadable):
                            yield _vector_rows(current, bucket_of, ids, vecs, dim, unreadable)
                        current, ids, vecs, bucket_of, unreadable = doc_id, [], [], bucket, 0
                    if blob is None or len(blob) != expected:
                        # Counted, not skipped silently: the chunk of an embedded document
                        # that no search by meaning could ever find (``KBVectorRows.unreadable``).
                        unreadable += 1
                        continue
                    ids.append(cid)
                    vecs.append(blob)
        if current is not None and (ids or unreadable):
            yield _vector_rows(current, bucket_of, ids, vecs, dim, unreadable)


def _vector_rows(
    doc_id: str, bucket: str, ids: list[int], vecs: list[bytes], dim: int, unreadable: int
) -> KBVectorRows:
    matrix = np.frombuffer(b"".join(vecs), dtype=np.float32).reshape(len(ids), dim)
    return KBVectorRows(doc_id, bucket, ids, matrix, unreadable)


__all__ = ["SqliteKBIndex"]
