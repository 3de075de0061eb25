"""What the knowledge base says about itself: whether a semantic search runs on vectors
now and the counts ``/readyz`` shows (``app.knowledge_component``), and the counters
``/metrics`` reads at scrape time (``app.server.services``) — ``KnowledgeBase.status``.

A job apart from the face that serves searches and ingests (``knowledge.kb``): the
reader is the operator, not a search's caller, and the rules are their own. A search
that cannot use vectors falls back to text and says so in its own result; ``semantic``
says so where an operator looks, before anyone searches (the Ollama embedder's failure
once hid behind that fallback). ``stats`` counts conversations' attachments apart
(``private``), so that whoever reads the shared counts learns nothing of who attached
what (``/readyz`` answers without a token). The counters are read from the parts that
count (the searcher, the freshness check, the dense side, the engine), never kept twice;
the store's sums alone are kept, while the stored generation says nothing was written
since, and counted again in the background once it moved (``knowledge.kb_counts_memo``:
a probe every few seconds summed every document, ~1 s at 1M chunks).

Both reads take in first what another process changed in the stored KB
(``knowledge.freshness``), as a search does, so a count never lags behind a search.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge.attachments import PRIVATE_PREFIX
from knowledge.buckets import Buckets
from knowledge.chunking import CHUNK_RULES
from knowledge.dense import DenseSide
from knowledge.freshness import KBFreshness
from knowledge.kb_counts_memo import CountsAtGeneration
from knowledge.search import Searcher
from storage.interfaces import KBIndex, KBVectorSearch
from toolindex.embedder import Embedder


class KBStatus:
    """The operator's view of one knowledge base, over the parts it is built of."""

    def __init__(
        self,
        index: KBIndex,
        embedder: Embedder | None,
        embed_key: str | None,
        vectors: DenseSide,
        fresh: KBFreshness,
        buckets: Buckets,
        search: Searcher,
        *,
        schema_version: int | None,
        count_stop_s: float = 5.0,
    ) -> None:
        self._index = index
        self._embedder = embedder
        self._embed_key = embed_key
        self._vectors = vectors
        self._fresh = fresh
        self._buckets = buckets
        self._search = search
        self._schema_version = schema_version
        #: The store's counts, read again only once the stored knowledge base changed.
        self._counted = CountsAtGeneration(index, vectors, stop_s=count_stop_s)
        #: Reads of the bucket list (``KnowledgeBase.list_buckets``, a named bucket looked
        #: up) that failed since start: the answer said the list could not be read, never
        #: that a bucket is unknown or that there are none.
        self.bucket_list_failures = 0

    async def semantic(self, *, wait: bool = True) -> dict[str, Any]:
        """``ok`` when a semantic search runs on vectors now, else ``detail`` says why not;
        ``fallbacks`` is the searches that asked for vectors and ran on text since start.
        ``wait=False`` (``/readyz``): the engine's index status from the vector counts
        kept, never summed in the call (``DenseSide.status``)."""
        embedder, embed_key, fresh = self._embedder, self._embed_key, self._fresh
        out: dict[str, Any] = {
            "embedder": embed_key, "dim": embedder.dim if embedder else None, "fallbacks": self._search.text_fallbacks,
        }
        if embedder is None:
            return {"ok": False, "detail": "no embedder: every search runs on text", **out}
        await fresh.check()
        out["index"] = await self._vectors.status(kept_counts=not wait)
        out["reload_failures"] = fresh.reload_failures
        if fresh.reload_error is not None:  # the vectors in memory are older than the stored ones
            out["reload_error"] = fresh.reload_error
        if not await self._vectors.available():
            return {"ok": False, "detail": f"no vectors of {embed_key} stored yet: searches run on text", **out}
        return {"ok": True, **out}

    async def stats(self, *, wait: bool = True) -> dict[str, Any]:
        """Documents, chunks and vectors (the shared corpus's and, apart, the attachments'),
        buckets, the embedder, documents still without its vectors, shared documents cut by
        older chunking rules, where the KB is stored. The sums over the documents are
        kept while the stored knowledge base is unchanged and counted again, one count at
        a time in the background, once it changed (``knowledge.kb_counts_memo``: a count
        takes ~1 s at 1M chunks). ``wait``: until they hold every write committed before
        the call; ``wait=False`` (``/readyz``, which must never wait for a count): those
        kept, at once - ``counted`` says how current they are, and every sum is ``None``
        before the first count ended."""
        await self._fresh.check()
        embedder, index = self._embedder, self._index
        dim = embedder.dim if embedder else None
        seen = await self._counted.read(
            self._embed_key, dim, hidden_prefix=PRIVATE_PREFIX, chunk_rules=CHUNK_RULES, wait=wait
        )
        stored = seen.stored
        counts = stored.counts if stored is not None else None
        return {
            "documents": counts.documents if counts is not None else None,
            "chunks": counts.chunks if counts is not None else None,
            "vectors": stored.vectors if stored is not None else None,
            # Conversations' attachments among the counts: ``/readyz`` shows the shared
            # corpus only, so nobody watching it learns when someone attached a file.
            "private": {
                "documents": counts.hidden_documents if counts is not None else None,
                "chunks": counts.hidden_chunks if counts is not None else None,
                "vectors": (counts.hidden_current_chunks if embedder else 0) if counts is not None else None,
            },
            "buckets": len(self._buckets),
            "embedder": self._embed_key,
            "dim": dim,
            "documents_without_current_vectors": (
                (counts.without_vectors if embedder else counts.documents) if counts is not None else None
            ),
            # Shared documents cut by older chunking rules than today's (an upgrade's): their
            # chunks are re-made only when they are ingested again (``knowledge.ingest``).
            "documents_older_chunking": counts.older_chunking if counts is not None else None,
            # Cut by a newer release's rules (a rolling upgrade, a rollback): left as they are.
            "documents_newer_chunking": counts.newer_chunking if counts is not None else None,
            "counted": seen.status(),
            "schema_version": self._schema_version,
            "db_path": index.location,
        }

    async def aclose(self) -> None:
        """Stop a count under way in the background (``KnowledgeBase.aclose``)."""
        await self._counted.aclose()

    @property
    def text_fallbacks(self) -> int:
        """Searches that asked for vectors and ran on text since start."""
        return self._search.text_fallbacks

    @property
    def fusion_drops(self) -> Mapping[tuple[str, str], int]:
        """Hybrid searches since start whose ranking rested on one side, by ``(the side
        that did not count, why)``."""
        return self._search.fusion_drops

    @property
    def reloads(self) -> int:
        """The dense side's reloads after another process changed the stored KB, since
        start (``knowledge.freshness``)."""
        return self._fresh.reloads

    @property
    def reload_failures(self) -> int:
        """Reloads of the dense side that failed since start."""
        return self._fresh.reload_failures

    @property
    def unreadable_vectors(self) -> int | None:
        """Stored vectors (chunks) the dense side's load could not read, until their
        documents are re-embedded (``knowledge.backfill``); ``None`` until counted
        (PostgreSQL counts in the background after the start)."""
        if not self._vectors.unreadable_counted():
            return None
        return sum(self._vectors.unreadable().values())

    @property
    def graph_serial_builds(self) -> int | None:
        """The engine's graph builds run serially for want of shared memory since start;
        ``None``: the engine builds no graphs (SQLite)."""
        return self._index.graph_serial_builds if isinstance(self._index, KBVectorSearch) else None


__all__ = ["KBStatus"]
