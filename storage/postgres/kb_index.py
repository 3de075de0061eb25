"""``PostgresKBIndex``: the knowledge base's documents, chunks, full-text index and
vectors on PostgreSQL (``storage.interfaces.KBIndex``), with pgvector's search as
``KBVectorSearch`` (``vector_candidates``).

Why this shape (the SQLite engine's ``kb_index.py`` is the model; differences only):

* Full text: a generated ``tsvector`` column with a GIN index (``migrations``), ranked
  with FTS5's BM25 (``kb_text``), so both engines give the same kind of scores.
* Vectors: pgvector's ``vector`` column. The service's dense side asks
  ``vector_candidates`` (``KBVectorSearch``; ``kb_vectors``): answered inside PostgreSQL,
  exactly for small scopes and through an HNSW index (cosine) for large ones — one
  partial index per dimension, created when the first vector of that dimension is
  written (pgvector indexes at most 2,000 dimensions; larger ones are scanned exactly).
  ``iter_vectors`` stays for tools that want every vector (nothing in the service loads
  them into memory on this engine).
* Chunk ids come from a sequence (several replicas may ingest at once); chunks are
  written with ``COPY``.
* Every write is one transaction; a bucket's DDL (its ``meta_<bucket>`` table) takes an
  advisory lock on the bucket first, so two replicas creating it do not collide.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
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
from storage.kb_tables import ident
from storage.postgres import kb_buckets
from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.kb_filters_sql import count_sql, scope_sql
from storage.postgres.kb_text import TextRanker
from storage.postgres.kb_vectors import EXACT_SCOPE_VECTORS, HNSW_MAX_DIM, VectorSearch

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

_UPSERT_DOCUMENT = (
    "INSERT INTO kb_documents(id, bucket, title, source, url, content_hash, embed_model, embed_dim,"
    " metadata, chars, chunk_count, created_at, updated_at, origin)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
    " ON CONFLICT (id) DO UPDATE SET bucket = excluded.bucket, title = excluded.title,"
    " source = excluded.source, origin = excluded.origin, url = excluded.url, content_hash = excluded.content_hash,"
    " embed_model = excluded.embed_model, embed_dim = excluded.embed_dim,"
    " metadata = excluded.metadata, chars = excluded.chars, chunk_count = excluded.chunk_count,"
    " updated_at = excluded.updated_at"
)
#: Binary ``COPY``: pgvector's text form of a vector is 384 floats printed one by one
#: in Python (~0.37 ms a chunk, most of a bulk load's time); its binary form is a copy
#: of the float32 buffer.
_COPY_CHUNKS = (
    "COPY kb_chunks (id, doc_id, position, title, heading, text, ntok, embedding, page, page_end)"
    " FROM STDIN (FORMAT BINARY)"
)
_CHUNK_TYPES = ("int8", "text", "int4", "text", "text", "text", "int4", "vector", "int4", "int4")


def clean(text: str | None) -> str | None:
    """PostgreSQL text cannot hold NUL characters; extracted documents sometimes do."""
    return text.replace("\x00", " ") if text is not None and "\x00" in text else text


def token_count(*texts: str) -> int:
    """BM25's document length: word tokens, as FTS5's tokenizer counts them."""
    return sum(len(_TOKEN.findall(t)) for t in texts)


def hnsw_index_name(dim: int) -> str:
    return f"kb_chunks_hnsw_{int(dim)}"


#: Memory for building an HNSW index in one go (``bulk_load``): the graph of a million
#: 384-dimension vectors takes about 2 GB; when it does not fit, pgvector says so and
#: goes on, more slowly. Only the building backend uses it, only while it builds.
HNSW_BUILD_MEMORY = "2GB"


async def hnsw_index_exists(conn: Conn, dim: int) -> bool:
    cur = await conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (hnsw_index_name(dim),))
    return await cur.fetchone() is not None


async def ensure_hnsw_index(conn: Conn, dim: int, *, bulk_build: bool = False) -> None:
    """Create the partial HNSW index (cosine) of vectors of ``dim`` dimensions unless it
    exists (under an advisory lock, so two writers do not both build it). ``bulk_build``:
    over many rows at once (more memory, no statement timeout)."""
    if not 0 < dim <= HNSW_MAX_DIM:
        return
    if not await hnsw_index_exists(conn, dim):
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('kb_chunks_hnsw', %s))", (dim,))
        if bulk_build:
            await conn.execute(f"SET LOCAL maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")  # type: ignore[arg-type]
            await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute(
            f"CREATE INDEX IF NOT EXISTS {hnsw_index_name(dim)} ON kb_chunks "  # type: ignore[arg-type]
            f"USING hnsw ((embedding::vector({int(dim)})) vector_cosine_ops) "
            f"WHERE vector_dims(embedding) = {int(dim)}"
        )


async def _build_hnsw(conn: Conn, *, dim: int) -> None:
    await ensure_hnsw_index(conn, dim, bulk_build=True)


class PostgresKBIndex:
    """The KB index on one ``PostgresDatabase``; built by ``open_postgres_storage``."""

    def __init__(self, db: PostgresDatabase, *, exact_scope_vectors: int = EXACT_SCOPE_VECTORS) -> None:
        self._db = db
        self._text = TextRanker(db)
        self._vectors = VectorSearch(db, self._schema, exact_scope_vectors=exact_scope_vectors)
        self._schemas: dict[str, dict[str, str]] = {}
        self._indexed_dims: set[int] = set()
        self._bulk = 0
        #: Dimensions written during ``bulk_load`` whose HNSW index did not exist yet.
        self._deferred_dims: set[int] = set()

    @property
    def location(self) -> str:
        return self._db.location

    @property
    def exact_scope_vectors(self) -> int:
        """Scopes of at most this many vectors are searched exactly, larger ones through
        the HNSW index (``kb_vectors``); 0 sends every search to the index."""
        return self._vectors.exact_scope_vectors

    @exact_scope_vectors.setter
    def exact_scope_vectors(self, value: int) -> None:
        self._vectors.exact_scope_vectors = max(0, int(value))

    def _stats_changed(self) -> None:
        self._text.changed()
        self._vectors.changed()

    async def _schema(self, bucket: str | None) -> dict[str, str] | None:
        if bucket is None:
            return None
        known = self._schemas.get(bucket)
        if known is None:
            row = await self._db.fetchone("SELECT schema FROM kb_buckets WHERE name = %s", (bucket,))
            known = orjson.loads(row[0]) if row else {}
            self._schemas[bucket] = known
        return known

    # ------------------------------------------------------------------ buckets
    async def bucket_schemas(self) -> dict[str, dict[str, str]]:
        rows = await self._db.fetchall("SELECT name, schema FROM kb_buckets")
        out = {name: orjson.loads(schema) for name, schema in rows}
        self._schemas = {k: dict(v) for k, v in out.items()}
        return out

    async def list_buckets(self) -> list[KBBucketRecord]:
        rows = await self._db.fetchall(
            "SELECT b.name, b.schema, b.created_at, count(d.id), coalesce(sum(d.chunk_count), 0) "
            "FROM kb_buckets b LEFT JOIN kb_documents d ON d.bucket = b.name "
            "GROUP BY b.name ORDER BY b.name"
        )
        return [KBBucketRecord(n, orjson.loads(s), int(dc), int(cc), c) for n, s, c, dc, cc in rows]

    async def create_bucket(self, name: str, fields: Mapping[str, str], *, typed_row: TypedRow) -> dict[str, str]:
        ident(name)
        for f, t in fields.items():
            ident(f)
            if t not in kb_buckets.SQL_TYPES:
                raise ValueError(f"field {f!r}: unknown type {t!r}")

        async def run(conn: Conn) -> dict[str, str]:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('kb_bucket:' || %s, 0))", (name,))
            cur = await conn.execute("SELECT schema FROM kb_buckets WHERE name = %s FOR UPDATE", (name,))
            row = await cur.fetchone()
            current: dict[str, str] = orjson.loads(row[0]) if row else {}
            for f, t in fields.items():
                if f in current and current[f] != t:
                    raise KBSchemaConflict(f"field {f!r} of bucket {name!r} is {current[f]}, cannot change it to {t}")
            added = {f: t for f, t in fields.items() if f not in current}
            merged = {**current, **added}
            if row is None:
                await conn.execute(
                    "INSERT INTO kb_buckets(name, schema, created_at) VALUES (%s, %s, %s)",
                    (name, orjson.dumps(merged).decode(), utc_now()),
                )
                for stmt in kb_buckets.create_table_statements(name, merged):
                    await conn.execute(stmt)  # type: ignore[arg-type]
            elif added:
                await conn.execute(
                    "UPDATE kb_buckets SET schema = %s WHERE name = %s", (orjson.dumps(merged).decode(), name)
                )
                for stmt in kb_buckets.create_table_statements(name, {}):
                    await conn.execute(stmt)  # type: ignore[arg-type]
                for f, t in added.items():
                    for stmt in kb_buckets.add_column_statements(name, f, t):
                        await conn.execute(stmt)  # type: ignore[arg-type]
                await self._backfill(conn, name, merged, typed_row)
            return merged

        merged = await self._db.transact(run)
        self._schemas[name] = dict(merged)
        return merged

    @staticmethod
    async def _backfill(conn: Conn, bucket: str, schema: dict[str, str], typed_row: TypedRow) -> None:
        cur = await conn.execute("SELECT id, metadata FROM kb_documents WHERE bucket = %s", (bucket,))
        rows = await cur.fetchall()
        params = [(doc_id, *typed_row(schema, orjson.loads(meta_json))) for doc_id, meta_json in rows]
        if params:
            async with conn.cursor() as c:
                await c.executemany(kb_buckets.upsert_statement(bucket, schema), params)  # type: ignore[arg-type]

    @staticmethod
    async def _typed_buckets(conn: Conn, buckets: set[str]) -> list[str]:
        """Those of ``buckets`` that declare typed fields (their rows live in ``meta_*``)."""
        if not buckets:
            return []
        cur = await conn.execute("SELECT name, schema FROM kb_buckets WHERE name = ANY(%s)", (sorted(buckets),))
        return [n for n, s in await cur.fetchall() if orjson.loads(s)]

    # ------------------------------------------------------------------ writes
    async def document_states(self, doc_ids: Sequence[str]) -> dict[str, KBDocState]:
        if not doc_ids:
            return {}
        rows = await self._db.fetchall(
            "SELECT id, content_hash, embed_model, embed_dim, bucket FROM kb_documents WHERE id = ANY(%s)",
            (list(doc_ids),),
        )
        return {doc_id: KBDocState(h, model, dim, b) for doc_id, h, model, dim, b in rows}

    async def write_documents(
        self, bucket: str, fields: Mapping[str, str], docs: Sequence[KBDocumentWrite]
    ) -> list[list[int]]:
        if not docs:
            return []
        ids = [d.id for d in docs]
        upsert_meta = kb_buckets.upsert_statement(bucket, fields) if fields else None
        dims = sorted({int(d.embed_dim or d.vectors.shape[1]) for d in docs if d.vectors is not None})
        n_chunks = sum(len(d.chunks) for d in docs)

        async def run(conn: Conn) -> list[list[int]]:
            now = utc_now()
            cur = await conn.execute(
                "SELECT DISTINCT bucket FROM kb_documents WHERE id = ANY(%s) AND bucket <> %s", (ids, bucket)
            )
            previous = {b for (b,) in await cur.fetchall()}
            await conn.execute("DELETE FROM kb_chunks WHERE doc_id = ANY(%s)", (ids,))
            for old in await self._typed_buckets(conn, previous):
                await conn.execute(f"DELETE FROM {kb_buckets.meta_table(old)} WHERE doc_id = ANY(%s)", (ids,))
            new_ids: list[int] = []
            if n_chunks:
                cur = await conn.execute(
                    "SELECT nextval('kb_chunks_id_seq') FROM generate_series(1, %s)", (n_chunks,)
                )
                new_ids = sorted(int(r[0]) for r in await cur.fetchall())
            doc_rows = []
            chunk_rows: list[tuple[Any, ...]] = []
            meta_rows = []
            row_ids: list[list[int]] = []
            k = 0
            for d in docs:
                title = clean(d.title) or ""
                doc_rows.append(
                    (
                        d.id, bucket, title, clean(d.source) or "", clean(d.url), d.content_hash, d.embed_model,
                        d.embed_dim, orjson.dumps(d.metadata, default=str).decode().replace("\\u0000", " "),
                        d.chars, len(d.chunks), now, now, clean(d.origin),
                    )
                )
                mine = []
                for j, c in enumerate(d.chunks):
                    heading, text = clean(c.heading) or "", clean(c.text) or ""
                    vec = np.asarray(d.vectors[j], dtype=np.float32) if d.vectors is not None else None
                    chunk_rows.append(
                        (new_ids[k], d.id, c.position, title, heading, text, token_count(title, heading, text), vec,
                         c.page, c.page_end)
                    )
                    mine.append(new_ids[k])
                    k += 1
                row_ids.append(mine)
                if upsert_meta is not None:
                    meta_rows.append((d.id, *d.typed))
            async with conn.cursor() as cur:
                await cur.executemany(_UPSERT_DOCUMENT, doc_rows)
                if chunk_rows:
                    async with cur.copy(_COPY_CHUNKS) as copy:
                        copy.set_types(list(_CHUNK_TYPES))
                        for r in chunk_rows:
                            await copy.write_row(r)
                if upsert_meta is not None and meta_rows:
                    await cur.executemany(upsert_meta, meta_rows)  # type: ignore[arg-type]
            for dim in dims:
                await self._ensure_hnsw(conn, dim)
            return row_ids

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()

    async def _ensure_hnsw(self, conn: Conn, dim: int) -> None:
        """The partial HNSW index (cosine) of vectors of ``dim`` dimensions, made once —
        or, during ``bulk_load``, noted to be built when the load ends."""
        if dim in self._indexed_dims or dim in self._deferred_dims:
            return
        if self._bulk and 0 < dim <= HNSW_MAX_DIM and not await hnsw_index_exists(conn, dim):
            self._deferred_dims.add(dim)
            return
        await ensure_hnsw_index(conn, dim)
        self._indexed_dims.add(dim)

    @contextlib.asynccontextmanager
    async def bulk_load(self) -> AsyncIterator[None]:
        """Inserting into an HNSW graph row by row costs milliseconds per vector (it
        capped ingest near 340 chunks/s); building it once over the loaded rows is what
        pgvector recommends for initial loads. So an index that did not exist when the
        load began is built at its end (even when the load fails half-way: the rows
        that committed need it); an existing one is maintained as usual."""
        self._bulk += 1
        try:
            yield
        finally:
            self._bulk -= 1
            if not self._bulk and self._deferred_dims:
                dims, self._deferred_dims = sorted(self._deferred_dims), set()
                for dim in dims:
                    await self._db.transact(functools.partial(_build_hnsw, dim=dim))
                    self._indexed_dims.add(dim)
                # Fresh planner statistics for the loaded rows (autovacuum would get there later).
                async with self._db.reading() as conn:
                    await conn.execute("ANALYZE kb_chunks")
                self._stats_changed()

    async def delete_documents(self, doc_ids: Sequence[str]) -> list[str]:
        ids = list(dict.fromkeys(doc_ids))
        if not ids:
            return []

        async def run(conn: Conn) -> list[str]:
            cur = await conn.execute("SELECT id, bucket FROM kb_documents WHERE id = ANY(%s)", (ids,))
            found: dict[str, str] = {str(i): str(b) for i, b in await cur.fetchall()}
            if not found:
                return []
            gone = list(found)
            await conn.execute("DELETE FROM kb_chunks WHERE doc_id = ANY(%s)", (gone,))
            for b in await self._typed_buckets(conn, set(found.values())):
                await conn.execute(f"DELETE FROM {kb_buckets.meta_table(b)} WHERE doc_id = ANY(%s)", (gone,))
            await conn.execute("DELETE FROM kb_documents WHERE id = ANY(%s)", (gone,))
            return [i for i in ids if i in found]

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()

    async def source_documents(self, bucket: str, origin: str, *, prefix: bool) -> list[tuple[str, str]]:
        if prefix and origin:
            # A byte-wise range on the (bucket, origin) index instead of LIKE.
            upper = origin[:-1] + chr(ord(origin[-1]) + 1)
            sql = "SELECT id, origin FROM kb_documents WHERE bucket = %s AND origin >= %s AND origin < %s"
            params: tuple[Any, ...] = (bucket, origin, upper)
        else:
            sql, params = "SELECT id, origin FROM kb_documents WHERE bucket = %s AND origin = %s", (bucket, origin)
        return [(str(i), str(s)) for i, s in await self._db.fetchall(sql, params)]

    async def delete_bucket(self, name: str) -> list[str] | None:
        ident(name)

        async def run(conn: Conn) -> list[str] | None:
            # The same advisory lock as the bucket's DDL in ``create_bucket``.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('kb_bucket:' || %s, 0))", (name,))
            cur = await conn.execute("SELECT schema FROM kb_buckets WHERE name = %s FOR UPDATE", (name,))
            if await cur.fetchone() is None:
                return None
            cur = await conn.execute("SELECT id FROM kb_documents WHERE bucket = %s", (name,))
            gone = [str(r[0]) for r in await cur.fetchall()]
            await conn.execute("DELETE FROM kb_chunks WHERE doc_id = ANY(%s)", (gone,))
            await conn.execute(f"DROP TABLE IF EXISTS {kb_buckets.meta_table(name)}")
            await conn.execute("DELETE FROM kb_documents WHERE bucket = %s", (name,))
            await conn.execute("DELETE FROM kb_buckets WHERE name = %s", (name,))
            return gone

        try:
            gone = await self._db.transact(run)
        finally:
            self._stats_changed()
        self._schemas.pop(name, None)
        return gone

    # ------------------------------------------------------------------ vectors
    async def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        sql = (
            "SELECT c.id, c.doc_id, d.bucket, c.embedding FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.embed_model = %s AND d.embed_dim = %s AND c.embedding IS NOT NULL ORDER BY c.doc_id, c.position"
        )
        current: str | None = None
        bucket_of = ""
        ids: list[int] = []
        vecs: list[npt.NDArray[np.float32]] = []
        # A server-side cursor (it needs a transaction): 1M vectors never sit in memory twice.
        async with (
            self._db.reading() as conn,
            conn.transaction(),
            conn.cursor(name="kb_vectors", binary=True) as cur,
        ):
            cur.itersize = 5000
            await cur.execute(sql, (embed_model, dim))
            async for cid, doc_id, bucket, vector in cur:
                arr = vector.to_numpy() if hasattr(vector, "to_numpy") else np.asarray(vector, np.float32)
                if arr.shape[0] != dim:
                    continue
                if doc_id != current:
                    if current is not None and ids:
                        yield KBVectorRows(current, bucket_of, ids, np.vstack(vecs).astype(np.float32))
                    current, ids, vecs, bucket_of = doc_id, [], [], bucket
                ids.append(int(cid))
                vecs.append(arr)
        if current is not None and ids:
            yield KBVectorRows(current, bucket_of, ids, np.vstack(vecs).astype(np.float32))

    async def vector_candidates(
        self, query: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> KBRanked:
        """The ``limit`` chunks nearest to ``query`` by cosine among the vectors of
        ``embed_model`` within ``scope`` (scores: cosine similarity, best first): exact
        for small scopes, through the HNSW index for large ones (``kb_vectors``)."""
        return await self._vectors.candidates(query, embed_model, scope, limit)

    async def cosines(self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32]) -> dict[int, float]:
        return await self._vectors.cosines(chunk_ids, query)

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        return await self._vectors.count_vectors(embed_model, dim)

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        return await self._vectors.has_vectors(embed_model, dim)

    # ------------------------------------------------------------------ scopes
    async def scoped_doc_ids(self, scope: KBScope) -> list[str]:
        if scope.doc_ids is not None:
            return list(scope.doc_ids)
        sql, params = scope_sql(scope, await self._schema(scope.bucket))
        return [r[0] for r in await self._db.fetchall(sql, params)]

    async def count_documents(self, scope: KBScope) -> int:
        sql, params = count_sql(scope, await self._schema(scope.bucket))
        row = await self._db.fetchone(sql, params)
        return int(row[0]) if row else 0

    # ------------------------------------------------------------------ full text
    async def selective_terms(self, terms: Sequence[str], min_matches: int, tuning: KBTextTuning) -> list[str]:
        return await self._text.selective_terms(terms, min_matches, tuning)

    async def text_candidates(
        self, terms: Sequence[str], scope: KBScope, limit: int, tuning: KBTextTuning
    ) -> KBRanked:
        schema = await self._schema(scope.bucket) if scope.filter is not None else None
        return await self._text.text_candidates(terms, scope, limit, tuning, schema)

    # ------------------------------------------------------------------ rows
    async def hydrate(self, chunk_ids: Sequence[int]) -> list[KBChunkRow]:
        if not chunk_ids:
            return []
        rows = await self._db.fetchall(
            "SELECT c.id, c.doc_id, c.position, c.title, c.heading, c.text, d.bucket, d.source, d.url, d.metadata,"
            " c.page, c.page_end FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.id = ANY(%s)",
            ([int(i) for i in chunk_ids],),
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
            " chunk_count, created_at, updated_at FROM kb_documents WHERE id = %s",
            (doc_id,),
        )
        if row is None:
            return None
        (did, bucket, title, source, url, chash, model, dim, meta_json, chars, nchunks, created, updated) = row
        typed: dict[str, Any] = {}
        srow = await self._db.fetchone("SELECT schema FROM kb_buckets WHERE name = %s", (bucket,))
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
            where.append("bucket = %s")
            params.append(bucket)
        if after is not None:
            where.append("id > %s")
            params.append(after)
        sql = (
            "SELECT id, bucket, title, source, url, chars, chunk_count, updated_at FROM kb_documents"
            + (" WHERE " + " AND ".join(where) if where else "")
            + ' ORDER BY id COLLATE "C" LIMIT %s'
        )
        rows = await self._db.fetchall(sql, (*params, max(0, int(limit))))
        return [KBDocumentListing(str(i), b, t, s, u, int(c), int(n), up) for i, b, t, s, u, c, n, up in rows]

    async def counts(self, embed_model: str | None, embed_dim: int | None) -> KBCounts:
        row = await self._db.fetchone(
            "SELECT count(*), coalesce(sum(chunk_count), 0), coalesce(sum(CASE WHEN embed_model IS NOT DISTINCT "
            "FROM %s AND embed_dim IS NOT DISTINCT FROM %s THEN 0 ELSE 1 END), 0) FROM kb_documents",
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
            " WHERE (embed_model IS DISTINCT FROM %s OR embed_dim IS DISTINCT FROM %s) AND chunk_count > 0"
            ' AND id COLLATE "C" > %s ORDER BY id COLLATE "C" LIMIT %s',
            (embed_model, embed_dim, after or "", max(0, int(limit))),
        )
        if not docs:
            return []
        ids = [str(r[0]) for r in docs]
        chunks: dict[str, list[KBChunkText]] = {}
        rows = await self._db.fetchall(
            "SELECT doc_id, id, heading, text FROM kb_chunks WHERE doc_id = ANY(%s) ORDER BY doc_id, position",
            (ids,),
        )
        for doc_id, cid, heading, text in rows:
            chunks.setdefault(str(doc_id), []).append(KBChunkText(int(cid), heading or "", text or ""))
        return [KBUnembedded(str(i), b, t or "", h, tuple(chunks.get(str(i), ()))) for i, b, t, h in docs]

    async def store_vectors(self, embed_model: str, embed_dim: int, docs: Sequence[KBVectorWrite]) -> list[str]:
        if not docs:
            return []
        wanted = {d.doc_id: d for d in docs}

        async def run(conn: Conn) -> list[str]:
            # Locked in the order an ingest takes them (chunks, then the document): one
            # replacing a document waits for this transaction, or has already committed.
            cur = await conn.execute(
                "SELECT doc_id, id FROM kb_chunks WHERE doc_id = ANY(%s) ORDER BY doc_id, position FOR UPDATE",
                (list(wanted),),
            )
            current: dict[str, list[int]] = {}
            for doc_id, cid in await cur.fetchall():
                current.setdefault(str(doc_id), []).append(int(cid))
            cur = await conn.execute(
                "SELECT id, content_hash FROM kb_documents WHERE id = ANY(%s) ORDER BY id FOR UPDATE",
                (list(wanted),),
            )
            same = {str(i) for i, h in await cur.fetchall() if wanted[str(i)].content_hash == h}
            written: list[str] = []
            updates: list[tuple[Any, ...]] = []
            for d in docs:
                ids = current.get(d.doc_id)
                if d.doc_id not in same or ids != [int(c) for c in d.chunk_ids] or len(ids) != len(d.vectors):
                    continue
                updates.extend((np.asarray(v, np.float32), cid) for cid, v in zip(ids, d.vectors, strict=True))
                written.append(d.doc_id)
            if not written:
                return []
            async with conn.cursor() as c:
                await c.executemany("UPDATE kb_chunks SET embedding = %s WHERE id = %s", updates)
            await conn.execute(
                "UPDATE kb_documents SET embed_model = %s, embed_dim = %s WHERE id = ANY(%s)",
                (embed_model, embed_dim, written),
            )
            await self._ensure_hnsw(conn, embed_dim)
            return written

        try:
            return await self._db.transact(run)
        finally:
            self._stats_changed()


__all__ = ["PostgresKBIndex", "ensure_hnsw_index", "hnsw_index_exists", "hnsw_index_name"]
