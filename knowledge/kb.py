"""``KnowledgeBase``: documents, chunks, FTS5 and vectors on one SQLite file.

Why this shape:

* One writer connection (WAL allows one writer; an ``asyncio.Lock`` keeps our own
  statements from interleaving inside a transaction) and one reader connection, each
  with a ``busy_timeout`` because other stores share the file. Transactions are short:
  one per batch of documents, never across an embedding call.
* The vector side is an in-memory float32 matrix (``VectorIndex``) loaded at open and
  updated after each commit; scans over large matrices run in a worker thread.
* Search = FTS5 BM25 ∪ vector top-N → score fusion (``ranking.fuse``) → cheap
  re-ranking → at most 3 chunks per document → scores on 0..1. Filters are compiled
  once and resolved to the set of documents in scope, used twice: to restrict the BM25
  ranking and as a document mask for the vectors.
* BM25 cost grows with the matches it must score, so terms in a large share of the
  chunks (near-zero idf) are left out of the ``MATCH`` (``fts.selective_terms``). A
  scoped search walks the matches once and scores only those in scope, with the scope
  test kept out of FTS5's reach (``+rowid IN``): handed to FTS5 as a rowid constraint
  it would re-run the ``MATCH`` and bm25's statistics per chunk. A bucket without
  filters probes the best matches of the whole index instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
import orjson

from knowledge import buckets as bucket_sql
from knowledge.chunking import Chunk, chunk_text
from knowledge.filters import (
    CompiledFilter,
    FilterError,
    compile_filters,
    constraint_label,
    join_constraints,
    parse_filters,
    split_constraints,
)
from knowledge.fts import or_expression, selective_terms
from knowledge.loaders import LoadedDocument, iter_files, load_file, record_to_document
from knowledge.migrations import apply_migrations, utc_now
from knowledge.names import check_bucket_name, is_doc_id, short_hash, slugify
from knowledge.ranking import Candidate, FusionSide, QueryTerms, dense_weight, fuse, rerank, signal_spread, snippet
from knowledge.textnorm import content_terms
from knowledge.types import (
    BucketInfo,
    ChunkHit,
    DocumentIn,
    IngestReport,
    Rejection,
    SearchMode,
    SearchResponse,
)
from knowledge.vectors import VectorIndex
from toolindex.embedder import Embedder, EmbeddingError

Progress = Callable[[int, int, str], None]

DEFAULT_BUCKET = "default"
_BM25_WEIGHTS = "4.0, 2.0, 1.0"  # title, heading, text
_MODES = ("hybrid", "text", "semantic")


class UnknownBucketError(ValueError):
    """A search or ingest named a bucket that does not exist; the message lists those that do."""


@dataclass(frozen=True, slots=True)
class KBConfig:
    """Tuning knobs; the defaults are the documented behaviour."""

    chunk_target: int = 800
    chunk_overlap: int = 120
    embed_batch: int = 64
    batch_documents: int = 256
    candidates: int = 100
    per_doc: int = 3
    max_top_k: int = 50
    overload_threshold: int = 200
    flat_spread: float = 0.05
    executor_rows: int = 2_000
    query_cache: int = 256
    busy_timeout_ms: int = 10_000
    #: BM25 skips terms in more than this share of all chunks (FTS5 idf ≤ log 4) …
    common_term_fraction: float = 0.2
    #: … once they are in at least this many chunks (below, scoring them is cheap).
    common_term_min_df: int = 5_000
    #: Text search in a bucket without filters first ranks this many best matches of
    #: the whole index and keeps the bucket's; only when too few are, it ranks within
    #: the bucket exactly.
    text_probe: int = 1_000
    term_stats_cache: int = 20_000


@dataclass(slots=True)
class _Prepared:
    doc: DocumentIn
    line: int | None
    content_hash: str
    typed: list[Any]
    chunks: list[Chunk]
    existing_bucket: str | None
    vectors: np.ndarray | None = None
    row_ids: list[int] | None = None


class KnowledgeBase:
    """The knowledge base. Build with ``await KnowledgeBase.open(path, embedder)``."""

    def __init__(
        self,
        db_path: str,
        embedder: Embedder | None,
        writer: aiosqlite.Connection,
        reader: aiosqlite.Connection,
        config: KBConfig,
        schema_version: int,
    ) -> None:
        self.db_path = db_path
        self.embedder = embedder
        self.config = config
        self.schema_version = schema_version
        self._writer = writer
        self._reader = reader
        self._write_lock = asyncio.Lock()
        self._schemas: dict[str, dict[str, str]] = {}
        self._index = VectorIndex(embedder.dim if embedder else 1)
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        # Document frequency per query term and the chunk count, for dropping very
        # common terms; cleared after every write, guarded by a generation counter so a
        # count read before a commit is never cached after it.
        self._df_cache: dict[str, int] = {}
        self._df_total: int | None = None
        self._df_generation = 0
        self._doc_counts: dict[str | None, int] = {}
        self._closed = False

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    async def open(
        cls, db_path: str | os.PathLike[str], embedder: Embedder | None, *, config: KBConfig | None = None
    ) -> KnowledgeBase:
        """Open (creating and migrating if needed) the KB in ``db_path``; load vectors.

        ``embedder`` may be ``None``: search is then text-only and documents are stored
        without vectors (re-ingesting with an embedder later fills them in).
        """
        cfg = config or KBConfig()
        path = str(db_path)
        if path == ":memory:" or path.startswith("file:"):
            raise ValueError("the knowledge base needs a file path (a writer and a reader share it)")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        writer = await aiosqlite.connect(path, isolation_level=None)
        reader: aiosqlite.Connection | None = None
        try:
            await _pragmas(writer, cfg, wal=True)
            version = await apply_migrations(writer)
            reader = await aiosqlite.connect(path, isolation_level=None)
            await _pragmas(reader, cfg, wal=False)
            kb = cls(path, embedder, writer, reader, cfg, version)
            await kb._ensure_bucket(DEFAULT_BUCKET)
            await kb._load_schemas()
            await kb._load_vectors()
            return kb
        except BaseException:
            if reader is not None:
                await reader.close()
            await writer.close()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        async with self._write_lock:
            try:
                await self._writer.execute("PRAGMA optimize")  # keeps planner statistics fresh
            except aiosqlite.Error:
                pass
            await self._writer.close()
        await self._reader.close()

    @property
    def embed_key(self) -> str | None:
        """``name:model`` of the embedder; documents embedded otherwise are re-embedded."""
        return f"{self.embedder.name}:{self.embedder.model}" if self.embedder else None

    # ------------------------------------------------------------------ buckets
    async def create_bucket(self, name: str, fields: Mapping[str, str] | None = None) -> BucketInfo:
        """Create ``name`` with typed ``fields``, or add new fields to an existing bucket.

        Existing documents get the new columns filled from their JSON metadata where
        the value fits. Changing the type of an existing field is refused.
        """
        check_bucket_name(name)
        schema = bucket_sql.validate_schema(fields or {})
        async with self._write_lock:
            await self._begin()
            try:
                async with self._writer.execute("SELECT schema FROM kb_buckets WHERE name = ?", (name,)) as cur:
                    row = await cur.fetchone()
                current: dict[str, str] = orjson.loads(row[0]) if row else {}
                for f, t in schema.items():
                    if f in current and current[f] != t:
                        raise ValueError(f"field {f!r} of bucket {name!r} is {current[f]}, cannot change it to {t}")
                added = {f: t for f, t in schema.items() if f not in current}
                merged = {**current, **added}
                if row is None:
                    await self._writer.execute(
                        "INSERT INTO kb_buckets(name, schema, created_at) VALUES (?, ?, ?)",
                        (name, orjson.dumps(merged).decode(), utc_now()),
                    )
                    for stmt in bucket_sql.create_table_statements(name, merged):
                        await self._writer.execute(stmt)
                elif added:
                    await self._writer.execute(
                        "UPDATE kb_buckets SET schema = ? WHERE name = ?", (orjson.dumps(merged).decode(), name)
                    )
                    for stmt in bucket_sql.create_table_statements(name, {}):
                        await self._writer.execute(stmt)
                    for f, t in added.items():
                        for stmt in bucket_sql.add_column_statements(name, f, t):
                            await self._writer.execute(stmt)
                    await self._backfill(name, merged)
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
            self._schemas[name] = merged
        infos = {b.name: b for b in await self.list_buckets()}
        return infos[name]

    async def _backfill(self, bucket: str, schema: dict[str, str]) -> None:
        async with self._writer.execute("SELECT id, metadata FROM kb_documents WHERE bucket = ?", (bucket,)) as cur:
            rows = await cur.fetchall()
        params = []
        for doc_id, meta_json in rows:
            values, _errors = bucket_sql.typed_row(schema, orjson.loads(meta_json))
            params.append((doc_id, *values))
        if params:
            await self._writer.executemany(bucket_sql.upsert_statement(bucket, schema), params)

    async def _ensure_bucket(self, name: str) -> None:
        if name in self._schemas:
            return
        async with self._reader.execute("SELECT schema FROM kb_buckets WHERE name = ?", (name,)) as cur:
            row = await cur.fetchone()
        if row is not None:
            self._schemas[name] = orjson.loads(row[0])
            return
        await self.create_bucket(name, {})

    async def _load_schemas(self) -> None:
        async with self._reader.execute("SELECT name, schema FROM kb_buckets") as cur:
            self._schemas = {name: orjson.loads(schema) for name, schema in await cur.fetchall()}

    async def bucket_schema(self, bucket: str) -> dict[str, str]:
        """The typed fields of ``bucket``; ``UnknownBucketError`` lists the known buckets."""
        if bucket not in self._schemas:
            await self._load_schemas()
        if bucket not in self._schemas:
            known = ", ".join(sorted(self._schemas)) or "(none)"
            raise UnknownBucketError(f"unknown bucket {bucket[:60]!r}; available buckets: {known}")
        return dict(self._schemas[bucket])

    async def list_buckets(self) -> list[BucketInfo]:
        sql = (
            "SELECT b.name, b.schema, b.created_at, count(d.id), coalesce(sum(d.chunk_count), 0) "
            "FROM kb_buckets b LEFT JOIN kb_documents d ON d.bucket = b.name "
            "GROUP BY b.name ORDER BY b.name"
        )
        async with self._reader.execute(sql) as cur:
            rows = await cur.fetchall()
        return [BucketInfo(n, orjson.loads(s), int(dc), int(cc), c) for n, s, c, dc, cc in rows]

    # ------------------------------------------------------------------ ingestion
    async def ingest_paths(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        bucket: str = DEFAULT_BUCKET,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest files and directories into ``bucket``.

        Unchanged documents (same content hash, same embedder) are skipped; documents
        that came from an ingested directory or file but are no longer there are
        deleted. A file with any rejected record keeps its old documents (a typo must
        not delete data); fix it and re-ingest to propagate deletions.
        """
        started = time.perf_counter()
        check_bucket_name(bucket)
        await self._ensure_bucket(bucket)
        report = IngestReport()
        roots = [Path(p).expanduser().resolve() for p in paths]
        files: list[Path] = []
        for root in roots:
            if not root.exists():
                report.rejected.append(Rejection(str(root), "path does not exist"))
                continue
            files.extend(await asyncio.to_thread(lambda r=root: list(iter_files(r))))
        report.files = len(files)
        seen: set[str] = set()
        protected: set[str] = set()
        pending: list[LoadedDocument] = []
        for done, path in enumerate(files, start=1):
            loaded, rejected = await asyncio.to_thread(load_file, path)
            if rejected:
                report.rejected.extend(rejected)
                protected.add(str(path))
            pending.extend(loaded)
            if len(pending) >= self.config.batch_documents:
                await self._ingest_batch(pending, bucket, report, seen)
                pending = []
            if progress is not None:
                progress(done, len(files), str(path))
        if pending:
            await self._ingest_batch(pending, bucket, report, seen)
        stale = await self._stale_documents(bucket, [r for r in roots if r.exists()], seen, protected)
        if stale:
            report.deleted += await self.delete_documents(stale)
        report.rejected.sort(key=lambda r: (r.source, r.line or 0))
        report.elapsed_seconds = round(time.perf_counter() - started, 4)
        return report

    async def ingest_documents(
        self,
        docs: Sequence[DocumentIn | Mapping[str, Any]],
        *,
        bucket: str = DEFAULT_BUCKET,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest documents given directly (the ``POST /v1/kb/documents`` route).

        Mappings are validated like JSONL records; a bad one is rejected with its
        1-based position as ``line``. Documents without an id get a stable one derived
        from title and text. Nothing is deleted.
        """
        started = time.perf_counter()
        check_bucket_name(bucket)
        await self._ensure_bucket(bucket)
        report = IngestReport()
        loaded: list[LoadedDocument] = []
        for i, item in enumerate(docs, start=1):
            try:
                doc = item if isinstance(item, DocumentIn) else record_to_document(item, source=None, fallback_id=None)
            except ValueError as exc:
                report.rejected.append(Rejection("api", str(exc), i))
                continue
            if doc.id is None:
                doc.id = f"{slugify(doc.title or doc.text[:40], limit=40)}-{short_hash(doc.title, doc.text)}"
            loaded.append(LoadedDocument(doc, i))
        seen: set[str] = set()
        step = self.config.batch_documents
        for start in range(0, len(loaded), step):
            await self._ingest_batch(loaded[start : start + step], bucket, report, seen)
            if progress is not None:
                progress(min(start + step, len(loaded)), len(loaded), "api")
        report.rejected.sort(key=lambda r: (r.source, r.line or 0))
        report.elapsed_seconds = round(time.perf_counter() - started, 4)
        return report

    async def _ingest_batch(
        self, loaded: list[LoadedDocument], bucket: str, report: IngestReport, seen: set[str]
    ) -> None:
        schema = await self.bucket_schema(bucket)
        candidates: list[tuple[LoadedDocument, str, list[Any]]] = []
        for item in loaded:
            doc = item.doc
            src = doc.source
            if not doc.id or not is_doc_id(doc.id):
                report.rejected.append(Rejection(src, f"invalid document id {str(doc.id)[:40]!r}", item.line))
                continue
            if doc.id in seen:
                report.rejected.append(Rejection(src, f"duplicate document id {doc.id!r} in this ingestion", item.line))
                continue
            if not doc.text.strip():
                report.rejected.append(Rejection(src, "empty text", item.line))
                continue
            typed, errors = bucket_sql.typed_row(schema, doc.metadata)
            if errors:
                report.rejected.append(Rejection(src, "; ".join(errors), item.line))
                continue
            seen.add(doc.id)
            candidates.append((item, self._content_hash(doc), typed))
        if not candidates:
            return
        existing = await self._existing([c[0].doc.id or "" for c in candidates])
        todo: list[_Prepared] = []
        for item, digest, typed in candidates:
            doc_id = item.doc.id or ""
            old = existing.get(doc_id)
            if old is not None and old == (digest, self.embed_key, self._dim, bucket):
                report.skipped += 1
                continue
            todo.append(_Prepared(item.doc, item.line, digest, typed, [], old[3] if old else None))
        if not todo:
            return
        target, overlap = self.config.chunk_target, self.config.chunk_overlap

        def chunk_all() -> None:
            for p in todo:
                p.chunks = chunk_text(p.doc.text, target=target, overlap=overlap)

        await asyncio.to_thread(chunk_all)
        todo = [p for p in todo if p.chunks]
        await self._embed(todo, report)
        await self._write(todo, bucket, schema)
        for p in todo:
            if p.existing_bucket is None:
                report.added += 1
            else:
                report.updated += 1
            report.chunks += len(p.chunks)

    @property
    def _dim(self) -> int | None:
        return self.embedder.dim if self.embedder else None

    def _content_hash(self, doc: DocumentIn) -> str:
        payload = orjson.dumps(
            [doc.title, doc.text, doc.url, doc.source, doc.metadata, self.config.chunk_target, self.config.chunk_overlap],
            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS,
            default=str,
        )
        return hashlib.sha256(payload).hexdigest()

    async def _existing(self, ids: list[str]) -> dict[str, tuple[str, str | None, int | None, str]]:
        """Current state of ``ids``, read on the writer connection.

        Not on the reader: while a search has a cursor open there, that connection
        reads an older snapshot, and a write decision must see the latest commit.
        """
        out: dict[str, tuple[str, str | None, int | None, str]] = {}
        async with self._write_lock:
            for start in range(0, len(ids), 500):
                part = ids[start : start + 500]
                sql = (
                    "SELECT id, content_hash, embed_model, embed_dim, bucket FROM kb_documents "
                    f"WHERE id IN ({', '.join('?' * len(part))})"
                )
                async with self._writer.execute(sql, part) as cur:
                    for doc_id, h, model, dim, b in await cur.fetchall():
                        out[doc_id] = (h, model, dim, b)
        return out

    async def _embed(self, todo: list[_Prepared], report: IngestReport) -> None:
        """Embed all chunks in batches; on failure store the documents without vectors
        (still found by text search) and say so, so a later ingest re-embeds them."""
        if self.embedder is None:
            return
        texts: list[str] = []
        owners: list[int] = []
        for i, p in enumerate(todo):
            for c in p.chunks:
                texts.append(_embedding_text(p.doc.title, c))
                owners.append(i)
        started = time.perf_counter()
        rows: list[np.ndarray] = []
        try:
            step = max(1, self.config.embed_batch)
            for start in range(0, len(texts), step):
                batch = [t[: self.embedder.max_chars] for t in texts[start : start + step]]
                rows.append(np.asarray(await self.embedder.embed_batch(batch, task="document"), np.float32))
        except EmbeddingError as exc:
            report.rejected.append(
                Rejection("embedder", f"embedding failed, {len(todo)} documents stored for text search only: {exc}")
            )
            return
        finally:
            report.embed_seconds = round(report.embed_seconds + time.perf_counter() - started, 4)
        matrix = np.concatenate(rows) if rows else np.zeros((0, self.embedder.dim), np.float32)
        offset = 0
        for p in todo:
            n = len(p.chunks)
            p.vectors = matrix[offset : offset + n]
            offset += n

    async def _write(self, todo: list[_Prepared], bucket: str, schema: dict[str, str]) -> None:
        now = utc_now()
        ids = [p.doc.id or "" for p in todo]
        moved = {p.existing_bucket for p in todo if p.existing_bucket not in (None, bucket)}
        async with self._write_lock:
            await self._begin()
            try:
                await self._delete_chunks(ids)
                for old_bucket in moved:
                    if old_bucket and self._schemas.get(old_bucket):
                        await self._delete_meta(old_bucket, ids)
                async with self._writer.execute("SELECT coalesce(max(id), 0) FROM kb_chunks") as cur:
                    row = await cur.fetchone()
                next_id = int(row[0]) + 1 if row else 1
                doc_rows = []
                chunk_rows = []
                meta_rows = []
                for p in todo:
                    d = p.doc
                    embedded = p.vectors is not None
                    doc_rows.append(
                        (
                            d.id, bucket, d.title, d.source, d.url, p.content_hash,
                            self.embed_key if embedded else None, self._dim if embedded else None,
                            orjson.dumps(d.metadata, default=str).decode(), len(d.text), len(p.chunks), now, now,
                        )
                    )
                    p.row_ids = []
                    for j, c in enumerate(p.chunks):
                        blob = p.vectors[j].astype(np.float32).tobytes() if p.vectors is not None else None
                        chunk_rows.append((next_id, d.id, c.position, d.title, c.heading, c.text, blob))
                        p.row_ids.append(next_id)
                        next_id += 1
                    if schema:
                        meta_rows.append((d.id, *p.typed))
                await self._writer.executemany(
                    "INSERT INTO kb_documents(id, bucket, title, source, url, content_hash, embed_model, embed_dim,"
                    " metadata, chars, chunk_count, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(id) DO UPDATE SET bucket = excluded.bucket, title = excluded.title,"
                    " source = excluded.source, url = excluded.url, content_hash = excluded.content_hash,"
                    " embed_model = excluded.embed_model, embed_dim = excluded.embed_dim,"
                    " metadata = excluded.metadata, chars = excluded.chars, chunk_count = excluded.chunk_count,"
                    " updated_at = excluded.updated_at",
                    doc_rows,
                )
                await self._writer.executemany(
                    "INSERT INTO kb_chunks(id, doc_id, position, title, heading, text, vector)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    chunk_rows,
                )
                if meta_rows:
                    await self._writer.executemany(bucket_sql.upsert_statement(bucket, schema), meta_rows)
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
        self._term_stats_changed()
        for p in todo:
            self._index.remove_document(p.doc.id or "")
            if p.vectors is not None and p.row_ids:
                self._index.add(p.row_ids, p.doc.id or "", bucket, p.vectors)

    async def _begin(self) -> None:
        await self._writer.execute("BEGIN IMMEDIATE")

    async def _delete_chunks(self, doc_ids: list[str]) -> None:
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            await self._writer.execute(
                f"DELETE FROM kb_chunks WHERE doc_id IN ({', '.join('?' * len(part))})", part
            )

    async def _delete_meta(self, bucket: str, doc_ids: list[str]) -> None:
        table = bucket_sql.meta_table(bucket)
        for start in range(0, len(doc_ids), 500):
            part = doc_ids[start : start + 500]
            await self._writer.execute(f"DELETE FROM {table} WHERE doc_id IN ({', '.join('?' * len(part))})", part)

    async def _stale_documents(
        self, bucket: str, roots: list[Path], seen: set[str], protected: set[str]
    ) -> list[str]:
        stale: list[str] = []
        for root in roots:
            if root.is_dir():
                prefix = str(root).rstrip(os.sep) + os.sep
                sql = "SELECT id, source FROM kb_documents WHERE bucket = ? AND source >= ? AND source < ?"
                params: tuple[Any, ...] = (bucket, prefix, prefix[:-1] + chr(ord(os.sep) + 1))
            else:
                sql = "SELECT id, source FROM kb_documents WHERE bucket = ? AND source = ?"
                params = (bucket, str(root))
            async with self._write_lock, self._writer.execute(sql, params) as cur:
                for doc_id, source in await cur.fetchall():
                    if doc_id not in seen and source not in protected:
                        stale.append(doc_id)
        return sorted(set(stale))

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (chunks, FTS rows, typed metadata, vectors). Returns how many existed."""
        ids = [d for d in dict.fromkeys(doc_ids) if isinstance(d, str)]
        if not ids:
            return 0
        existing = await self._existing(ids)
        if not existing:
            return 0
        found = list(existing)
        async with self._write_lock:
            await self._begin()
            try:
                await self._delete_chunks(found)
                for b in {v[3] for v in existing.values()}:
                    if self._schemas.get(b):
                        await self._delete_meta(b, found)
                for start in range(0, len(found), 500):
                    part = found[start : start + 500]
                    await self._writer.execute(
                        f"DELETE FROM kb_documents WHERE id IN ({', '.join('?' * len(part))})", part
                    )
                await self._writer.execute("COMMIT")
            except BaseException:
                await self._writer.execute("ROLLBACK")
                raise
        self._term_stats_changed()
        for d in found:
            self._index.remove_document(d)
        return len(found)

    # ------------------------------------------------------------------ vectors at open
    async def _load_vectors(self) -> None:
        if self.embedder is None:
            return
        sql = (
            "SELECT c.id, c.doc_id, d.bucket, c.vector FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            "WHERE d.embed_model = ? AND d.embed_dim = ? AND c.vector IS NOT NULL ORDER BY c.doc_id, c.position"
        )
        dim = self.embedder.dim
        expected = dim * 4
        current: str | None = None
        ids: list[int] = []
        vecs: list[bytes] = []
        bucket_of = ""

        def flush() -> None:
            if current is not None and ids:
                matrix = np.frombuffer(b"".join(vecs), dtype=np.float32).reshape(len(ids), dim)
                self._index.add(ids, current, bucket_of, matrix)

        async with self._reader.execute(sql, (self.embed_key, dim)) as cur:
            while True:
                rows = await cur.fetchmany(5000)
                if not rows:
                    break
                for cid, doc_id, bucket, blob in rows:
                    if blob is None or len(blob) != expected:
                        continue
                    if doc_id != current:
                        flush()
                        current, ids, vecs, bucket_of = doc_id, [], [], bucket
                    ids.append(cid)
                    vecs.append(blob)
        flush()

    # ------------------------------------------------------------------ search
    async def search(
        self,
        query: str,
        *,
        bucket: str | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        mode: SearchMode = "hybrid",
        context_chars: int | None = None,
        candidates: int | None = None,
        relax: bool = False,
    ) -> SearchResponse:
        """Hybrid (default), BM25-only (``text``) or vector-only (``semantic``) search.

        ``filters`` use the language of ``knowledge.filters`` and need ``bucket`` for
        typed fields (``FilterError`` names the allowed fields). With ``relax=True`` a
        filtered search that finds nothing is retried once without its most
        restrictive constraint, and the response says ``relaxed=True`` and what was
        dropped. Raises ``UnknownBucketError`` for an unknown bucket.
        """
        started = time.perf_counter()
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}")
        top_k = max(1, min(int(top_k), self.config.max_top_k))
        n_cand = max(top_k, min(int(candidates or self.config.candidates), 1000))
        schema: dict[str, str] | None = await self.bucket_schema(bucket) if bucket is not None else None
        parsed = parse_filters(filters)
        compiled = compile_filters(parsed, schema, bucket=bucket)
        response = await self._search_once(query, bucket, schema, compiled, doc_id, mode, top_k, n_cand, context_chars)
        if relax and parsed and not response.hits:
            relaxed = await self.relax_filters(parsed, bucket=bucket)
            if relaxed is not None:
                new_filters, dropped = relaxed
                compiled = compile_filters(new_filters, schema, bucket=bucket)
                response = await self._search_once(
                    query, bucket, schema, compiled, doc_id, mode, top_k, n_cand, context_chars
                )
                response.relaxed = True
                response.dropped_filter = dropped
        response.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
        return response

    async def _search_once(
        self,
        query: str,
        bucket: str | None,
        schema: dict[str, str] | None,
        compiled: CompiledFilter | None,
        doc_id: str | None,
        mode: str,
        top_k: int,
        n_cand: int,
        context_chars: int | None,
    ) -> SearchResponse:
        q = QueryTerms.of(query or "", content_terms(query or ""))
        scoped_docs: list[str] | None = None
        # The BM25 term choice needs only the query: queue its lookups on the reader
        # now, so they run back to back with the scope query instead of after it.
        terms_task = (
            asyncio.create_task(self._selective_terms(content_terms(query or ""), n_cand)) if mode != "semantic" else None
        )
        try:
            if compiled is not None or doc_id is not None:
                scoped_docs = await self._scoped_doc_ids(bucket, compiled, doc_id)
                if not scoped_docs:
                    return SearchResponse([], 0, False, 0.0, mode=mode)
            return await self._rank(
                query, q, bucket, compiled, doc_id, scoped_docs, terms_task, mode, top_k, n_cand, context_chars
            )
        finally:
            if terms_task is not None:
                if not terms_task.done():
                    terms_task.cancel()
                elif not terms_task.cancelled():
                    terms_task.exception()  # retrieved: an early return must not log it

    async def _rank(
        self,
        query: str,
        q: QueryTerms,
        bucket: str | None,
        compiled: CompiledFilter | None,
        doc_id: str | None,
        scoped_docs: list[str] | None,
        terms_task: asyncio.Task[list[str]] | None,
        mode: str,
        top_k: int,
        n_cand: int,
        context_chars: int | None,
    ) -> SearchResponse:
        warnings: list[str] = []
        use_text = mode in ("hybrid", "text")
        use_vec = mode in ("hybrid", "semantic")
        if use_vec and (self.embedder is None or self._index.size == 0):
            if mode == "semantic":
                warnings.append("no vectors available (no embedder or nothing embedded); used text search")
                use_text = True
            use_vec = False
        query_vec: np.ndarray | None = None
        if use_vec:
            try:
                query_vec = await self._embed_query(query)
            except EmbeddingError as exc:
                warnings.append(f"embedder failed ({exc}); used text search only")
                use_vec, use_text = False, True

        async def text_side() -> tuple[list[int], list[float], int]:
            if not use_text:
                return [], [], 0
            terms = await terms_task if terms_task is not None else None
            return await self._fts(query, bucket, compiled, doc_id, scoped_docs, n_cand, terms)

        async def vec_side() -> tuple[list[int], list[float], int]:
            if not use_vec or query_vec is None:
                return [], [], 0
            return await self._vector(query_vec, bucket, scoped_docs, n_cand)

        (t_ids, t_scores, t_total), (v_ids, v_scores, v_total) = await asyncio.gather(text_side(), vec_side())
        used = "hybrid" if use_text and use_vec else ("text" if use_text else "semantic")
        # Score-level fusion: each side min-max normalised per query, the dense side
        # weighted by how much its embedder is worth (knowledge/ranking.py).
        dense = dense_weight(self.embedder.name if self.embedder else None)
        fused = fuse([FusionSide(t_ids, t_scores, 1.0), FusionSide(v_ids, v_scores, dense.weight, dense.depth)])
        ordered = sorted(fused, key=lambda cid: -fused[cid])[:n_cand]
        cands = await self._hydrate(ordered, fused)
        if query_vec is not None and cands:
            cos = self._index.cosines([c.chunk_rowid for c in cands], query_vec)
            for c in cands:
                c.cosine = cos.get(c.chunk_rowid, 0.0)
        n_lists = (1 if use_text else 0) + (1 if use_vec else 0)
        top = rerank(cands, q, lists=max(1, n_lists), top_k=top_k, per_doc=self.config.per_doc, max_fused=1.0)
        hits = [
            ChunkHit(
                doc_id=c.doc_id,
                chunk_id=f"{c.doc_id}#{c.position}",
                title=c.title,
                text=snippet(c.text, q, context_chars),
                score=c.score,
                metadata=c.metadata,
                source=c.source,
                url=c.url,
                bucket=c.bucket,
                position=c.position,
                heading=c.heading,
            )
            for c in top
        ]
        spreads = [signal_spread(s, top_k) for s in (t_scores, v_scores) if s]
        spread = round(max(spreads), 4) if spreads else 1.0
        total = max(t_total, v_total)
        overloaded = total > self.config.overload_threshold and spread < self.config.flat_spread
        return SearchResponse(hits, total, False, 0.0, used, spread, overloaded, None, warnings)

    async def _embed_query(self, query: str) -> np.ndarray:
        assert self.embedder is not None
        cached = self._query_cache.get(query)
        if cached is not None:
            self._query_cache.move_to_end(query)
            return cached
        vec = np.asarray(await self.embedder.embed(query[: self.embedder.max_chars], task="query"), np.float32)
        vec = vec.reshape(-1)
        if vec.shape[0] != self._index.dim:
            raise EmbeddingError(f"query vector has {vec.shape[0]} dimensions, index has {self._index.dim}")
        norm = float(np.linalg.norm(vec))
        vec = vec / norm if norm > 0 else vec
        self._query_cache[query] = vec
        if len(self._query_cache) > self.config.query_cache:
            self._query_cache.popitem(last=False)
        return vec

    def _join_sql(self, bucket: str | None, compiled: CompiledFilter | None, doc_id: str | None) -> tuple[str, str, list[Any]]:
        """``(joins, where, params)`` restricting documents ``d`` (and ``m`` if needed)."""
        joins = ""
        where: list[str] = []
        params: list[Any] = []
        if compiled is not None and compiled.uses_meta and bucket is not None:
            joins = f" LEFT JOIN {bucket_sql.meta_table(bucket)} m ON m.doc_id = d.id"
        if bucket is not None:
            where.append("d.bucket = ?")
            params.append(bucket)
        if compiled is not None:
            where.append(compiled.sql)
            params.extend(compiled.params)
        if doc_id is not None:
            where.append("d.id = ?")
            params.append(doc_id)
        return joins, " AND ".join(where), params

    def _scope_sql(
        self, bucket: str | None, compiled: CompiledFilter | None, doc_id: str | None
    ) -> tuple[str, list[Any]]:
        """A ``SELECT`` of the ids of the documents in scope, and its parameters."""
        if compiled is not None and compiled.uses_meta and not compiled.uses_builtin and doc_id is None and bucket:
            # Only typed fields: the bucket's own table is the whole scope, and driving
            # from it lets SQLite use the field indexes (3x faster than via documents).
            return f"SELECT m.doc_id FROM {bucket_sql.meta_table(bucket)} m WHERE {compiled.sql}", list(compiled.params)
        joins, where, params = self._join_sql(bucket, compiled, doc_id)
        return f"SELECT d.id FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params

    async def _scoped_doc_ids(self, bucket: str | None, compiled: CompiledFilter | None, doc_id: str | None) -> list[str]:
        sql, params = self._scope_sql(bucket, compiled, doc_id)
        async with self._reader.execute(sql, params) as cur:
            return [r[0] for r in await cur.fetchall()]

    # -- BM25 side -------------------------------------------------------------------
    def _term_stats_changed(self) -> None:
        self._df_generation += 1
        self._df_cache.clear()
        self._df_total = None
        self._doc_counts.clear()

    async def _doc_count(self, bucket: str | None) -> int:
        """Documents in ``bucket`` (all when ``None``), cached until the next write."""
        known = self._doc_counts.get(bucket)
        if known is not None:
            return known
        generation = self._df_generation
        sql, params = (
            ("SELECT count(*) FROM kb_documents", ()) if bucket is None
            else ("SELECT count(*) FROM kb_documents WHERE bucket = ?", (bucket,))
        )
        async with self._reader.execute(sql, params) as cur:
            row = await cur.fetchone()
        count = int(row[0]) if row else 0
        if generation == self._df_generation:
            self._doc_counts[bucket] = count
        return count

    async def _selective_terms(self, terms: list[str], limit: int) -> list[str]:
        """``terms`` without the very common ones (see ``fts.selective_terms``).

        Document frequencies come from the FTS index itself (an unscored ``count(*)`` of
        the term's matches, so stemming and tokenising agree with the index) and are
        cached until the next write.
        """
        cfg = self.config
        generation = self._df_generation
        total = self._df_total
        if total is None:
            async with self._reader.execute("SELECT count(*) FROM kb_chunks") as cur:
                row = await cur.fetchone()
            total = int(row[0]) if row else 0
            if generation == self._df_generation:
                self._df_total = total
        if total < cfg.common_term_min_df:
            return terms  # nothing can be common enough to matter: exact old behaviour
        df = {t: self._df_cache[t] for t in terms if t in self._df_cache}
        missing = [t for t in terms if t not in df]
        if missing:
            # One statement for all of them: an unscored count is cheap, a round trip is not.
            sql = "SELECT " + ", ".join(
                ["(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?)"] * len(missing)
            )
            async with self._reader.execute(sql, [or_expression([t]) for t in missing]) as cur:
                row = await cur.fetchone()
            counts = [int(c) for c in row] if row else [0] * len(missing)
            if generation == self._df_generation:
                if len(self._df_cache) + len(missing) > cfg.term_stats_cache:
                    self._df_cache.clear()
                self._df_cache.update(zip(missing, counts, strict=True))
            df.update(zip(missing, counts, strict=True))
        return selective_terms(
            terms,
            df,
            total,
            common_fraction=cfg.common_term_fraction,
            common_min_df=cfg.common_term_min_df,
            min_matches=limit,
        )

    async def _fts(
        self,
        query: str,
        bucket: str | None,
        compiled: CompiledFilter | None,
        doc_id: str | None,
        scoped_docs: list[str] | None,
        limit: int,
        terms: list[str] | None = None,
    ) -> tuple[list[int], list[float], int]:
        """BM25 top ``limit`` within the scope: ``(chunk ids, scores, match count)``.

        Unscoped: one ranked query on the bare index. A bucket without filters: a probe
        of the best matches of the whole index when the bucket holds a fair share of
        them (cheap joins on ~1000 rows). Otherwise the scope's chunk ids are
        materialised once and the FTS cursor walks every match but computes ``bm25()``
        only for those in scope: scoring costs 20-30x walking a match, and a
        filter typically keeps a few percent of them (at 1M chunks 3-6x faster than
        scoring every match and intersecting afterwards, same ranking). The scope test
        is written ``+rowid IN sc`` so SQLite cannot hand it to FTS5 as a rowid
        constraint: that would re-run the MATCH, and bm25's per-query statistics
        (a walk over each term's whole doclist), once per chunk in scope.
        """
        if terms is None:
            terms = await self._selective_terms(content_terms(query), limit)
        match = or_expression(terms)
        if match is None:
            return [], [], 0
        if bucket is None and scoped_docs is None and doc_id is None:
            sql = (
                f"SELECT rowid, bm25(kb_chunks_fts, {_BM25_WEIGHTS}) AS s, "
                "(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1) "
                "FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1 ORDER BY s, rowid LIMIT ?2"
            )
            async with self._reader.execute(sql, (match, limit)) as cur:
                rows = await cur.fetchall()
            if not rows:
                return [], [], 0
            return [int(r[0]) for r in rows], [max(0.0, -float(r[1])) for r in rows], int(rows[0][2])
        if scoped_docs is None and doc_id is None and await self._probe_may_fill(bucket, limit):
            probed = await self._fts_probe(match, bucket, limit)
            if probed is not None:
                return probed
        if scoped_docs is not None:
            # The scope is already known: hand it over as JSON rather than re-running it.
            scope_sql, params = "SELECT value FROM json_each(?)", [orjson.dumps(scoped_docs).decode()]
        else:
            scope_sql, params = self._scope_sql(bucket, compiled, doc_id)
        sql = (
            f"WITH sc AS MATERIALIZED (SELECT c.id FROM kb_chunks c WHERE c.doc_id IN ({scope_sql})), "
            f"k AS MATERIALIZED (SELECT rowid AS id, bm25(kb_chunks_fts, {_BM25_WEIGHTS}) AS s "
            "FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ? AND +rowid IN sc) "
            "SELECT id, s, (SELECT count(*) FROM k) FROM k ORDER BY s, id LIMIT ?"
        )
        return await self._ranked(sql, [*params, match, limit])

    async def _ranked(self, sql: str, params: Sequence[Any]) -> tuple[list[int], list[float], int]:
        """Run a BM25 query whose rows are ``(chunk id, bm25, match count)``, best first:
        ``(chunk ids, scores as positive numbers, match count)``."""
        async with self._reader.execute(sql, params) as cur:
            rows = await cur.fetchall()
        if not rows:
            return [], [], 0
        return [int(r[0]) for r in rows], [max(0.0, -float(r[1])) for r in rows], int(rows[0][2])

    async def _probe_may_fill(self, bucket: str | None, limit: int) -> bool:
        """Whether a probe can be expected to find ``limit`` matches of ``bucket``: the
        bucket's share of all documents times the probe size. A small bucket goes
        straight to the exact query, saving a ranking of every match (both are exact;
        this only decides which is faster)."""
        if bucket is None:
            return True
        share = await self._doc_count(bucket) / max(1, await self._doc_count(None))
        return share * max(limit * 10, self.config.text_probe) >= limit

    async def _fts_probe(self, match: str, bucket: str | None, limit: int) -> tuple[list[int], list[float], int] | None:
        """A bucket's BM25 top ``limit`` without materialising the bucket: rank all
        matches on the bare FTS index, look at the best ``probe`` of them and keep
        those in ``bucket``.

        A bucket that holds a fair share of the matches fills ``limit`` from the probe.
        ``None`` when it does not (then the exact query runs). The match count is exact
        when the probe saw every match, else scaled from the probe.
        """
        probe = max(limit * 10, self.config.text_probe)
        sql = (
            f"WITH t AS MATERIALIZED (SELECT rowid AS id, bm25(kb_chunks_fts, {_BM25_WEIGHTS}) AS s, "
            "(SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1) AS total "
            "FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?1 ORDER BY s, rowid LIMIT ?2) "
            "SELECT t.id, t.s, t.total, d.bucket FROM t "
            "CROSS JOIN kb_chunks c ON c.id = t.id CROSS JOIN kb_documents d ON d.id = c.doc_id ORDER BY t.s, t.id"
        )
        async with self._reader.execute(sql, (match, probe)) as cur:
            rows = await cur.fetchall()
        if not rows:
            return [], [], 0
        total_all = int(rows[0][2])
        kept = [(int(r[0]), max(0.0, -float(r[1]))) for r in rows if r[3] == bucket]
        if len(rows) >= total_all:
            kept_total = len(kept)
        elif len(kept) >= limit:
            kept_total = round(total_all * len(kept) / len(rows))
        else:
            return None
        kept = kept[:limit]
        return [k[0] for k in kept], [k[1] for k in kept], kept_total

    async def _vector(
        self, query_vec: np.ndarray, bucket: str | None, scoped_docs: list[str] | None, limit: int
    ) -> tuple[list[int], list[float], int]:
        snap = self._index.snapshot()
        mask = None
        if scoped_docs is not None:
            mask = self._index.doc_mask(snap, scoped_docs)
        elif bucket is not None:
            code = self._index.bucket_code(bucket)
            if code is None:
                return [], [], 0
            mask = snap.bucket_codes[: snap.n] == code
        if snap.n > self.config.executor_rows:
            loop = asyncio.get_running_loop()
            ids, scores, positive = await loop.run_in_executor(None, VectorIndex.scan, snap, query_vec, limit, mask)
        else:
            ids, scores, positive = VectorIndex.scan(snap, query_vec, limit, mask)
        return ids.tolist(), [float(s) for s in scores], positive

    async def _hydrate(self, ordered: list[int], fused: dict[int, float]) -> list[Candidate]:
        if not ordered:
            return []
        sql = (
            "SELECT c.id, c.doc_id, c.position, c.title, c.heading, c.text, d.bucket, d.source, d.url, d.metadata "
            "FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id "
            f"WHERE c.id IN ({', '.join('?' * len(ordered))})"
        )
        async with self._reader.execute(sql, ordered) as cur:
            rows = await cur.fetchall()
        meta_cache: dict[str, dict[str, Any]] = {}
        out = []
        for cid, doc_id, pos, title, heading, text, bucket, source, url, meta_json in rows:
            meta = meta_cache.get(doc_id)
            if meta is None:
                meta = meta_cache[doc_id] = orjson.loads(meta_json)
            out.append(Candidate(cid, doc_id, pos, title, heading, text, bucket, source, url, meta, fused[cid]))
        return out

    async def relax_filters(
        self, filters: Mapping[str, Any], *, bucket: str | None = None
    ) -> tuple[dict[str, Any] | None, str] | None:
        """Drop the most restrictive top-level constraint (the one that alone matches
        the fewest documents): ``(remaining filters or None, dropped constraint as JSON)``.
        ``None`` when there is nothing to drop."""
        parsed = parse_filters(filters)
        if not parsed:
            return None
        schema = await self.bucket_schema(bucket) if bucket is not None else None
        constraints = split_constraints(parsed)
        if not constraints:
            return None
        counts = []
        for c in constraints:
            compiled = compile_filters(c, schema, bucket=bucket)
            joins, where, params = self._join_sql(bucket, compiled, None)
            sql = f"SELECT count(*) FROM kb_documents d{joins}" + (f" WHERE {where}" if where else "")
            async with self._reader.execute(sql, params) as cur:
                row = await cur.fetchone()
            counts.append(int(row[0]) if row else 0)
        drop = min(range(len(constraints)), key=lambda i: counts[i])
        rest = [c for i, c in enumerate(constraints) if i != drop]
        return join_constraints(rest), constraint_label(constraints[drop])

    # ------------------------------------------------------------------ documents and stats
    async def get_document(self, doc_id: str) -> dict[str, Any] | None:
        """Everything known about a document except its text (for ``get_document_metadata``)."""
        if not isinstance(doc_id, str) or not is_doc_id(doc_id):
            return None
        sql = (
            "SELECT id, bucket, title, source, url, content_hash, embed_model, embed_dim, metadata, chars,"
            " chunk_count, created_at, updated_at FROM kb_documents WHERE id = ?"
        )
        async with self._reader.execute(sql, (doc_id,)) as cur:
            row = await cur.fetchone()
        if row is None:
            return None
        (did, bucket, title, source, url, chash, model, dim, meta_json, chars, nchunks, created, updated) = row
        typed: dict[str, Any] = {}
        schema = self._schemas.get(bucket) or {}
        if schema:
            cols = ", ".join(f'"{f}"' for f in schema)  # names validated at bucket creation
            async with self._reader.execute(
                f"SELECT {cols} FROM {bucket_sql.meta_table(bucket)} WHERE doc_id = ?", (did,)
            ) as cur:
                trow = await cur.fetchone()
            if trow is not None:
                for (f, t), v in zip(schema.items(), trow, strict=True):
                    typed[f] = bool(v) if t == "BOOLEAN" and v is not None else v
        return {
            "doc_id": did,
            "bucket": bucket,
            "title": title,
            "source": source,
            "url": url,
            "metadata": orjson.loads(meta_json),
            "fields": typed,
            "content_hash": chash,
            "embedding_model": model,
            "embedding_dim": dim,
            "chars": chars,
            "chunks": nchunks,
            "created_at": created,
            "updated_at": updated,
        }

    async def stats(self) -> dict[str, Any]:
        async with self._reader.execute(
            "SELECT count(*), coalesce(sum(chunk_count), 0), "
            "coalesce(sum(CASE WHEN embed_model IS ? AND embed_dim IS ? THEN 0 ELSE 1 END), 0) FROM kb_documents",
            (self.embed_key, self._dim),
        ) as cur:
            row = await cur.fetchone()
        docs, chunks, stale = (int(x) for x in row) if row else (0, 0, 0)
        return {
            "documents": docs,
            "chunks": chunks,
            "vectors": self._index.size,
            "buckets": len(self._schemas),
            "embedder": self.embed_key,
            "dim": self._dim,
            "documents_without_current_vectors": stale if self.embedder else docs,
            "schema_version": self.schema_version,
            "db_path": self.db_path,
        }


def _embedding_text(title: str, chunk: Chunk) -> str:
    head = title if not chunk.heading or chunk.heading == title else f"{title} — {chunk.heading}"
    return f"{head}\n{chunk.text}" if head else chunk.text


async def _pragmas(conn: aiosqlite.Connection, cfg: KBConfig, *, wal: bool) -> None:
    await conn.execute(f"PRAGMA busy_timeout = {int(cfg.busy_timeout_ms)}")
    if wal:
        await conn.execute("PRAGMA journal_mode = WAL")
    await conn.execute("PRAGMA synchronous = NORMAL")
    await conn.execute("PRAGMA foreign_keys = ON")


__all__ = ["DEFAULT_BUCKET", "FilterError", "KBConfig", "KnowledgeBase", "UnknownBucketError"]
