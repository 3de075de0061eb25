"""The knowledge base's documents, chunks and typed bucket tables, written once
(``storage.interfaces.KBIndex``), over the dialect layer (``storage.sql``).

Why this shape: buckets, document writes and deletes, scopes, listings and the
re-embedding reads are the same logic on both engines, so they live here in portable
SQL. What really differs sits behind a small per-engine interface that each engine's
``kb_index.py`` fills in:

* full-text search (``TextSearch``): FTS5 BM25 on SQLite, a ``tsvector`` ranked with
  the same BM25 on PostgreSQL;
* vectors: how a chunk row carries its vector and where chunk ids come from
  (``_chunk_ids``, ``_chunk_row``, ``_write_chunks``, ``vector_column``), and what a
  write of vectors must leave behind (``_vectors_written``: PostgreSQL's HNSW graphs);
  reading them back (``iter_vectors``) and any search inside the database stay with
  the engine;
* the typed side tables' DDL and column types (``BucketTables``: each engine's
  ``kb_buckets`` module, in portable SQL).

Concurrency: every write is one transaction; a bucket's DDL takes the dialect's
advisory lock on the bucket and locks its row (PostgreSQL replicas; SQLite's single
writer needs neither). ``IN`` lists hold at most ``parts``' size (SQLite's bound
parameters are capped).

The reads are ``kb_reads`` (``KBReads``, which this class extends) and the engines'
parts ``kb_engine_parts``; this module is the writes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import orjson

from storage.kb_filters_sql import FilterSql
from storage.kb_records import (
    KBChunkWrite,
    KBDocumentWrite,
    KBSchemaConflict,
    KBStoredVectors,
    KBVectorWrite,
    TypedRow,
    utc_now,
)
from storage.kb_tables import ident, meta_table
from storage.sql import Row, SqlEngine, Tx, take_lock
from storage.stores.kb_engine_parts import BucketTables, TextSearch, parts
from storage.stores.kb_generation import WrittenHere, read_generation
from storage.stores.kb_reads import KBReads
from storage.stores.kb_vector_reuse import read_stored_vectors

_UPSERT_DOCUMENT = (
    "INSERT INTO kb_documents(id, bucket, title, source, url, content_hash, embed_model, embed_dim,"
    " metadata, chars, chunk_count, created_at, updated_at, origin, file_stamp, chunk_rules)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET bucket = excluded.bucket, title = excluded.title,"
    " source = excluded.source, origin = excluded.origin, url = excluded.url, content_hash = excluded.content_hash,"
    " embed_model = excluded.embed_model, embed_dim = excluded.embed_dim,"
    " metadata = excluded.metadata, chars = excluded.chars, chunk_count = excluded.chunk_count,"
    " updated_at = excluded.updated_at, file_stamp = excluded.file_stamp, chunk_rules = excluded.chunk_rules"
)


class SqlKBIndex(KBReads):
    """The KB index on one database; each engine's subclass supplies the parts above."""

    #: The chunk column holding a vector.
    vector_column: ClassVar[str]
    #: The most chunks an ingest puts in one write (``KBIndex.chunks_per_write``); no
    #: bound here: an engine whose writes share one writer with live runs sets one.
    chunks_per_write: int | None = None
    #: Batch writes an ingest keeps in flight at once (``KBIndex.writes_in_flight``): two,
    #: one committing while the next is sent; an engine whose writes run side by side
    #: on connections of their own may take more.
    writes_in_flight: int = 2

    def __init__(
        self, sql: SqlEngine, *, buckets: BucketTables, filters: FilterSql, text: TextSearch, location: str
    ) -> None:
        super().__init__(sql, buckets=buckets, filters=filters, text=text, location=location)
        #: Every write counts the knowledge base's generation up (``kb_generation``).
        self._written = WrittenHere()

    # ------------------------------------------------------------------ generation
    async def kb_generation(self) -> int:
        """The committed generation of the knowledge base: counted up by every write,
        by any process on the database (``storage.stores.kb_generation``)."""
        return await read_generation(self._sql)

    def written_here(self, seen: int, current: int) -> bool | None:
        """Whether the generations after ``seen`` up to ``current`` are all this
        process's own writes (``None``: one of them is a write here still committing, ask
        again after)."""
        return self._written.only_mine(seen, current)

    def seen_upto(self, generation: int) -> None:
        """The reader has taken in every change up to ``generation``."""
        self._written.forget(generation)

    def changed_elsewhere(self) -> None:
        """Another process changed the knowledge base: forget what is cached of it here
        (text statistics, bucket schemas)."""
        self._stats_changed()
        self._schemas.clear()
        self._schema_changes += 1

    async def _lock_bucket(self, tx: Tx, name: str) -> Row | None:
        """The bucket's advisory lock (its DDL), then its row, locked; ``None`` if absent."""
        await take_lock(tx, "kb_bucket:" + name)
        return await tx.fetchone("SELECT schema FROM kb_buckets WHERE name = ?" + tx.dialect.for_update, (name,))

    async def create_bucket(self, name: str, fields: Mapping[str, str], *, typed_row: TypedRow) -> dict[str, str]:
        ident(name)
        for f, t in fields.items():
            ident(f)
            if t not in self._buckets.SQL_TYPES:
                raise ValueError(f"field {f!r}: unknown type {t!r}")
        tables = self._buckets

        async def run(tx: Tx) -> dict[str, str]:
            row = await self._lock_bucket(tx, name)
            current: dict[str, str] = orjson.loads(row[0]) if row else {}
            for f, t in fields.items():
                if f in current and current[f] != t:
                    raise KBSchemaConflict(f"field {f!r} of bucket {name!r} is {current[f]}, cannot change it to {t}")
            added = {f: t for f, t in fields.items() if f not in current}
            merged = {**current, **added}
            if row is None:
                await tx.execute(
                    "INSERT INTO kb_buckets(name, schema, created_at) VALUES (?, ?, ?)",
                    (name, orjson.dumps(merged).decode(), utc_now()),
                )
                for stmt in tables.create_table_statements(name, merged):
                    await tx.execute(stmt)
            elif added:
                await tx.execute(
                    "UPDATE kb_buckets SET schema = ? WHERE name = ?", (orjson.dumps(merged).decode(), name)
                )
                for stmt in tables.create_table_statements(name, {}):
                    await tx.execute(stmt)
                for f, t in added.items():
                    for stmt in tables.add_column_statements(name, f, t):
                        await tx.execute(stmt)
                rows = await tx.fetchall("SELECT id, metadata FROM kb_documents WHERE bucket = ?", (name,))
                params = [(doc_id, *typed_row(merged, orjson.loads(meta))) for doc_id, meta in rows]
                if params:
                    await tx.executemany(tables.upsert_statement(name, merged), params)
                # Indexes last: built once from the rewritten rows, not kept up to date
                # through every row's rewrite.
                for stmt in tables.index_statements(name, merged):
                    await tx.execute(stmt)
            return merged

        merged = await self._written.write(self._sql, run)
        self._schemas[name] = dict(merged)
        self._schema_changes += 1
        return merged

    @staticmethod
    async def _typed_buckets(tx: Tx, buckets: set[str]) -> list[str]:
        """Those of ``buckets`` that declare typed fields (their rows live in ``meta_*``)."""
        if not buckets:
            return []
        names = sorted(buckets)
        marks = tx.dialect.marks(len(names))
        rows = await tx.fetchall(f"SELECT name, schema FROM kb_buckets WHERE name IN ({marks})", names)
        return [n for n, s in rows if orjson.loads(s)]

    @staticmethod
    async def _delete_rows(tx: Tx, table: str, column: str, ids: Sequence[str]) -> None:
        for part in parts(ids):
            await tx.execute(f"DELETE FROM {table} WHERE {column} IN ({tx.dialect.marks(len(part))})", part)

    # ------------------------------------------------------------------ writes
    async def set_file_stamps(
        self, stamps: Sequence[tuple[str, str | None]], *, origins: Mapping[str, str] | None = None
    ) -> None:
        """Record ``(doc_id, stamp)`` pairs: files that were touched but read the same
        (nothing else of the document changes, nothing is re-embedded). A document in
        ``origins`` gets that origin too: the same file read from where its tree is now
        (no state a process keeps in memory derives from it: no generation to count up)."""
        if not stamps:
            return
        moved = origins or {}
        stamp_only = [(s, i) for i, s in stamps if i not in moved]
        rehomed = [(s, moved[i], i) for i, s in stamps if i in moved]

        async def run(tx: Tx) -> None:
            if stamp_only:
                await tx.executemany("UPDATE kb_documents SET file_stamp = ? WHERE id = ?", stamp_only)
            if rehomed:
                await tx.executemany("UPDATE kb_documents SET file_stamp = ?, origin = ? WHERE id = ?", rehomed)

        await self._sql.transact_whole(run)

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """Nothing to defer unless the engine says otherwise."""
        yield

    async def _chunk_ids(self, tx: Tx, count: int) -> list[int]:
        """``count`` fresh chunk ids, ascending."""
        raise NotImplementedError

    def _document_row(self, d: KBDocumentWrite, bucket: str, now: str) -> tuple[Any, ...]:
        """The ``kb_documents`` row of ``d`` (``_UPSERT_DOCUMENT``'s columns)."""
        raise NotImplementedError

    def _chunk_row(
        self,
        chunk_id: int,
        d: KBDocumentWrite,
        title: str,
        c: KBChunkWrite,
        vector: npt.NDArray[np.float32] | None,
        bucket: str,
    ) -> tuple[Any, ...]:
        """The ``kb_chunks`` row of one chunk, as ``_write_chunks`` takes it (``bucket``:
        its document's, which PostgreSQL's chunks carry for their per-bucket graphs)."""
        raise NotImplementedError

    async def _write_chunks(self, tx: Tx, rows: Sequence[tuple[Any, ...]]) -> None:
        raise NotImplementedError

    async def _write_rows(self, tx: Tx, statement: str, rows: Sequence[tuple[Any, ...]]) -> None:
        """The rows of a one-row ``INSERT`` (documents, typed fields) in ``tx``; an engine
        may send several rows per statement (SQLite does: ``storage.sqlite.kb_index``)."""
        await tx.executemany(statement, rows)

    async def _vectors_written(self, tx: Tx, dims: Sequence[int], buckets: Sequence[str] | None) -> None:
        """Vectors of these dimensions were written in ``tx`` into ``buckets`` (``None``:
        not known here): an engine's index may follow (PostgreSQL's per-bucket graphs)."""

    async def write_documents(
        self, bucket: str, fields: Mapping[str, str], docs: Sequence[KBDocumentWrite]
    ) -> list[list[int]]:
        if not docs:
            return []
        ids = [d.id for d in docs]
        upsert_meta = self._buckets.upsert_statement(bucket, fields) if fields else None
        dims = sorted({int(d.embed_dim or d.vectors.shape[1]) for d in docs if d.vectors is not None})
        n_chunks = sum(len(d.chunks) for d in docs)

        async def run(tx: Tx) -> list[list[int]]:
            now = utc_now()
            previous: set[str] = set()
            for part in parts(ids):
                rows = await tx.fetchall(
                    f"SELECT DISTINCT bucket FROM kb_documents WHERE id IN ({tx.dialect.marks(len(part))})"
                    " AND bucket <> ?",
                    (*part, bucket),
                )
                previous.update(b for (b,) in rows)
            await self._delete_rows(tx, "kb_chunks", "doc_id", ids)
            for old in await self._typed_buckets(tx, previous):
                await self._delete_rows(tx, meta_table(old), "doc_id", ids)
            new_ids = await self._chunk_ids(tx, n_chunks) if n_chunks else []
            doc_rows, chunk_rows, meta_rows = [], [], []
            row_ids: list[list[int]] = []
            k = 0
            for d in docs:
                doc_rows.append(self._document_row(d, bucket, now))
                title = doc_rows[-1][2]
                row_ids.append(new_ids[k : k + len(d.chunks)])
                for j, c in enumerate(d.chunks):
                    vector = d.vectors[j] if d.vectors is not None else None
                    chunk_rows.append(self._chunk_row(new_ids[k], d, title, c, vector, bucket))
                    k += 1
                if upsert_meta is not None:
                    meta_rows.append((d.id, *d.typed))
            await self._write_rows(tx, _UPSERT_DOCUMENT, doc_rows)
            if chunk_rows:
                await self._write_chunks(tx, chunk_rows)
            if upsert_meta is not None and meta_rows:
                await self._write_rows(tx, upsert_meta, meta_rows)
            await self._vectors_written(tx, dims, [bucket])
            return row_ids

        try:
            return await self._written.write(self._sql, run)
        finally:
            self._stats_changed()

    async def delete_documents(self, doc_ids: Sequence[str]) -> list[str]:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return []

        async def run(tx: Tx) -> list[str]:
            found: dict[str, str] = {}
            for part in parts(ids):
                rows = await tx.fetchall(
                    f"SELECT id, bucket FROM kb_documents WHERE id IN ({tx.dialect.marks(len(part))})", part
                )
                found.update((str(doc_id), str(b)) for doc_id, b in rows)
            if not found:
                return []
            gone = [i for i in ids if i in found]
            await self._delete_rows(tx, "kb_chunks", "doc_id", gone)
            for b in await self._typed_buckets(tx, set(found.values())):
                await self._delete_rows(tx, meta_table(b), "doc_id", gone)
            await self._delete_rows(tx, "kb_documents", "id", gone)
            return gone

        try:
            return await self._written.write(self._sql, run)
        finally:
            self._stats_changed()

    async def delete_bucket(self, name: str) -> list[str] | None:
        ident(name)

        async def run(tx: Tx) -> list[str] | None:
            if await self._lock_bucket(tx, name) is None:
                return None
            gone = [str(r[0]) for r in await tx.fetchall("SELECT id FROM kb_documents WHERE bucket = ?", (name,))]
            await self._delete_rows(tx, "kb_chunks", "doc_id", gone)
            await tx.execute(f"DROP TABLE IF EXISTS {meta_table(name)}")
            await tx.execute("DELETE FROM kb_documents WHERE bucket = ?", (name,))
            await tx.execute("DELETE FROM kb_buckets WHERE name = ?", (name,))
            return gone

        try:
            gone = await self._written.write(self._sql, run)
        finally:
            self._stats_changed()
        self._schemas.pop(name, None)
        self._schema_changes += 1
        return gone

    async def stored_vectors(
        self, bucket: str, embed_model: str, embed_dim: int, doc_ids: Sequence[str]
    ) -> dict[str, KBStoredVectors]:
        """These documents' readable vectors of ``embed_model`` at ``embed_dim`` in
        ``bucket`` (``storage.stores.kb_vector_reuse``)."""
        return await read_stored_vectors(self._sql, self.vector_column, bucket, embed_model, embed_dim, doc_ids)

    async def store_vectors(self, embed_model: str, embed_dim: int, docs: Sequence[KBVectorWrite]) -> list[str]:
        if not docs:
            return []
        wanted = {d.doc_id: d for d in docs}
        doc_ids = list(wanted)

        async def run(tx: Tx) -> list[str]:
            # Locked in the order an ingest takes them (chunks, then the document): one
            # replacing a document waits for this transaction, or has already committed.
            lock = tx.dialect.for_update
            current: dict[str, list[int]] = {}
            same: set[str] = set()
            for part in parts(doc_ids):
                rows = await tx.fetchall(
                    f"SELECT doc_id, id FROM kb_chunks WHERE doc_id IN ({tx.dialect.marks(len(part))})"
                    f" ORDER BY doc_id, position{lock}",
                    part,
                )
                for doc_id, cid in rows:
                    current.setdefault(str(doc_id), []).append(int(cid))
            for part in parts(doc_ids):
                rows = await tx.fetchall(
                    f"SELECT id, content_hash FROM kb_documents WHERE id IN ({tx.dialect.marks(len(part))})"
                    f" ORDER BY id{lock}",
                    part,
                )
                same.update(str(i) for i, h in rows if wanted[str(i)].content_hash == h)
            written: list[str] = []
            updates: list[tuple[Any, ...]] = []
            for d in docs:
                ids = current.get(d.doc_id)
                if d.doc_id not in same or ids != [int(c) for c in d.chunk_ids] or len(ids) != len(d.vectors):
                    continue
                updates.extend(
                    (tx.dialect.encode_vector(np.asarray(v, np.float32)), cid)
                    for cid, v in zip(ids, d.vectors, strict=True)
                )
                written.append(d.doc_id)
            if not written:
                return []
            await tx.executemany(f"UPDATE kb_chunks SET {self.vector_column} = ? WHERE id = ?", updates)
            for part in parts(written):
                await tx.execute(
                    "UPDATE kb_documents SET embed_model = ?, embed_dim = ?"
                    f" WHERE id IN ({tx.dialect.marks(len(part))})",
                    (embed_model, embed_dim, *part),
                )
            await self._vectors_written(tx, [embed_dim], None)
            return written

        try:
            return await self._written.write(self._sql, run)
        finally:
            self._stats_changed()


__all__ = ["SqlKBIndex"]
