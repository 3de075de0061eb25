"""Search: full-text candidates from the ``KBIndex`` ∪ vector top-N from the dense side
(``knowledge.dense``: the in-memory matrix, or the engine's own vector search) → score
fusion (``fusion.weigh`` then ``combine``; the plan also says which sides counted, in
the result's ``fused_sides``) → cheap re-ranking → at most ``per_doc`` chunks per document
→ copies of a better hit dropped (``knowledge.duplicates``) → scores on 0..1.

Filters are validated once into the engine-neutral tree and resolved to the set of
documents in scope, used twice: to restrict the BM25 ranking and to restrict the dense
side (a document mask of the matrix, or a condition of the engine's query). The BM25
term choice needs only the query, so it runs beside the scope query. Vector scans over
large matrices run in a worker thread. The query's own vector (embedded, checked,
normalised, cached) comes from ``knowledge.query_vectors``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from knowledge.buckets import Buckets
from knowledge.dense import DenseSide
from knowledge.duplicates import collapse_duplicates, record_facts
from knowledge.filters import (
    compile_filters,
    parse_filters,
)
from knowledge.fusion import FusionPlan, combine, weigh
from knowledge.query_terms import bm25_terms, related_terms
from knowledge.query_vectors import QueryVectors
from knowledge.ranking import (
    Candidate,
    FusionSide,
    QueryTerms,
    dense_weight,
    rerank,
    signal_spread,
    snippet,
    spread_depth,
)
from knowledge.scope_counts import ScopeCounts, search_scope
from knowledge.textnorm import content_terms
from knowledge.types import (
    ChunkHit,
    KBConfig,
    OverloadRule,
    SearchMode,
    SearchResponse,
)
from knowledge.vector_warnings import unsearched_vector_warnings
from storage.interfaces import KBIndex
from storage.kb_records import KBRanked, KBScope
from toolindex.embedder import Embedder, EmbeddingError

MODES = ("hybrid", "text", "semantic")
#: The names of the fusion's two sides, in the order ``_rank`` passes them: BM25, vectors.
FUSION_SIDES = ("text", "semantic")


class Searcher:
    """Answers ``KnowledgeBase.search``; its ``counts`` answer the scope counts
    (``knowledge.scope_counts``)."""

    def __init__(
        self,
        index: KBIndex,
        buckets: Buckets,
        dense: DenseSide,
        embedder: Embedder | None,
        config: KBConfig,
    ) -> None:
        self.index = index
        self.buckets = buckets
        self.dense = dense
        self.embedder = embedder
        self.config = config
        self._tuning = config.text_tuning
        #: Counts of a scope's documents and the filter relaxation built on them.
        self.counts = ScopeCounts(index, buckets, config.text_tuning)
        #: The query's unit vector, cached (also ``KnowledgeBase.embed_query``'s).
        self.query_vectors = QueryVectors(embedder, dense, config.query_cache)
        #: Searches that asked for vectors and ran on text instead (``/readyz``, ``/metrics``).
        self.text_fallbacks = 0
        #: Hybrid searches whose ranking rested on one side, by ``(side, why the other
        #: did not count)`` (``knowledge.fusion.weigh``'s reasons; ``/metrics``).
        self.fusion_drops: dict[tuple[str, str], int] = {}
        #: Documents waiting for vectors (``knowledge.backfill``): a search by meaning
        #: cannot see them, and its result says so.
        self.pending_vectors: Callable[[], int] = lambda: 0

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
        overload: OverloadRule | None = None,
    ) -> SearchResponse:
        response = await self._search(
            query, bucket, top_k, filters, doc_id, mode, context_chars, candidates, relax, buckets
        )
        # The one overload decision (``OverloadRule``), on the response as it goes back:
        # relaxed or not, one bucket or several.
        rule = overload or self.config.overload_rule
        response.overloaded = rule.overloaded(response.total_matches, response.score_spread, doc_id=doc_id)
        return response

    async def _search(
        self,
        query: str,
        bucket: str | None,
        top_k: int,
        filters: Mapping[str, Any] | str | None,
        doc_id: str | None,
        mode: SearchMode,
        context_chars: int | None,
        candidates: int | None,
        relax: bool,
        buckets: Sequence[str] | None,
    ) -> SearchResponse:
        started = time.perf_counter()
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        top_k = max(1, min(int(top_k), self.config.max_top_k))
        n_cand = max(top_k, min(int(candidates or self.config.candidates), 1000))
        missing: list[str] = []
        if bucket is None and buckets is not None and "*" not in buckets:
            named = list(dict.fromkeys(buckets))
            known = [b for b in named if await self.buckets.exists(b)]
            missing = [b for b in named if b not in known]
            if not known:
                elapsed = round((time.perf_counter() - started) * 1000, 3)
                return SearchResponse([], 0, False, elapsed, mode=mode, missing_buckets=missing)
            if len(known) > 1:
                response = await self._search_buckets(query, known, filters, doc_id, mode, top_k, n_cand, context_chars)
                response.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
                response.missing_buckets = missing
                return response
            bucket = known[0]
        schema: dict[str, str] | None = await self.buckets.schema(bucket) if bucket is not None else None
        parsed = parse_filters(filters)
        compiled = compile_filters(parsed, schema, bucket=bucket)
        scope = search_scope(bucket, compiled, doc_id)
        response = await self._search_once(query, scope, mode, top_k, n_cand, context_chars)
        if relax and parsed and not response.hits:
            relaxed = await self.counts.relax_filters(parsed, bucket=bucket)
            if relaxed is not None:
                new_filters, dropped = relaxed
                compiled = compile_filters(new_filters, schema, bucket=bucket)
                response = await self._search_once(
                    query, search_scope(bucket, compiled, doc_id), mode, top_k, n_cand, context_chars
                )
                response.relaxed = True
                response.dropped_filter = dropped
        response.elapsed_ms = round((time.perf_counter() - started) * 1000, 3)
        response.missing_buckets = missing
        return response

    async def _search_buckets(
        self,
        query: str,
        buckets: list[str],
        filters: Mapping[str, Any] | str | None,
        doc_id: str | None,
        mode: str,
        top_k: int,
        n_cand: int,
        context_chars: int | None,
    ) -> SearchResponse:
        """Several buckets: the union of their documents in scope (each bucket's filters
        compiled on its own schema), ranked together in one pass."""
        parsed = parse_filters(filters)
        in_scope: list[str] = []
        for b in buckets:
            compiled = compile_filters(parsed, await self.buckets.schema(b), bucket=b)
            in_scope.extend(await self.index.scoped_doc_ids(KBScope(b, compiled, doc_id)))
        if not in_scope:
            return SearchResponse([], 0, False, 0.0, mode=mode)
        return await self._search_once(
            query, KBScope(doc_ids=list(dict.fromkeys(in_scope))), mode, top_k, n_cand, context_chars
        )

    # ------------------------------------------------------------------ one pass
    async def _search_once(
        self, query: str, scope: KBScope, mode: str, top_k: int, n_cand: int, context_chars: int | None
    ) -> SearchResponse:
        # The BM25 term choice needs only the query: start its lookups now, so they run
        # beside the scope query instead of after it.
        terms_task = (
            asyncio.create_task(bm25_terms(self.index, query or "", n_cand, self._tuning))
            if mode != "semantic"
            else None
        )
        try:
            if (scope.filter is not None or scope.doc_id is not None) and mode != "text":
                if self.dense.scope_by_chunks:
                    # The in-memory matrix masks its rows by chunk id, and the text side
                    # ranks within the same ids: the scope straight from storage as
                    # chunks, no walk over its documents on the event loop (issue 24).
                    chunk_ids = await self.index.scoped_chunk_ids(scope)
                    if not len(chunk_ids):
                        return SearchResponse([], 0, False, 0.0, mode=mode)
                    scope = replace(scope, chunk_ids=chunk_ids)
                else:
                    scoped_docs = await self.index.scoped_doc_ids(scope)
                    if not scoped_docs:
                        return SearchResponse([], 0, False, 0.0, mode=mode)
                    scope = KBScope(scope.bucket, scope.filter, scope.doc_id, scoped_docs, scope.hidden_prefix)
            response = await self._rank(query, scope, terms_task, mode, top_k, n_cand, context_chars)
            if (
                not response.hits
                and scope.doc_ids is None
                and scope.chunk_ids is None
                and (scope.filter is not None or scope.doc_id is not None)
                and not await self.index.count_documents(scope)
            ):
                # A text search ranks the filter's scope in the engine's own statement
                # (only the vector side needs the list of its documents: at 1M chunks
                # fetching and handing back 38k ids was a third of a filtered search);
                # an empty scope still answers as it always did.
                return SearchResponse([], 0, False, 0.0, mode=mode)
            return response
        finally:
            if terms_task is not None:
                if not terms_task.done():
                    terms_task.cancel()
                elif not terms_task.cancelled():
                    terms_task.exception()  # retrieved: an early return must not log it

    async def _rank(
        self,
        query: str,
        scope: KBScope,
        terms_task: asyncio.Task[list[str]] | None,
        mode: str,
        top_k: int,
        n_cand: int,
        context_chars: int | None,
    ) -> SearchResponse:
        q = QueryTerms.of(query or "", content_terms(query or ""), related_terms(query or ""))
        warnings: list[str] = []
        use_text = mode in ("hybrid", "text")
        use_vec = mode in ("hybrid", "semantic")
        if use_vec and (self.embedder is None or not await self.dense.available()):
            if mode == "semantic":
                warnings.append("no vectors available (no embedder or nothing embedded); used text search")
            elif self.embedder is not None:  # without an embedder, text-only hybrid is the configuration
                warnings.append("no vectors available (nothing embedded yet); ranked by text only")
            if mode == "semantic" or self.embedder is not None:
                self.text_fallbacks += 1
            use_text = True
            use_vec = False
        query_vec: np.ndarray | None = None
        if use_vec:
            try:
                query_vec = await self.query_vectors.embed(query)
            except EmbeddingError as exc:
                self.text_fallbacks += 1
                warnings.append(f"embedder failed ({exc}); used text search only")
                use_vec, use_text = False, True
        if use_vec and self.embedder is not None:
            # Of the documents this search covered only (``knowledge.vector_warnings``).
            warnings += await unsearched_vector_warnings(
                self.index,
                self.dense,
                scope,
                pending=self.pending_vectors(),
                embed_key=f"{self.embedder.name}:{self.embedder.model}",  # as ``Ingestor`` stores it
                embed_dim=self.embedder.dim,
                use_text=use_text,
            )

        async def text_side() -> KBRanked:
            if not use_text:
                return KBRanked()
            if terms_task is not None:
                terms = await terms_task
            else:  # semantic search fell back to text
                terms = await bm25_terms(self.index, query or "", n_cand, self._tuning)
            return await self.index.text_candidates(terms, scope, n_cand, self._tuning)

        async def vec_side() -> KBRanked:
            if not use_vec or query_vec is None:
                return KBRanked()
            return await self.dense.nearest(query_vec, scope, n_cand)

        text, vec = await asyncio.gather(text_side(), vec_side())
        v_ids, v_scores, v_total = vec.ids, vec.scores, vec.total
        used = "hybrid" if use_text and use_vec else ("text" if use_text else "semantic")
        # Score-level fusion: each side min-max normalised per query, the dense side
        # weighted by how much its embedder is worth, and sitting out a query whose best
        # cosine is below its embedder's confidence floor (knowledge/fusion.py). The
        # plan is kept: the result says which sides the ranking rests on.
        dense = dense_weight(self.embedder.name if self.embedder else None)
        plan = weigh(
            [
                FusionSide(text.ids, text.scores, 1.0),
                FusionSide(v_ids, v_scores, dense.weight, dense.depth, dense.confident_at),
            ]
        )
        fused = combine(plan.sides)
        fused_sides, dropped_sides = self._fusion_report(used, plan)
        ordered = sorted(fused, key=lambda cid: -fused[cid])[:n_cand]
        cands = [
            Candidate(
                r.chunk_id,
                r.doc_id,
                r.position,
                r.title,
                r.heading,
                r.text,
                r.bucket,
                r.source,
                r.url,
                r.metadata,
                fused[r.chunk_id],
                page=r.page,
                page_end=r.page_end,
            )
            for r in await self.index.hydrate(ordered)
        ]
        if query_vec is not None and cands:
            cos = await self.dense.cosines([c.chunk_rowid for c in cands], query_vec)
            for c in cands:
                c.cosine = cos.get(c.chunk_rowid, 0.0)
        n_lists = (1 if use_text else 0) + (1 if use_vec else 0)
        # Ranked deeper than asked, so the copies dropped next (a page as .md and .html)
        # leave room for other passages instead of shrinking the answer.
        # The per-document cap spreads an answer over several pages; a search inside one
        # page (``doc_id``) has nothing to spread over, and capping it would hide the
        # page's fourth passage from a reader asking for more of it.
        per_doc = top_k if scope.doc_id is not None else self.config.per_doc
        ranked = rerank(cands, q, lists=max(1, n_lists), top_k=2 * top_k + 4, per_doc=per_doc, max_fused=1.0)
        top, duplicates = collapse_duplicates(
            ranked,
            top_k,
            text=lambda c: c.text,
            source=lambda c: c.source,
            document=lambda c: c.doc_id,
            facts=lambda c: record_facts(c.metadata, self.buckets.cached(c.bucket)),
        )
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
                page=c.page,
                page_end=c.page_end,
            )
            for c in top
        ]
        # Flatness is read at a fixed depth, not at the asked-for count: two best passages
        # that score alike do not make a query too broad (top_k 2 compared only them). A
        # side with fewer scores than that is read at its last one, not called never flat
        # (seven alike under AGENT_CLARIFY_OVERLOAD_HITS 5 are an overload).
        spreads = [signal_spread(s, spread_depth(top_k, len(s))) for s in (text.scores, v_scores) if s]
        spread = round(max(spreads), 4) if spreads else 1.0
        total = max(text.total, v_total)
        return SearchResponse(
            hits, total, False, 0.0, used, spread, False, None, warnings, duplicates, fused_sides, dropped_sides
        )

    def _fusion_report(self, used: str, plan: FusionPlan) -> tuple[list[str] | None, dict[str, str]]:
        """Which sides a hybrid ranking rests on, and why the other did not count, read
        off the plan the fusion used (no second pass); a side dropped while the other
        counted is counted in ``fusion_drops`` (``/metrics``). Text or semantic mode has
        one side by request: ``None``, nothing dropped."""
        if used != "hybrid":
            return None, {}
        dropped = {FUSION_SIDES[i]: why for i, why in plan.dropped.items()}
        if plan.counted:  # nothing counted: nothing was ranked, no side fell back on the other
            for side, why in dropped.items():
                self.fusion_drops[(side, why)] = self.fusion_drops.get((side, why), 0) + 1
        return [FUSION_SIDES[i] for i in plan.counted], dropped


__all__ = ["MODES", "Searcher"]
