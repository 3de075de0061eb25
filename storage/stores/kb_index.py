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
writer needs neither). ``IN`` lists hold at most ``_PART`` ids (SQLite's bound
parameters are capped).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from storage.kb_filters_sql import FilterSql, Schema
from storage.kb_records import (
    KBBucketRecord,
    KBChunkRow,
    KBChunkText,
    KBChunkWrite,
    KBCounts,
    KBDocState,
    KBDocumentListing,
    KBDocumentRecord,
    KBDocumentWrite,
    KBFileDocument,
    KBRanked,
    KBSchemaConflict,
    KBScope,
    KBTextTuning,
    KBUnembedded,
    KBVectorWrite,
    TypedRow,
    utc_now,
)
from storage.kb_tables import ident, meta_table
from storage.sql import Row, SqlEngine, Tx, take_lock

_PART = 500  # ids per IN (...) list

_UPSERT_DOCUMENT = (
    "INSERT INTO kb_documents(id, bucket, title, source, url, content_hash, embed_model, embed_dim,"
    " metadata, chars, chunk_count, created_at, updated_at, origin, file_stamp)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (id) DO UPDATE SET bucket = excluded.bucket, title = excluded.title,"
    " source = excluded.source, origin = excluded.origin, url = excluded.url, content_hash = excluded.content_hash,"
    " embed_model = excluded.embed_model, embed_dim = excluded.embed_dim,"
    " metadata = excluded.metadata, chars = excluded.chars, chunk_count = excluded.chunk_count,"
    " updated_at = excluded.updated_at, file_stamp = excluded.file_stamp"
)


class TextSearch(Protocol):
    """An engine's full-text ranking, with whatever statistics it caches."""

    def changed(self) -> None:
        """The index was written: cached statistics are stale."""
        ...

    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]: ...

    async def text_candidates(
        self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning, schema: Schema | None = None
    ) -> KBRanked: ...


class BucketTables(Protocol):
    """An engine's DDL and statements of the typed side tables (its ``kb_buckets``)."""

    @property
    def SQL_TYPES(self) -> Mapping[str, str]:
        """A field type -> the engine's column type."""
        ...

    def create_table_statements(self, bucket: str, fields: Mapping[str, str]) -> list[str]: ...

    def add_column_statements(self, bucket: str, name: str, ftype: str) -> list[str]: ...

    def index_statements(self, bucket: str, fields: Mapping[str, str]) -> list[str]:
        """The field indexes of the bucket's ``fields`` (all of them), after columns were
        added: an engine whose indexes span several fields builds them again."""
        ...

    def upsert_statement(self, bucket: str, fields: Mapping[str, str]) -> str: ...

    def select_fields_statement(self, bucket: str, fields: Mapping[str, str]) -> str: ...


def parts(ids: Sequence[Any]) -> list[Sequence[Any]]:
    return [ids[i : i + _PART] for i in range(0, len(ids), _PART)]


