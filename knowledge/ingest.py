"""Ingestion: files and posted documents → validated, chunked, embedded, stored.

Why this shape:

* Work happens in batches of documents (``KBConfig.batch_documents``): validate, skip
  what is unchanged (same content hash, same bucket; its vectors kept, also another
  embedder's: ``knowledge.ingest_docs.keeps_vectors``), chunk in a worker
  thread, embed in batches, then the batch's writes through the ``KBIndex``: one
  transaction per part of at most ``KBIndex.chunks_per_write`` chunks, whole documents
  each (on SQLite no live run's event commits while one runs), never held across an
  embedding call. The in-memory vector matrix is updated after each write committed.
* The stages overlap (``BatchWrites``): while a batch is written, the next one is read,
  chunked and embedded, and up to ``KBIndex.writes_in_flight`` writes run at once
  (PostgreSQL's three, each on a connection of its own; SQLite's two, which its one
  writer takes in turn). An embedder gets up to ``EMBED_CONCURRENCY`` requests of a batch at once.
* A failing embedder does not lose documents: they are stored for text search only,
  the report counts them as ``queued_for_embedding``, and the re-embedding in the
  background (``knowledge.backfill``) gives them vectors once the embedder answers
  (a later ingest of the same documents does too).
* A file is read only when its stamp (size, modification time in ns, its path as
  shown, the chunking) differs from the one stored with its documents, or they lack
  vectors while this process has an embedder, or were cut by older chunking rules than today's
  (``knowledge.chunking.older_than_ours``: a newer release's cut, met during a rolling
  upgrade, is left alone); a file read unchanged (touched, same content hash, same
  rules) only gets its new stamp, and its new path when its tree moved (the sample in
  a new virtualenv's site-packages, a folder moved): else the documents kept the old
  path, and a file gone from the tree never had its documents removed. A document cut
  by older rules is chunked again even when its content hash is the same, and replaced
  like any changed one: its old chunks stay until the new ones commit. A re-made
  document (changed, or cut again) embeds only its chunks whose text its stored ones
  lack: the others keep the vectors it stores, when they are of today's embedder
  (``knowledge.ingest_reuse``). ``rehash`` reads every file, for filesystems whose times lie.
  A file with rejected records is never stamped (it is read, and its rejections
  reported, every time).
* Re-ingesting a directory deletes the documents that came from it but are gone, unless
  their file had rejected records (a typo must not delete data).
* A document belongs to one bucket: ids made from a file's path include the bucket, so
  the same folder ingested into a second bucket adds copies there, and an id given
  explicitly that already names a document of another bucket is rejected, never moved.
* Files that are not documents are skipped and counted, not failures: a JSON file with
  no text field in any record, and an HTML page that repeats a Markdown file of the
  same ingestion (``knowledge.samepage``). Which files are read at all — listed,
  stamped, compared — is decided first, by ``knowledge.ingest_plan``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from knowledge.buckets import Buckets
from knowledge.chunking import chunk_text, older_than_ours
from knowledge.dense import DenseSide
from knowledge.filecheck import DEFAULT_MAX_FILE_MB, MB
from knowledge.filestamps import unstamp_rejected, with_repeats
from knowledge.ingest_docs import Prepared, document_writes, keeps_vectors, screen, with_summary
from knowledge.ingest_plan import plan_files
from knowledge.ingest_reuse import plan_embedding
from knowledge.ingest_stages import (
    STAGE_EMBED,
    BatchWrites,
    EmbedHook,
    EmbedTally,
    StageHook,
    bounded_parts,
    embed_texts,
    write_parts,
)
from knowledge.loaders import SKIP_NOT_RECORDS, LoadedDocument, load_file, record_to_document
from knowledge.names import check_bucket_name, short_hash, slugify
from knowledge.types import (
    DEFAULT_BUCKET,
    DocumentIn,
    IngestReport,
    KBConfig,
    Rejection,
)
from storage.interfaces import KBIndex
from storage.kb_records import KBVectorRows
from toolindex.embedder import Embedder, EmbeddingError

#: ``(files done, files in all, what is happening)``: after each file, and while a batch
#: is embedded (``"embedding 128/900 chunks"``), so a long embedding is not silence.
Progress = Callable[[int, int, str], None]
#: Called after each write (a batch's part), with the report so far (chunk counts for a progress bar).
BatchHook = Callable[[IngestReport], None]
DEFAULT_MAX_FILE_BYTES = int(DEFAULT_MAX_FILE_MB * MB)
#: Documents listed at a time while a bucket is emptied in parts (``empty_bucket``).
EMPTY_PAGE = 1000


class Ingestor:
    """Adds, updates and deletes documents of one knowledge base."""

    def __init__(
        self,
        index: KBIndex,
        buckets: Buckets,
        vectors: DenseSide,
        embedder: Embedder | None,
        config: KBConfig,
    ) -> None:
        self.index = index
        self.buckets = buckets
        self.vectors = vectors
        self.embedder = embedder
        self.config = config
        self.embed_key = f"{embedder.name}:{embedder.model}" if embedder else None
        self.dim = embedder.dim if embedder else None

    async def ingest_paths(
        self,
        paths: Iterable[str | os.PathLike[str]],
        *,
        bucket: str = DEFAULT_BUCKET,
        progress: Progress | None = None,
        follow_links: bool = False,
        max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES,
        on_batch: BatchHook | None = None,
        rehash: bool = False,
        on_stage: StageHook | None = None,
    ) -> IngestReport:
        started = time.perf_counter()
        check_bucket_name(bucket)
        report = IngestReport()
        plan = await plan_files(
            paths,
            index=self.index,
            config=self.config,
            bucket=bucket,
            embedder=(self.embed_key, self.dim),
            report=report,
            follow_links=follow_links,
            max_file_bytes=max_file_bytes,
            rehash=rehash,
            on_stage=on_stage,
        )
        files, stamps, protected, compared = plan.files, plan.stamps, plan.protected, plan.compared
        unread, repeated = plan.unchanged.documents, plan.repeated
        report.files = len(files)
        seen: set[str] = set()
        pending: list[LoadedDocument] = []
        done = 0

        embedded = EmbedTally(
            None if progress is None else lambda k, n: progress(done, len(files), f"embedding {k}/{n} chunks"),
            None if on_stage is None else lambda k, n: on_stage(STAGE_EMBED, k, n),
        )

        async with BatchWrites(self.index.writes_in_flight) as writes:
            for done, (path, shown) in enumerate(files, start=1):
                kept_loaded = compared.take(path)  # loaded to compare it with its twin: not again
                if path in unread:  # same stamp: not opened, its documents are unchanged
                    seen.update(unread[path])
                    report.skipped += len(unread[path])
                    report.unread_files += 1
                    if progress is not None:
                        progress(done, len(files), shown)
                    continue
                if kept_loaded is None:
                    kept_loaded = await asyncio.to_thread(load_file, path, shown, bucket=bucket)
                loaded, rejected = kept_loaded
                if not rejected and path in stamps:
                    for item in loaded:
                        item.stamp = with_repeats(stamps[path], repeated.get(path, ()), stamps)
                for r in rejected:
                    if r.kind == SKIP_NOT_RECORDS:  # not a file of documents: skipped, not read
                        report.skip_file(str(path), SKIP_NOT_RECORDS, shown)
                        report.files -= 1
                    else:
                        report.rejected.append(r)
                        protected.add(str(path))
                pending.extend(loaded)
                if len(pending) >= self.config.batch_documents:
                    await self._ingest_batch(pending, bucket, report, seen, writes, embedded.batch(), on_batch)
                    pending = []
                if progress is not None:
                    progress(done, len(files), shown)
            if pending:
                await self._ingest_batch(pending, bucket, report, seen, writes, embedded.batch(), on_batch)
            await writes.drain()
        await unstamp_rejected(self.index, bucket, files, report.rejected)
        stale = await self._stale_documents(bucket, plan.roots, seen, protected)
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
        started = time.perf_counter()
        check_bucket_name(bucket)
        report = IngestReport()
        loaded: list[LoadedDocument] = []
        for i, item in enumerate(docs, start=1):
            try:
                doc = item if isinstance(item, DocumentIn) else record_to_document(item, source=None, fallback_id=None)
            except ValueError as exc:
                report.rejected.append(Rejection("api", str(exc), i))
                continue
            if doc.id is None:  # the same document posted to two buckets is two documents
                key = (doc.title, doc.text) if bucket == DEFAULT_BUCKET else (bucket, doc.title, doc.text)
                doc.id = f"{slugify(doc.title or doc.text[:40], limit=40)}-{short_hash(*key)}"
            loaded.append(LoadedDocument(doc, i))
        seen: set[str] = set()
        step = self.config.batch_documents
        async with BatchWrites(self.index.writes_in_flight) as writes:
            for start in range(0, len(loaded), step):
                await self._ingest_batch(loaded[start : start + step], bucket, report, seen, writes)
                if progress is not None:
                    progress(min(start + step, len(loaded)), len(loaded), "api")
            await writes.drain()
        report.rejected.sort(key=lambda r: (r.source, r.line or 0))
        report.elapsed_seconds = round(time.perf_counter() - started, 4)
        return report

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        return len(await self.remove_documents(doc_ids))

    async def remove_documents(self, doc_ids: Sequence[str]) -> list[str]:
        """Delete the documents; the ids that existed (each once)."""
        ids = [d for d in dict.fromkeys(doc_ids) if isinstance(d, str)]
        if not ids:
            return []
        found = await self.index.delete_documents(ids)
        for d in found:
            self.vectors.remove_document(d)
        return found

    async def empty_bucket(self, bucket: str) -> int:
        """Delete ``bucket``'s documents in writes of at most ``KBIndex.chunks_per_write``
        chunks, whole documents each, before the bucket itself goes (``KnowledgeBase.
        delete_bucket``): as one write, a large bucket held SQLite's one writer - and every
        live stream's next token - for as long as all its chunks took. How many went
        (0 without a bound: the bucket's own delete takes them all)."""
        most = self.index.chunks_per_write
        if most is None:
            return 0
        deleted = 0
        after: str | None = None
        while page := await self.index.list_documents(bucket, limit=EMPTY_PAGE, after=after):
            for part in bounded_parts(page, [d.chunks for d in page], most):
                deleted += await self.delete_documents([d.id for d in part])
            after = page[-1].id
        return deleted

    # ------------------------------------------------------------------ one batch
    async def _ingest_batch(
        self,
        loaded: list[LoadedDocument],
        bucket: str,
        report: IngestReport,
        seen: set[str],
        writes: BatchWrites,
        on_embed: EmbedHook | None = None,
        on_batch: BatchHook | None = None,
    ) -> None:
        """Validate, skip, chunk and embed ``loaded`` here; its write is handed to
        ``writes`` (it runs while the next batch is prepared), and counted in ``report``
        once it committed. The bucket is made before any write into it starts."""
        # A bucket is created by the first write into it, never for an ingestion that
        # stored nothing; until then it has no typed fields.
        schema = await self.buckets.schema(bucket) if await self.buckets.exists(bucket) else {}
        candidates = screen(loaded, schema, seen, report, self.config)
        if not candidates:
            return
        existing = await self.index.document_states([c[0].doc.id or "" for c in candidates])
        todo: list[Prepared] = []
        restamp: list[tuple[str, str | None]] = []
        rehome: dict[str, str] = {}
        for item, digest, typed in candidates:
            old = existing.get(item.doc.id or "")
            if old is not None and old.bucket != bucket:
                report.rejected.append(
                    Rejection(
                        item.doc.source,
                        f"document id {item.doc.id!r} is taken by a document of bucket {old.bucket!r}; a document "
                        "belongs to one bucket: remove it there first, or give this one another id",
                        item.line,
                        kind="id of another bucket",
                    )
                )
                continue
            # Unchanged text keeps the vectors it has, also another embedder's (``keeps_vectors``).
            same = (
                old is not None
                and (old.content_hash, old.bucket) == (digest, bucket)
                and keeps_vectors((old.embed_model, old.embed_dim), (self.embed_key, self.dim))
            )
            # Cut by today's rules or a newer release's (a rolling upgrade): left as it is.
            if same and old is not None and not older_than_ours(old.chunk_rules):
                report.skipped += 1
                doc_id, origin = item.doc.id or "", item.doc.origin
                if origin is not None and origin != old.origin:  # its tree moved: the tree is where it is now
                    rehome[doc_id] = origin
                    restamp.append((doc_id, item.stamp))
                elif item.stamp is not None and item.stamp != old.file_stamp:
                    restamp.append((doc_id, item.stamp))
                continue
            existing_bucket = old.bucket if old else None
            rechunk = same  # the same document, cut by older chunking rules: cut again
            todo.append(
                Prepared(item.doc, item.line, digest, typed, [], existing_bucket, stamp=item.stamp, rechunk=rechunk)
            )
        await self.index.set_file_stamps(restamp, origins=rehome)
        if not todo:
            return
        target, overlap = self.config.chunk_target, self.config.chunk_overlap

        def chunk_all() -> None:
            for p in todo:
                p.chunks = with_summary(
                    chunk_text(p.doc.text, target=target, overlap=overlap, paged=p.doc.paged), p.doc.metadata
                )

        await asyncio.to_thread(chunk_all)
        todo = [p for p in todo if p.chunks]
        await self._embed(todo, bucket, report, on_embed)
        if not todo:
            return
        await self.buckets.ensure(bucket)
        await writes.submit(self._write_batch(todo, bucket, schema, report, on_batch))

    async def _write_batch(
        self,
        todo: list[Prepared],
        bucket: str,
        schema: dict[str, str],
        report: IngestReport,
        on_batch: BatchHook | None,
    ) -> None:
        for part in write_parts(todo, self.index.chunks_per_write):
            await self._write(part, bucket, schema)
            for p in part:
                if p.existing_bucket is None:
                    report.added += 1
                else:
                    report.updated += 1
                    report.rechunked += p.rechunk
                report.chunks += len(p.chunks)
            if on_batch is not None:
                on_batch(report)

    async def _embed(
        self, todo: list[Prepared], bucket: str, report: IngestReport, on_embed: EmbedHook | None = None
    ) -> None:
        """Embed the chunks in batches, but for those whose stored vector is reused (the
        same text, in the same document, of today's embedder: ``knowledge.ingest_reuse``);
        on failure the documents that needed an embedding are stored without vectors
        (found by text search now) and counted as queued for re-embedding."""
        if self.embedder is None or self.embed_key is None or self.dim is None:
            return
        plan = await plan_embedding(self.index, bucket, self.embed_key, self.dim, todo)
        report.reused_vectors += plan.reused
        matrix: np.ndarray | None = None
        if plan.texts:
            started = time.perf_counter()
            try:
                matrix = await embed_texts(self.embedder, plan.texts, self.config.embed_batch, on_embed)
            except EmbeddingError as exc:
                report.embedding_error = str(exc)[:400]
            finally:
                report.embed_seconds = round(report.embed_seconds + time.perf_counter() - started, 4)
        for k, p in enumerate(todo):
            p.vectors = plan.vectors(k, matrix)
            report.queued_for_embedding += p.vectors is None

    async def _write(self, todo: list[Prepared], bucket: str, schema: dict[str, str]) -> None:
        if not todo:
            return
        docs = document_writes(todo, schema, self.embed_key, self.dim)
        row_ids = await self.index.write_documents(bucket, schema, docs)
        for p in todo:
            self.vectors.remove_document(p.doc.id or "")
        added = [
            KBVectorRows(p.doc.id or "", bucket, ids, p.vectors)
            for p, ids in zip(todo, row_ids, strict=True)
            if p.vectors is not None and ids
        ]
        self.vectors.add_many(added)

    async def _stale_documents(self, bucket: str, roots: list[Path], seen: set[str], protected: set[str]) -> list[str]:
        stale: list[str] = []
        for root in roots:
            if root.is_dir():
                rows = await self.index.source_documents(bucket, str(root).rstrip(os.sep) + os.sep, prefix=True)
            else:
                rows = await self.index.source_documents(bucket, str(root), prefix=False)
            stale.extend(doc_id for doc_id, source in rows if doc_id not in seen and source not in protected)
        return sorted(set(stale))
