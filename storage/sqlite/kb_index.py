"""``SqliteKBIndex``: the knowledge base's documents, chunks, FTS5 index and stored
vectors on the shared SQLite file (``storage.interfaces.KBIndex``).

Why this shape:

* No connection of its own: writes are one ``db.transact`` each (one batch of
  documents, never across an embedding call), reads borrow a reader of the pool. The
  tables come from the one migration runner; only the ``meta_<bucket>`` tables of typed
  fields are created here, when a bucket is (``kb_buckets``).
* Full-text ranking is FTS5 BM25 (``kb_fts``): very common terms are left out of the
  ``MATCH``, a bucket without filters is answered from a probe of the whole index when
  it holds a fair share of it, and a filtered scope is ranked exactly with the scope
  test kept out of FTS5's reach. Term and document counts are cached until the next
  write through this index.
* Filters arrive as the engine-neutral tree of ``storage.kb_records``; ``kb_filters_sql``
  turns it into SQL.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiosqlite
import numpy as np
import orjson

from storage.kb_records import (
    KBBucketRecord,
    KBChunkRow,
    KBChunkText,
    KBCounts,
    KBDocState,
    KBDocumentListing,
    KBDocumentRecord,
    KBDocumentWrite,
    KBRanked,
    KBSchemaConflict,
    KBScope,
    KBTextTuning,
    KBUnembedded,
    KBVectorRows,
    KBVectorWrite,
    TypedRow,
    utc_now,
)
from storage.sqlite import kb_buckets, kb_fts
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.kb_filters_sql import count_sql, scope_sql

_PART = 500  # ids per IN (...) list

_UPSERT_DOCUMENT = (
    "INSERT INTO kb_documents(id, bucket, title, source, url, content_hash, embed_model, embed_dim,"
    " metadata, chars, chunk_count, created_at, updated_at, origin)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(id) DO UPDATE SET bucket = excluded.bucket, title = excluded.title,"
    " source = excluded.source, origin = excluded.origin, url = excluded.url, content_hash = excluded.content_hash,"
    " embed_model = excluded.embed_model, embed_dim = excluded.embed_dim,"
    " metadata = excluded.metadata, chars = excluded.chars, chunk_count = excluded.chunk_count,"
    " updated_at = excluded.updated_at"
)
_INSERT_CHUNK = (
    "INSERT INTO kb_chunks(id, doc_id, position, title, heading, text, vector, page, page_end)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _marks(n: int) -> str:
    return ", ".join("?" * n)


def _parts(ids: Sequence[str]) -> list[Sequence[str]]:
    return [ids[i : i + _PART] for i in range(0, len(ids), _PART)]


class SqliteKBIndex:
    """The KB index on one ``SqliteDatabase``; built by ``open_sqlite_storage``."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._text = kb_fts.FtsRanker(db)

    @property
    def location(self) -> str:
        return str(self._db.path)

    def _stats_changed(self) -> None:
        self._text.changed()

    # ------------------------------------------------------------------ buckets
    async def bucket_schemas(self) -> dict[str, dict[str, str]]:
        rows = await self._db.fetchall("SELECT name, schema FROM kb_buckets")
        return {name: orjson.loads(schema) for name, schema in rows}

    async def list_buckets(self) -> list[KBBucketRecord]:
        rows = await self._db.fetchall(
            "SELECT b.name, b.schema, b.created_at, count(d.id), coalesce(sum(d.chunk_count), 0) "
            "FROM kb_buckets b LEFT JOIN kb_documents d ON d.bucket = b.name "
            "GROUP BY b.name ORDER BY b.name"
        )
        return [KBBucketRecord(n, orjson.loads(s), int(dc), int(cc), c) for n, s, c, dc, cc in rows]

    async def create_bucket(self, name: str, fields: Mapping[str, str], *, typed_row: TypedRow) -> dict[str, str]:
        kb_buckets.ident(name)
        for f, t in fields.items():
            kb_buckets.ident(f)
            if t not in kb_buckets.SQL_TYPES:
                raise ValueError(f"field {f!r}: unknown type {t!r}")

        async def run(conn: aiosqlite.Connection) -> dict[str, str]:
            async with conn.execute("SELECT schema FROM kb_buckets WHERE name = ?", (name,)) as cur:
                row = await cur.fetchone()
            current: dict[str, str] = orjson.loads(row[0]) if row else {}
            for f, t in fields.items():
                if f in current and current[f] != t:
                    raise KBSchemaConflict(f"field {f!r} of bucket {name!r} is {current[f]}, cannot change it to {t}")
            added = {f: t for f, t in fields.items() if f not in current}
            merged = {**current, **added}
            if row is None:
                await conn.execute(
                    "INSERT INTO kb_buckets(name, schema, created_at) VALUES (?, ?, ?)",
                    (name, orjson.dumps(merged).decode(), utc_now()),
                )
                for stmt in kb_buckets.create_table_statements(name, merged):
                    await conn.execute(stmt)
            elif added:
                await conn.execute(
                    "UPDATE kb_buckets SET schema = ? WHERE name = ?", (orjson.dumps(merged).decode(), name)
                )
                for stmt in kb_buckets.create_table_statements(name, {}):
                    await conn.execute(stmt)
                for f, t in added.items():
                    for stmt in kb_buckets.add_column_statements(name, f, t):
                        await conn.execute(stmt)
                await self._backfill(conn, name, merged, typed_row)
            return merged

        return await self._db.transact(run)

    @staticmethod
    async def _backfill(conn: aiosqlite.Connection, bucket: str, schema: dict[str, str], typed_row: TypedRow) -> None:
        async with conn.execute("SELECT id, metadata FROM kb_documents WHERE bucket = ?", (bucket,)) as cur:
            rows = await cur.fetchall()
        params = [(doc_id, *typed_row(schema, orjson.loads(meta_json))) for doc_id, meta_json in rows]
        if params:
            await conn.executemany(kb_buckets.upsert_statement(bucket, schema), params)

    @staticmethod
    async def _typed_buckets(conn: aiosqlite.Connection, buckets: set[str]) -> list[str]:
        """Those of ``buckets`` that declare typed fields (their rows live in ``meta_*``)."""
        if not buckets:
            return []
        names = sorted(buckets)
        sql = f"SELECT name, schema FROM kb_buckets WHERE name IN ({_marks(len(names))})"
        async with conn.execute(sql, names) as cur:
            return [n for n, s in await cur.fetchall() if orjson.loads(s)]

    # ------------------------------------------------------------------ writes
    async def document_states(self, doc_ids: Sequence[str]) -> dict[str, KBDocState]:
        out: dict[str, KBDocState] = {}
        for part in _parts(doc_ids):
            rows = await self._db.fetchall(
                "SELECT id, content_hash, embed_model, embed_dim, bucket FROM kb_documents "
                f"WHERE id IN ({_marks(len(part))})",
                part,
            )
            for doc_id, h, model, dim, b in rows:
                out[doc_id] = KBDocState(h, model, dim, b)
        return out

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """Nothing to defer: FTS5 and the row indexes are cheap per row, and vectors are
        searched exactly (in memory)."""
        yield

    async def write_documents(
        self, bucket: str, fields: Mapping[str, str], docs: Sequence[KBDocumentWrite]
    ) -> list[list[int]]:
        if not docs:
            return []
        ids = [d.id for d in docs]
        upsert_meta = kb_buckets.upsert_statement(bucket, fields) if fields else None

        async def run(conn: aiosqlite.Connection) -> list[list[int]]:
            now = utc_now()
            previous: set[str] = set()
            for part in _parts(ids):
                sql = f"SELECT DISTINCT bucket FROM kb_documents WHERE id IN ({_marks(len(part))})"
                async with conn.execute(sql, part) as cur:
                    previous.update(b for (b,) in await cur.fetchall() if b != bucket)
            await self._delete_rows(conn, "kb_chunks", "doc_id", ids)
            for old in await self._typed_buckets(conn, previous):
                await self._delete_rows(conn, kb_buckets.meta_table(old), "doc_id", ids)
            async with conn.execute("SELECT coalesce(max(id), 0) FROM kb_chunks") as cur:
                row = await cur.fetchone()
            next_id = int(row[0]) + 1 if row else 1
            doc_rows = []
            chunk_rows = []
            meta_rows = []
            row_ids: list[list[int]] = []
            for d in docs:
                doc_rows.append(
                    (
                        d.id, bucket, d.title, d.source, d.url, d.content_hash, d.embed_model, d.embed_dim,
                        orjson.dumps(d.metadata, default=str).decode(), d.chars, len(d.chunks), now, now,
                        d.origin,
                    )
                )
                mine = []
                for j, c in enumerate(d.chunks):
                    blob = d.vectors[j].astype(np.float32).tobytes() if d.vectors is not None else None
                    chunk_rows.append(
                        (next_id, d.id, c.position, d.title, c.heading, c.text, blob, c.page, c.page_end)
                    )
                    mine.append(next_id)
                    next_id += 1
                row_ids.append(mine)
                if upsert_meta is not None:
                    meta_rows.append((d.id, *d.typed))
            await conn.executemany(_UPSERT_DOCUMENT, doc_rows)
            await conn.executemany(_INSERT_CHUNK, chunk_rows)
            if upsert_meta is not None and meta_rows:
                await conn.executemany(upsert_meta, meta_rows)
            return row_ids

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()

    async def delete_documents(self, doc_ids: Sequence[str]) -> list[str]:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return []

        async def run(conn: aiosqlite.Connection) -> list[str]:
            found: dict[str, str] = {}
            for part in _parts(ids):
                async with conn.execute(
                    f"SELECT id, bucket FROM kb_documents WHERE id IN ({_marks(len(part))})", part
                ) as cur:
                    found.update((str(doc_id), str(bucket)) for doc_id, bucket in await cur.fetchall())
            if not found:
                return []
            gone = list(found)
            await self._delete_rows(conn, "kb_chunks", "doc_id", gone)
            for b in await self._typed_buckets(conn, set(found.values())):
                await self._delete_rows(conn, kb_buckets.meta_table(b), "doc_id", gone)
            await self._delete_rows(conn, "kb_documents", "id", gone)
            return gone

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()

    @staticmethod
    async def _delete_rows(conn: aiosqlite.Connection, table: str, column: str, ids: Sequence[str]) -> None:
        for part in _parts(ids):
            await conn.execute(f"DELETE FROM {table} WHERE {column} IN ({_marks(len(part))})", part)

    async def source_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[tuple[str, str]]:
        if prefix and origin:
            # A range on the (bucket, origin) index instead of LIKE (no escaping, no scan).
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin >= ? AND origin < ?"
            params: tuple[Any, ...] = (bucket, origin, upper)
        else:
            sql, params = "SELECT id, origin FROM kb_documents WHERE bucket = ? AND origin = ?", (bucket, origin)
        return [(str(i), str(s)) for i, s in await self._db.fetchall(sql, params)]

    async def delete_bucket(self, name: str) -> list[str] | None:
        kb_buckets.ident(name)

        async def run(conn: aiosqlite.Connection) -> list[str] | None:
            async with conn.execute("SELECT schema FROM kb_buckets WHERE name = ?", (name,)) as cur:
                row = await cur.fetchone()
            if row is None:
                return None
            async with conn.execute("SELECT id FROM kb_documents WHERE bucket = ?", (name,)) as cur:
                gone = [str(r[0]) for r in await cur.fetchall()]
            await self._delete_rows(conn, "kb_chunks", "doc_id", gone)
            await conn.execute(f"DROP TABLE IF EXISTS {kb_buckets.meta_table(name)}")
            await conn.execute("DELETE FROM kb_documents WHERE bucket = ?", (name,))
            await conn.execute("DELETE FROM kb_buckets WHERE name = ?", (name,))
            return gone

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()

    # ------------------------------------------------------------------ vectors
    async def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        sql = (
            "SELECT c.id, c.doc_id, d.bucket, c.vector FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.embed_model = ? AND d.embed_dim = ? AND c.vector IS NOT NULL ORDER BY c.doc_id, c.position"
        )
        expected = dim * 4
        current: str | None = None
        bucket_of = ""
        ids: list[int] = []
        vecs: list[bytes] = []
        async with self._db.reading() as conn, conn.execute(sql, (embed_model, dim)) as cur:
            while True:
                rows = await cur.fetchmany(5000)
                if not rows:
                    break
                for cid, doc_id, bucket, blob in rows:
                    if blob is None or len(blob) != expected:
                        continue
                    if doc_id != current:
                        if current is not None and ids:
                            yield _vector_rows(current, bucket_of, ids, vecs, dim)
                        current, ids, vecs, bucket_of = doc_id, [], [], bucket
                    ids.append(cid)
                    vecs.append(blob)
        if current is not None and ids:
            yield _vector_rows(current, bucket_of, ids, vecs, dim)

    # ------------------------------------------------------------------ scopes
    async def scoped_doc_ids(self, scope: KBScope) -> list[str]:
        if scope.doc_ids is not None:
            return list(scope.doc_ids)
        sql, params = scope_sql(scope)
        return [r[0] for r in await self._db.fetchall(sql, params)]

    async def count_documents(self, scope: KBScope) -> int:
        sql, params = count_sql(scope)
        row = await self._db.fetchone(sql, params)
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ full text
    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        return await self._text.selective_terms(terms, min_matches, tuning)

    async def text_candidates(
        self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning
    ) -> KBRanked:
        return await self._text.text_candidates(terms, scope, limit, tuning)

    # ------------------------------------------------------------------ rows
    async def hydrate(self, chunk_ids: Sequence[int]) -> list[KBChunkRow]:
        if not chunk_ids:
            return []
        ids = list(chunk_ids)
        rows = await self._db.fetchall(
            "SELECT c.id, c.doc_id, c.position, c.title, c.heading, c.text, d.bucket, d.source, d.url, d.metadata,"
            " c.page, c.page_end "
            f"FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.id IN ({_marks(len(ids))})",
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
        row = await self._db.fetchone(
            "SELECT id, bucket, title, source, url, content_hash, embed_model, embed_dim, metadata, chars,"
            " chunk_count, created_at, updated_at FROM kb_documents WHERE id = ?",
            (doc_id,),
        )
        if row is None:
            return None
        (did, bucket, title, source, url, chash, model, dim, meta_json, chars, nchunks, created, updated) = row
        typed: dict[str, Any] = {}
        srow = await self._db.fetchone("SELECT schema FROM kb_buckets WHERE name = ?", (bucket,))
        schema: dict[str, str] = orjson.loads(srow[0]) if srow else {}
        if schema:
            trow = await self._db.fetchone(kb_buckets.select_fields_statement(bucket, schema), (did,))
            if trow is not None:
                for (f, t), v in zip(schema.items(), trow, strict=True):
                    typed[f] = bool(v) if t == "BOOLEAN" and v is not None else v
        return KBDocumentRecord(
            did, bucket, title, source, url, chash, model, dim, orjson.loads(meta_json), typed,
            chars, nchunks, created, updated,
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
            + " ORDER BY id LIMIT ?"
        )
        rows = await self._db.fetchall(sql, (*params, max(0, int(limit))))
        return [KBDocumentListing(str(i), b, t, s, u, int(c), int(n), up) for i, b, t, s, u, c, n, up in rows]

    async def counts(self, embed_model: str | None, embed_dim: int | None) -> KBCounts:
        row = await self._db.fetchone(
            "SELECT count(*), coalesce(sum(chunk_count), 0), "
            "coalesce(sum(CASE WHEN embed_model IS ? AND embed_dim IS ? THEN 0 ELSE 1 END), 0) FROM kb_documents",
            (embed_model, embed_dim),
        )
        docs, chunks, stale = (int(x) for x in row) if row else (0, 0, 0)
        return KBCounts(docs, chunks, stale)

    # ------------------------------------------------------------------ re-embedding
    async def documents_without_vectors(
        self, embed_model: str, embed_dim: int, *, limit: int, after: str | None = None
    ) -> list[KBUnembedded]:
        docs = await self._db.fetchall(
            "SELECT id, bucket, title, content_hash FROM kb_documents"
            " WHERE (embed_model IS NOT ? OR embed_dim IS NOT ?) AND chunk_count > 0 AND id > ?"
            " ORDER BY id LIMIT ?",
            (embed_model, embed_dim, after or "", max(0, int(limit))),
        )
        if not docs:
            return []
        chunks: dict[str, list[KBChunkText]] = {}
        ids = [str(r[0]) for r in docs]
        rows = await self._db.fetchall(
            f"SELECT doc_id, id, heading, text FROM kb_chunks WHERE doc_id IN ({_marks(len(ids))})"
            " ORDER BY doc_id, position",
            ids,
        )
        for doc_id, cid, heading, text in rows:
            chunks.setdefault(str(doc_id), []).append(KBChunkText(int(cid), heading or "", text or ""))
        return [
            KBUnembedded(str(i), b, t or "", h, tuple(chunks.get(str(i), ()))) for i, b, t, h in docs
        ]

    async def store_vectors(self, embed_model: str, embed_dim: int, docs: Sequence[KBVectorWrite]) -> list[str]:
        if not docs:
            return []

        async def run(conn: aiosqlite.Connection) -> list[str]:
            written: list[str] = []
            for d in docs:
                async with conn.execute("SELECT content_hash FROM kb_documents WHERE id = ?", (d.doc_id,)) as cur:
                    row = await cur.fetchone()
                if row is None or row[0] != d.content_hash:
                    continue
                async with conn.execute(
                    "SELECT id FROM kb_chunks WHERE doc_id = ? ORDER BY position", (d.doc_id,)
                ) as cur:
                    current = [int(r[0]) for r in await cur.fetchall()]
                if current != [int(c) for c in d.chunk_ids] or len(current) != len(d.vectors):
                    continue
                await conn.executemany(
                    "UPDATE kb_chunks SET vector = ? WHERE id = ?",
                    [(np.asarray(v, np.float32).tobytes(), cid) for cid, v in zip(current, d.vectors, strict=True)],
                )
                await conn.execute(
                    "UPDATE kb_documents SET embed_model = ?, embed_dim = ? WHERE id = ?",
                    (embed_model, embed_dim, d.doc_id),
                )
                written.append(d.doc_id)
            return written

        return await self._db.transact(run)


def _vector_rows(doc_id: str, bucket: str, ids: list[int], vecs: list[bytes], dim: int) -> KBVectorRows:
    matrix = np.frombuffer(b"".join(vecs), dtype=np.float32).reshape(len(ids), dim)
    return KBVectorRows(doc_id, bucket, ids, matrix)


__all__ = ["SqliteKBIndex"]
