"""``KnowledgeBase``: the face of the knowledge base the tools, routes and CLI use.

It holds no data and speaks no SQL: documents, chunks, the full-text index and stored
vectors live behind a ``storage.interfaces.KBIndex`` (``storage/sqlite/kb_index.py`` by
default), handed in by whoever opened the storage. What happens here:

* ``load()`` reads the bucket schemas and readies the dense side (``knowledge.dense``):
  on an engine with its own vector search (PostgreSQL: pgvector) nothing is loaded -
  its count of unreadable stored vectors, a scan of every chunk, runs in the background
  until ``aclose`` - otherwise the in-memory float32 matrix is filled from the index. A bucket exists
  once something was ingested into it (or it was created with typed fields); no bucket
  is created empty by accident.
* Ingestion (``knowledge/ingest.py``): validate, skip unchanged, chunk, embed, write.
  Documents stored without vectors of the current embedder (it failed, or they were
  embedded by another one) are re-embedded in the background (``knowledge/backfill.py``,
  ``kb.backfill``, started by whoever runs the KB as a service).
* Search (``knowledge/search.py``): full-text candidates ∪ vector top-N → fusion →
  re-ranking; filters validated in ``knowledge/filters.py`` into an engine-neutral tree.
  Before each search, what another process changed in the stored KB (the CLI while a
  server runs, a sibling worker, a replica) is taken in (``knowledge/freshness.py``).
* A conversation's private bucket stays out of every other caller's view: the scope
  rules every search, count and bucket name goes through (``knowledge/bucket_privacy.py``);
  what a listed or read document shows of itself is ``knowledge/document_views.py``'s.
* What the KB says about itself (``/readyz``: vectors or text, the counts; the
  ``/metrics`` counters) is ``kb.status`` (``knowledge/kb_status.py``).

``embedder`` may be ``None``: search is then text-only and documents are stored without
vectors (an embedder adopted later, ``adopt_embedder``, or a re-ingest with one fills them
in). An embedder's ``dim`` must
be known before the vectors are sized from it: ``create`` probes one that does not know
it yet (``toolindex.probe``), and the constructor refuses it (issue 20: a matrix sized
0 wide refused every vector after its document had been stored).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import numpy as np

from knowledge.attachments import is_private_bucket
from knowledge.bucket_privacy import (
    absent,
    count_bucket,
    named_schema,
    refuse_private,
    screen_response,
    search_scope,
    shared_buckets,
    shared_names,
)
from knowledge.buckets import Buckets, UnknownBucketError
from knowledge.document_views import document_metadata, document_page
from knowledge.filters import FilterError
from knowledge.freshness import KBFreshness
from knowledge.ingest import DEFAULT_MAX_FILE_BYTES, BatchHook, Ingestor, Progress, StageHook
from knowledge.kb_parts import EmbedderParts, adopted_parts, embedder_parts
from knowledge.kb_status import KBStatus
from knowledge.names import is_identifier
from knowledge.types import (
    DEFAULT_BUCKET,
    BucketInfo,
    ConstraintCount,
    DocumentCount,
    DocumentIn,
    IngestReport,
    KBConfig,
    OverloadRule,
    SearchMode,
    SearchResponse,
)
from storage.interfaces import KBIndex
from toolindex.embedder import Embedder
from toolindex.probe import probe_embedder


class KnowledgeBase:
    """The knowledge base over ``index``. Build with ``await KnowledgeBase.create(index, embedder)``
    (or construct, then ``await kb.load()``)."""

    def __init__(
        self,
        index: KBIndex,
        embedder: Embedder | None,
        config: KBConfig | None = None,
        *,
        schema_version: int | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        if embedder is not None and embedder.dim <= 0:
            raise ValueError(
                f"the {embedder.name} embedder's dimension is not known yet: probe it first "
                "(KnowledgeBase.create does, or toolindex.probe.probe_embedder)"
            )
        self.index = index
        self.config = config or KBConfig()
        self.schema_version = schema_version
        self._on_close = on_close
        self._closed = False
        self._buckets = Buckets(index)
        self._use(embedder_parts(index, self._buckets, embedder, self.config))
        #: What other processes changed in the stored KB, taken in before each search.
        self._fresh = KBFreshness(index, self._buckets, self._vectors)
        #: What the KB says about itself: ``/readyz``'s reads and ``/metrics``' counters.
        self.status = self._status()

    def _use(self, parts: EmbedderParts) -> None:
        """Ingest, search and the re-embedding on ``parts`` from now on (``knowledge.kb_parts``:
        ``__init__``, and ``adopt_embedder`` once an embedder is found late)."""
        self.embedder, self._vectors, self._ingest, self._search = (
            parts.embedder, parts.vectors, parts.ingest, parts.search
        )
        #: Vectors for documents stored without them; runs once ``backfill.start()``ed.
        self.backfill = parts.backfill
        self._search.pending_vectors = lambda: self.backfill.pending or 0

    def _status(self) -> KBStatus:
        return KBStatus(
            self.index, self.embedder, self.embed_key, self._vectors, self._fresh, self._buckets, self._search,
            schema_version=self.schema_version, count_stop_s=self.config.readyz_count_stop_s,
        )

    async def adopt_embedder(self, embedder: Embedder) -> None:
        """Start using ``embedder`` in a KB built without one (an explicit
        ``AGENT_EMBEDDER`` whose server was down at start-up and answered later:
        ``app.ops.embedder_recovery``). Its dense side is loaded first, then ingest,
        search and the re-embedding switch to it at once; the documents stored meanwhile
        without vectors are the re-embedding's to fill once ``backfill.start()``ed (the
        caller's, as at start-up: it knows whether this process leads). An ingest under
        way keeps the parts it began with: it stores text only, and its end wakes the
        new re-embedding (``_ingested``). The counters ``/metrics`` reads carry over. Once only: an
        embedder is never swapped for another under live searches."""
        if self.embedder is not None:
            raise RuntimeError(f"the knowledge base already embeds with {self.embed_key}")
        seen = self._fresh.seen
        parts = await adopted_parts(self.index, self._buckets, embedder, self.config, self._search)
        old_vectors, old_status = self._vectors, self.status
        self._use(parts)
        self._fresh.follow(parts.vectors, seen_at_load=seen)
        self.status = self._status()
        self.status.bucket_list_failures = old_status.bucket_list_failures
        await old_status.aclose()
        await old_vectors.aclose()

    @classmethod
    async def create(
        cls,
        index: KBIndex,
        embedder: Embedder | None,
        *,
        config: KBConfig | None = None,
        schema_version: int | None = None,
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> KnowledgeBase:
        """Raises ``EmbeddingError`` when ``embedder`` does not know its dimension and
        its probe fails."""
        if embedder is not None and embedder.dim <= 0:
            await probe_embedder(embedder)
        kb = cls(index, embedder, config, schema_version=schema_version, on_close=on_close)
        await kb.load()
        return kb

    async def load(self) -> None:
        """Read the schemas, ready the dense side (in memory unless the engine searches)."""
        await self._fresh.start()
        await self._buckets.load()
        await self._vectors.load()

    async def aclose(self) -> None:
        """Forget the in-memory state; closes the storage only if this KB was opened
        with ``on_close`` (a standalone KB, e.g. the CLI's or a test's)."""
        if self._closed:
            return
        self._closed = True
        await self._fresh.aclose()
        await self.status.aclose()  # a /readyz count under way in the background
        await self.backfill.aclose()
        await self._vectors.aclose()  # the start's count of unreadable vectors, if it still runs
        if self._on_close is not None:
            await self._on_close()

    @property
    def embed_key(self) -> str | None:
        """``name:model`` of the embedder; documents embedded otherwise are re-embedded."""
        return self._ingest.embed_key

    # ------------------------------------------------------------------ buckets
    async def create_bucket(self, name: str, fields: Mapping[str, str] | None = None) -> BucketInfo:
        """Create ``name`` with typed ``fields``, or add new fields to an existing bucket
        (existing documents get them filled from their JSON metadata where the value
        fits). Changing the type of an existing field is refused (``ValueError``)."""
        refuse_private(name)
        await self._buckets.create(name, fields)
        return {b.name: b for b in await self.list_buckets()}[name]

    async def bucket_schema(self, bucket: str, *, private: Sequence[str] = ()) -> dict[str, str]:
        """The typed fields of the shared bucket ``bucket``, or of one of ``private`` (the
        caller's own private buckets, as for ``search``); ``UnknownBucketError`` lists the
        shared buckets (any other private one is unknown here: ``knowledge.bucket_privacy``)."""
        try:
            return await named_schema(self._buckets, bucket, tuple(private))
        except UnknownBucketError:
            raise
        except Exception:
            self.status.bucket_list_failures += 1
            raise

    async def list_buckets(self) -> list[BucketInfo]:
        """The shared buckets: a conversation's private one (``knowledge.attachments``) is
        nobody else's business, the administrator's included."""
        try:
            return await shared_buckets(self._buckets)
        except Exception:
            self.status.bucket_list_failures += 1
            raise

    async def missing_buckets(self, names: Sequence[str]) -> list[str]:
        """Those of ``names`` that are no shared bucket now (the names reread when one is
        not cached; ``*`` is every bucket, never missing): what ``AGENT_KB_DEFAULT_BUCKETS``
        names and is not there, for the start's warning and ``/readyz``."""
        if absent(self._buckets, names):
            await self._buckets.load()
        return absent(self._buckets, names)

    def absent_buckets(self, names: Sequence[str]) -> list[str]:
        """``missing_buckets`` as last read, without a read (``/metrics`` at scrape time;
        every search or ``/readyz`` that misses a name rereads them)."""
        return absent(self._buckets, names)

    def bucket_names(self) -> list[str]:
        """The shared buckets' names as last read, sorted (nothing counted)."""
        return shared_names(self._buckets)

    async def delete_bucket(self, name: str, *, private: bool = False) -> int | None:
        """Delete ``name`` with its documents (chunks, vectors, typed fields): how many
        documents went, or ``None`` when there is no such bucket. A private bucket only
        with ``private=True`` (its conversation's attachments going)."""
        if not is_identifier(name) or is_private_bucket(name) != private:
            return None
        emptied = await self._ingest.empty_bucket(name)  # its documents in bounded writes first
        gone = await self.index.delete_bucket(name)
        self._buckets.forget(name)
        if gone is None:
            return emptied or None
        for doc_id in gone:
            self._vectors.remove_document(doc_id)
        return emptied + len(gone)

    # ------------------------------------------------------------------ documents
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
        """Ingest files and directories into ``bucket``.

        A file whose size and modification time are those stored with its documents is
        skipped unread (``rehash`` reads it anyway, for filesystems whose times cannot
        be trusted). Unchanged documents (same content hash, same embedder) are skipped; documents
        that came from an ingested directory or file but are no longer there are
        deleted. A file with any rejected record keeps its old documents (a typo must
        not delete data); fix it and re-ingest to propagate deletions. Binary and
        non-UTF-8 files are rejected with a reason; hidden entries, unsupported types,
        symbolic links below the named paths (unless ``follow_links``) and files over
        ``max_file_bytes`` are skipped and counted in ``report.skipped_files``.
        Documents' ``source`` is their path relative to the named folder's parent.
        """
        refuse_private(bucket)
        ingest = self._ingest
        report = await ingest.ingest_paths(
            paths, bucket=bucket, progress=progress, follow_links=follow_links,
            max_file_bytes=max_file_bytes, on_batch=on_batch, rehash=rehash, on_stage=on_stage,
        )
        self._ingested(ingest, report)
        return report

    async def ingest_documents(
        self,
        docs: Sequence[DocumentIn | Mapping[str, Any]],
        *,
        bucket: str = DEFAULT_BUCKET,
        progress: Progress | None = None,
        private: bool = False,
    ) -> IngestReport:
        """Ingest documents given directly (the ``POST /v1/kb/documents`` route).

        Mappings are validated like JSONL records; a bad one is rejected with its
        1-based position as ``line``. Documents without an id get a stable one derived
        from title and text. Nothing is deleted. A private bucket only with
        ``private=True`` (an attachment).
        """
        if not private:
            refuse_private(bucket)
        ingest = self._ingest
        report = await ingest.ingest_documents(docs, bucket=bucket, progress=progress)
        self._ingested(ingest, report)
        return report

    def _ingested(self, ingest: Ingestor, report: IngestReport) -> None:
        """Tell the re-embedding what an ingest stored. One that began on the text-only
        parts before ``adopt_embedder`` stored its documents without vectors yet queued
        none (it had no embedder to fail): a pass now gives them their vectors, not the
        slow timer's (``reembed_interval_s``) after the pass the adoption started."""
        self.backfill.ingested(report)
        if ingest is not self._ingest and (report.added or report.updated):
            self.backfill.wake()

    def bulk_load(self) -> AbstractAsyncContextManager[None]:
        """``async with kb.bulk_load():`` around a large first load: the engine may build
        some indexes once at the end instead of row by row (PostgreSQL's HNSW graph:
        ``KBIndex.bulk_load``). Searches stay correct meanwhile."""
        return self.index.bulk_load()

    async def delete_documents(self, doc_ids: Sequence[str]) -> int:
        """Delete documents (chunks, full-text rows, typed metadata, vectors). Returns how many existed."""
        return len(await self.remove_documents(doc_ids))

    async def remove_documents(self, doc_ids: Sequence[str]) -> list[str]:
        """``delete_documents``, returning the ids that existed: ``agentchat docs rm``
        names the others, which a count alone could not tell apart."""
        return await self._ingest.remove_documents(doc_ids)

    async def list_documents(
        self, *, bucket: str | None = None, limit: int = 100, after: str | None = None, private: str | None = None
    ) -> list[dict[str, Any]]:
        """Documents ordered by id, ``limit`` at a time after the id ``after`` (no text).
        Private buckets' documents are left out unless ``private`` names their bucket (a
        page may then be shorter than ``limit``; ``after`` its last id still pages on)."""
        return await document_page(self.index, bucket, limit=limit, after=after, private=private)

    async def get_document(self, doc_id: str, *, private: str | None = None) -> dict[str, Any] | None:
        """Everything known about a document except its text (for ``get_document_metadata``).
        A private bucket's document only for the caller naming that bucket."""
        return await document_metadata(self.index, doc_id, private=private)

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
        buckets: Sequence[str] | None = None,
        private: Sequence[str] = (),
        overload: OverloadRule | None = None,
    ) -> SearchResponse:
        """Hybrid (default), BM25-only (``text``) or vector-only (``semantic``) search.

        ``filters`` use the language of ``knowledge.filters`` and need ``bucket`` for
        typed fields (``FilterError`` names the allowed fields). With ``relax=True`` a
        filtered search that finds nothing is retried once without its most
        restrictive constraint, and the response says ``relaxed=True`` and what was
        dropped. Raises ``UnknownBucketError`` for an unknown bucket.

        ``buckets`` (when ``bucket`` is not given) scopes the search to several buckets
        — the configured default ones — and ignores those that do not exist (yet);
        ``"*"`` among them means every bucket.

        ``private`` names the caller's own private buckets (a conversation's
        attachments): searched in addition to what ``buckets`` covers. Any other private
        bucket is out of every search: naming one is an unknown bucket, and "every
        bucket" means every shared one.

        ``overload`` is the rule ``SearchResponse.overloaded`` is decided by (the
        corpus tools pass theirs); without one, ``KBConfig.overload_rule``.
        """
        await self._fresh.check()
        bucket, buckets = await search_scope(self._buckets, bucket, buckets, tuple(private))
        response = await self._search.search(
            query, bucket=bucket, top_k=top_k, filters=filters, doc_id=doc_id, mode=mode,
            context_chars=context_chars, candidates=candidates, relax=relax, buckets=buckets, overload=overload,
        )
        if (stale := self._fresh.reload_error) is not None and mode != "text":  # asked for vectors
            response.warnings.insert(0, f"ranked by meaning on vectors older than the knowledge base: reloading "
                                        f"them after another process's change failed ({stale})")
        return screen_response(response, bucket, buckets)

    async def embed_query(self, text: str) -> np.ndarray:
        """The query vector ``search`` uses (cached), so another index in the KB's vector
        space embeds a query once. Raises ``EmbeddingError`` (also without an embedder)."""
        return await self._search.query_vectors.embed(text)

    async def relax_filters(
        self, filters: Mapping[str, Any], *, bucket: str | None = None, private: Sequence[str] = ()
    ) -> tuple[dict[str, Any] | None, str] | None:
        """Drop the most restrictive top-level constraint (the one that alone matches
        the fewest documents of the shared buckets): ``(remaining filters or None,
        dropped constraint as JSON)``. ``None`` when there is nothing to drop."""
        await self._fresh.check()
        scope = await count_bucket(self._buckets, bucket, tuple(private))
        return await self._search.counts.relax_filters(filters, bucket=scope)

    async def constraint_counts(
        self, filters: Mapping[str, Any] | str | None, *, bucket: str | None = None, private: Sequence[str] = ()
    ) -> list[ConstraintCount]:
        """Each top-level constraint of ``filters`` with the documents it alone matches
        (to name the condition a search found nothing for); shared buckets only, or the
        one named: a shared one or one of ``private``, the caller's own."""
        await self._fresh.check()
        scope = await count_bucket(self._buckets, bucket, tuple(private))
        return await self._search.counts.constraint_counts(filters, bucket=scope)

    async def count_documents(
        self,
        query: str | None = None,
        *,
        bucket: str | None = None,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        limit: int = 1000,
        private: Sequence[str] = (),
    ) -> DocumentCount:
        """Documents in scope, or those of them whose text matches ``query``'s terms
        (a lower bound past ``limit`` matching passages): the size of a list-all request.
        Shared buckets only, or the one named: a shared one or one of ``private``, the
        caller's own (``knowledge.bucket_privacy.count_bucket``)."""
        await self._fresh.check()
        return await self._search.counts.count_documents(
            query, bucket=await count_bucket(self._buckets, bucket, tuple(private)), filters=filters,
            doc_id=doc_id, limit=limit,
        )


__all__ = ["DEFAULT_BUCKET", "FilterError", "KBConfig", "KnowledgeBase", "UnknownBucketError"]