class SqlKBIndex:
    """The KB index on one database; each engine's subclass supplies the parts above."""

    #: The chunk column holding a vector.
    vector_column: ClassVar[str]
    #: Whether the engine's filter conditions depend on a field's type (then the
    #: bucket's schema is read, and cached, for every filtered scope).
    schema_in_filters: ClassVar[bool] = False

    def __init__(
        self, sql: SqlEngine, *, buckets: BucketTables, filters: FilterSql, text: TextSearch, location: str
    ) -> None:
        self._sql = sql
        self._buckets = buckets
        self._filters = filters
        self._text = text
        self._location = location
        self._schemas: dict[str, dict[str, str]] = {}

    @property
    def location(self) -> str:
        return self._location

    def _stats_changed(self) -> None:
        self._text.changed()

    async def _schema(self, bucket: str | None) -> dict[str, str] | None:
        """The bucket's typed fields, cached (fields are only ever added, never retyped)."""
        if bucket is None:
            return None
        known = self._schemas.get(bucket)
        if known is None:
            row = await self._sql.fetchone("SELECT schema FROM kb_buckets WHERE name = ?", (bucket,))
            known = orjson.loads(row[0]) if row else {}
            self._schemas[bucket] = known
        return known

    async def _filter_schema(self, scope: KBScope) -> dict[str, str] | None:
        if not self.schema_in_filters or scope.filter is None:
            return None
        return await self._schema(scope.bucket)

    # ------------------------------------------------------------------ buckets
    async def bucket_schemas(self) -> dict[str, dict[str, str]]:
        rows = await self._sql.fetchall("SELECT name, schema FROM kb_buckets")
        out = {name: orjson.loads(schema) for name, schema in rows}
        self._schemas = {k: dict(v) for k, v in out.items()}
        return out

    async def list_buckets(self) -> list[KBBucketRecord]:
        rows = await self._sql.fetchall(
            "SELECT b.name, b.schema, b.created_at, count(d.id), coalesce(sum(d.chunk_count), 0) "
            "FROM kb_buckets b LEFT JOIN kb_documents d ON d.bucket = b.name "
            "GROUP BY b.name ORDER BY b.name"
        )
        return [KBBucketRecord(n, orjson.loads(s), int(dc), int(cc), c) for n, s, c, dc, cc in rows]

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

        merged = await self._sql.transact(run)
        self._schemas[name] = dict(merged)
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
    async def document_states(self, doc_ids: Sequence[str]) -> dict[str, KBDocState]:
        out: dict[str, KBDocState] = {}
        for part in parts(doc_ids):
            rows = await self._sql.fetchall(
                "SELECT id, content_hash, embed_model, embed_dim, bucket, file_stamp FROM kb_documents "
                f"WHERE id IN ({self._sql.dialect.marks(len(part))})",
                part,
            )
            for doc_id, h, model, dim, b, stamp in rows:
                out[doc_id] = KBDocState(h, model, dim, b, stamp)
        return out

    async def set_file_stamps(self, stamps: Sequence[tuple[str, str | None]]) -> None:
        """Record ``(doc_id, stamp)`` pairs: files that were touched but read the same
        (nothing else of the document changes, nothing is re-embedded)."""
        if not stamps:
            return

        async def run(tx: Tx) -> None:
            await tx.executemany("UPDATE kb_documents SET file_stamp = ? WHERE id = ?", [(s, i) for i, s in stamps])

        await self._sql.transact(run)

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
            return await self._sql.transact(run)
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
            return await self._sql.transact(run)
        finally:
            self._stats_changed()

    async def source_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[tuple[str, str]]:
        if prefix and origin:
            # A byte-wise range on the (bucket, origin) index instead of LIKE (no escaping, no scan).
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin >= ? AND origin < ?"
            params: tuple[Any, ...] = (bucket, origin, upper)
        else:
            sql, params = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin = ?", (bucket, origin)
        return [(str(i), str(s)) for i, s in await self._sql.fetchall(sql, params)]

    async def file_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[KBFileDocument]:
        """``source_documents`` with each document's file stamp and embedder."""
        cols = "SELECT id, origin, file_stamp, embed_model, embed_dim FROM kb_documents WHERE bucket = ?"
        if prefix and origin:
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql, params = f"{cols} AND origin >= ? AND origin < ?", [bucket, origin, upper]
        else:
            sql, params = f"{cols} AND origin = ?", [bucket, origin]
        rows = await self._sql.fetchall(sql, params)
        return [KBFileDocument(str(i), str(o), s, m, d) for i, o, s, m, d in rows]

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
            gone = await self._sql.transact(run)
        finally:
            self._stats_changed()
        self._schemas.pop(name, None)
        return gone

    # ------------------------------------------------------------------ scopes
    async def scoped_doc_ids(self, scope: KBScope) -> list[str]:
        if scope.doc_ids is not None:
            return list(scope.doc_ids)
        # The filter fragments are in the engine's own paramstyle: run as they are.
        sql, params = self._filters.scope_sql(scope, await self._filter_schema(scope))
        return [r[0] for r in await self._sql.db.fetchall(sql, params)]

    async def count_documents(self, scope: KBScope) -> int:
        sql, params = self._filters.count_sql(scope, await self._filter_schema(scope))
        row = await self._sql.db.fetchone(sql, params)
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ full text
    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        return await self._text.selective_terms(terms, min_matches, tuning)

    async def text_candidates(self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning) -> KBRanked:
        return await self._text.text_candidates(terms, scope, limit, tuning, await self._filter_schema(scope))

    # ------------------------------------------------------------------ rows
    async def hydrate(self, chunk_ids: Sequence[int]) -> list[KBChunkRow]:
        if not chunk_ids:
            return []
        ids = [int(i) for i in chunk_ids]
        marks = self._sql.dialect.marks(len(ids))
        rows = await self._sql.fetchall(
            "SELECT c.id, c.doc_id, c.position, c.title, c.heading, c.text, d.bucket, d.source, d.url, d.metadata,"
            " c.page, c.page_end "
            f"FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.id IN ({marks})",
            ids,
        )
        meta_cache: dict[str, dict[str, Any]] = {}
        out = []
        for cid, doc_id, pos, title, heading, text, bucket, source, url, meta_json, page, page_end in rows:
            meta = meta_cache.get(doc_id)
            if meta is None:
                meta = meta_cache[doc_id] = orjson.loads(meta_json)
            out.append(KBChunkRow(cid, doc_id, pos, title, heading, text, bucket, source, url, meta, page, page_end))
        return out

    async def get_document(self, doc_id: str) -> KBDocumentRecord | None:
        row = await self._sql.fetchone(
            "SELECT id, bucket, title, source, url, content_hash, embed_model, embed_dim, metadata, chars,"
            " chunk_count, created_at, updated_at FROM kb_documents WHERE id = ?",
            (doc_id,),
        )
        if row is None:
            return None
        (did, bucket, title, source, url, chash, model, dim, meta_json, chars, nchunks, created, updated) = row
        typed: dict[str, Any] = {}
        srow = await self._sql.fetchone("SELECT schema FROM kb_buckets WHERE name = ?", (bucket,))
        schema: dict[str, str] = orjson.loads(srow[0]) if srow else {}
        if schema:
            trow = await self._sql.fetchone(self._buckets.select_fields_statement(bucket, schema), (did,))
            if trow is not None:
                for (f, t), v in zip(schema.items(), trow, strict=True):
                    typed[f] = bool(v) if t == "BOOLEAN" and v is not None else v
        return KBDocumentRecord(
            did,
            bucket,
            title,
            source,
            url,
            chash,
            model,
            dim,
            orjson.loads(meta_json),
            typed,
            chars,
            nchunks,
            created,
            updated,
        )

    async def list_documents(
        self, bucket: str | None, *, limit: int, after: str | None = None
    ) -> list[KBDocumentListing]:
        where, params = [], []
        if bucket is not None:
            where.append("bucket = ?")
            params.append(bucket)
        if after is not None:
            where.append("id > ?")
            params.append(after)
        sql = (
            "SELECT id, bucket, title, source, url, chars, chunk_count, updated_at FROM kb_documents"
            + (" WHERE " + " AND ".join(where) if where else "")
            + f" ORDER BY id{self._sql.dialect.byte_order} LIMIT ?"
        )
        rows = await self._sql.fetchall(sql, (*params, max(0, int(limit))))
        return [KBDocumentListing(str(i), b, t, s, u, int(c), int(n), up) for i, b, t, s, u, c, n, up in rows]

    async def counts(self, embed_model: str | None, embed_dim: int | None) -> KBCounts:
        same = self._sql.dialect.same_as
        row = await self._sql.fetchone(
            "SELECT count(*), coalesce(sum(chunk_count), 0), "
            f"coalesce(sum(CASE WHEN embed_model {same} ? AND embed_dim {same} ? THEN 0 ELSE 1 END), 0)"
            " FROM kb_documents",
            (embed_model, embed_dim),
        )
        docs, chunks, stale = (int(x) for x in row) if row else (0, 0, 0)
        return KBCounts(docs, chunks, stale)

    # ------------------------------------------------------------------ re-embedding
    async def documents_without_vectors(
        self, embed_model: str, embed_dim: int, *, limit: int, after: str | None = None
    ) -> list[KBUnembedded]:
        d = self._sql.dialect
        docs = await self._sql.fetchall(
            "SELECT id, bucket, title, content_hash FROM kb_documents"
            f" WHERE (embed_model {d.differs_from} ? OR embed_dim {d.differs_from} ?) AND chunk_count > 0"
            f" AND id{d.byte_order} > ? ORDER BY id{d.byte_order} LIMIT ?",
            (embed_model, embed_dim, after or "", max(0, int(limit))),
        )
        if not docs:
            return []
        ids = [str(r[0]) for r in docs]
        chunks: dict[str, list[KBChunkText]] = {}
        rows = await self._sql.fetchall(
            f"SELECT doc_id, id, heading, text FROM kb_chunks WHERE doc_id IN ({d.marks(len(ids))})"
            " ORDER BY doc_id, position",
            ids,
        )
        for doc_id, cid, heading, text in rows:
            chunks.setdefault(str(doc_id), []).append(KBChunkText(int(cid), heading or "", text or ""))
        return [KBUnembedded(str(i), b, t or "", h, tuple(chunks.get(str(i), ()))) for i, b, t, h in docs]

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
            return await self._sql.transact(run)
        finally:
            self._stats_changed()


__all__ = ["BucketTables", "SqlKBIndex", "TextSearch", "parts"]
