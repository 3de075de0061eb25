"""The knowledge base's dense side on PostgreSQL: the chunks nearest to a query by
cosine, found inside the database by pgvector, so no replica keeps the vectors in
memory and every replica sees what another one ingested the moment it commits.

How a query runs, and why:

* **Small scopes are scanned exactly.** An HNSW scan filtered after the fact keeps only
  the neighbours that happen to be in scope: for a scope of a few thousand chunks out
  of 100k it would return almost nothing. Scoring a few thousand vectors exactly costs
  a few milliseconds (a bitmap scan on the chunks' ``doc_id`` index), and is what the
  in-memory engine returns, to the last tie (broken by chunk id).
* **Large scopes go through the HNSW index** (one partial index per dimension, cosine,
  made by ``PostgresKBIndex`` on first write). A scan stops after ``hnsw.ef_search``
  candidates and the scope's filter applies to those, so ``ef_search`` grows with how
  little of the index the scope covers (``EF_SEARCH_FACTOR`` times ``limit`` / share).
  With pgvector ≥ 0.8 the scan is also *iterative* (``hnsw.iterative_scan = strict_order``: it walks on
  until ``limit`` chunks passed the filter, up to ``hnsw.max_scan_tuples``). Older
  pgvector (the test server's 0.6.2) cannot, so a scope too thin for the largest
  ``ef_search`` (1,000) is scanned exactly instead — filtered recall never collapses.
* **How large a scope is** comes from counts per bucket and embedder (one ``GROUP BY``
  over ``kb_documents``), cached until this process writes and for at most
  ``STATS_TTL_S``. A stale count only changes *how* a query runs (exact or through the
  index), never which chunks may be returned; the one exception is the shortcut below.
* **The embedder check** (``kb_documents.embed_model``) is a join per chunk; when the
  counts say only one embedder has vectors of the query's dimension the join is left
  out. Replicas configured with two embedders of the same dimension could then, for up
  to ``STATS_TTL_S``, mix them; one replica switching embedders refreshes at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from storage.kb_records import KBRanked, KBScope
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_filters_sql import count_sql, scope_sql
from storage.postgres.kb_text import STATS_TTL_S, named_params

#: pgvector's HNSW limit for ``vector`` columns; larger vectors are always scanned exactly.
HNSW_MAX_DIM = 2000
#: A scope of at most this many vectors is scored exactly (measured on 2 cores: ~3 µs a
#: vector through the doc_id index, so 10k ≈ 30 ms, about one HNSW query at ef 1000).
EXACT_SCOPE_VECTORS = 10_000
#: pgvector's range of ``hnsw.ef_search``; the floor keeps recall high for short lists.
MIN_EF_SEARCH = 100
MAX_EF_SEARCH = 1000
#: ``ef_search`` is this many times the in-scope candidates a query asks for, over the
#: scope's share of the index (capped at ``MAX_EF_SEARCH``). Measured at 100k chunks
#: (``bench/pg_recall.py``, ``bench/results/corpus_pg_recall.json``): semantic top-10
#: agreement with the exact scan 0.917 at 2x, 0.978 at 4x, 0.990 at 8x, latency within
#: the noise of a loaded machine. Whether a scope is scanned exactly still follows 2x.
EF_SEARCH_FACTOR = 4
#: With iterative scans (pgvector ≥ 0.8): how many index tuples a scan may visit.
MIN_SCAN_TUPLES = 20_000

Schema = dict[str, str] | None
SchemaOf = Callable[[str | None], Awaitable[Schema]]


@dataclass(slots=True)
class VectorCounts:
    """Documents and vectors per (embedder, dimension) and bucket."""

    #: (embed_model, dim) -> bucket -> (documents, vectors)
    by_model: dict[tuple[str, int], dict[str, tuple[int, int]]] = field(default_factory=dict)

    def models(self, dim: int) -> set[str]:
        return {m for (m, d), buckets in self.by_model.items() if d == dim and any(v for _, v in buckets.values())}

    def vectors(self, model: str, dim: int, bucket: str | None = None) -> int:
        buckets = self.by_model.get((model, dim), {})
        if bucket is not None:
            return buckets.get(bucket, (0, 0))[1]
        return sum(v for _, v in buckets.values())

    def per_document(self, model: str, dim: int) -> float:
        buckets = self.by_model.get((model, dim), {})
        docs = sum(d for d, _ in buckets.values())
        return sum(v for _, v in buckets.values()) / docs if docs else 1.0


@dataclass(frozen=True, slots=True)
class Plan:
    """How one query runs: exactly, or through the index with this ``ef_search``."""

    exact: bool
    ef_search: int = 0
    scan_tuples: int = 0
    join: bool = True
    estimate: int = 0


class VectorSearch:
    """``vector_candidates`` / ``cosines`` / counts of ``PostgresKBIndex``."""

    def __init__(
        self, db: PostgresDatabase, schema_of: SchemaOf, *, exact_scope_vectors: int = EXACT_SCOPE_VECTORS
    ) -> None:
        self._db = db
        self._schema_of = schema_of
        self.exact_scope_vectors = exact_scope_vectors
        self._counts: VectorCounts | None = None
        self._counts_at = 0.0
        self._generation = 0
        self._iterative: bool | None = None

    def changed(self) -> None:
        """This process wrote: the counts are stale."""
        self._generation += 1
        self._counts = None

    # ------------------------------------------------------------------ counts
    async def counts(self, *, fresh: bool = False) -> VectorCounts:
        if not fresh and self._counts is not None and time.monotonic() - self._counts_at < STATS_TTL_S:
            return self._counts
        generation = self._generation
        rows = await self._db.fetchall(
            "SELECT embed_model, embed_dim, bucket, count(*), coalesce(sum(chunk_count), 0) FROM kb_documents "
            "WHERE embed_model IS NOT NULL AND embed_dim IS NOT NULL GROUP BY embed_model, embed_dim, bucket"
        )
        counts = VectorCounts()
        for model, dim, bucket, docs, vectors in rows:
            counts.by_model.setdefault((str(model), int(dim)), {})[str(bucket)] = (int(docs), int(vectors))
        if generation == self._generation:
            self._counts, self._counts_at = counts, time.monotonic()
        return counts

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        row = await self._db.fetchone(
            "SELECT coalesce(sum(chunk_count), 0) FROM kb_documents WHERE embed_model = %s AND embed_dim = %s",
            (embed_model, int(dim)),
        )
        return int(row[0]) if row else 0

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        row = await self._db.fetchone(
            "SELECT EXISTS (SELECT 1 FROM kb_documents WHERE embed_model = %s AND embed_dim = %s AND chunk_count > 0)",
            (embed_model, int(dim)),
        )
        return bool(row and row[0])

    async def _iterative_scans(self) -> bool:
        """pgvector ≥ 0.8 has iterative index scans."""
        if self._iterative is None:
            row = await self._db.fetchone("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            parts = [int(p) for p in str(row[0]).split(".")[:2] if p.isdigit()] if row else []
            self._iterative = tuple(parts) >= (0, 8)
        return self._iterative

    # ------------------------------------------------------------------ planning
    async def _estimate(self, scope: KBScope, counts: VectorCounts, model: str, dim: int) -> int:
        """About how many vectors of ``model`` the scope holds."""
        if scope.doc_ids is not None:
            return math.ceil(len(scope.doc_ids) * counts.per_document(model, dim))
        if scope.doc_id is not None:
            return math.ceil(counts.per_document(model, dim))
        if scope.filter is not None:
            sql, params = count_sql(scope, await self._schema_of(scope.bucket))
            row = await self._db.fetchone(sql, params)
            return math.ceil((int(row[0]) if row else 0) * counts.per_document(model, dim))
        return counts.vectors(model, dim, scope.bucket)

    async def plan(self, scope: KBScope, model: str, dim: int, limit: int) -> Plan:
        counts = await self.counts()
        if model not in counts.models(dim):  # new since the counts were read, or nothing at all
            counts = await self.counts(fresh=True)
        join = counts.models(dim) != {model}
        estimate = await self._estimate(scope, counts, model, dim)
        total = counts.vectors(model, dim)
        if dim > HNSW_MAX_DIM or estimate <= self.exact_scope_vectors or total <= 0:
            return Plan(True, join=join, estimate=estimate)
        share = min(1.0, estimate / total)
        needed = math.ceil(2 * limit / share)  # candidates to walk for ``limit`` in scope, with margin
        wanted = math.ceil(EF_SEARCH_FACTOR * limit / share)
        ef = max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, wanted))
        if await self._iterative_scans():
            return Plan(False, ef, max(MIN_SCAN_TUPLES, 4 * wanted), join=join, estimate=estimate)
        if needed > MAX_EF_SEARCH:
            return Plan(True, join=join, estimate=estimate)
        return Plan(False, ef, join=join, estimate=estimate)

    # ------------------------------------------------------------------ search
    async def candidates(
        self, query: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> KBRanked:
        """The ``limit`` chunks nearest to ``query`` (see the module docstring). ``total``
        counts the chunks in scope with a positive similarity when the scan is exact,
        and is the estimated number of vectors in scope when the index answers. An index
        scan that brings back fewer than ``limit`` chunks of a scope that holds more is
        done again exactly: an approximate search never returns less than there is."""
        if limit <= 0:
            return KBRanked()
        dim = int(np.asarray(query).shape[-1])
        vec = np.asarray(query, dtype=np.float32).reshape(dim)
        plan = await self.plan(scope, embed_model, dim, limit)
        rows = await self._search(plan, vec, embed_model, scope, limit)
        if not plan.exact and len(rows) < limit and plan.estimate > len(rows):
            rows = await self._search(Plan(True, join=plan.join), vec, embed_model, scope, limit)
        if not rows:
            return KBRanked()
        return KBRanked([int(r[0]) for r in rows], [float(r[1]) for r in rows], int(rows[0][2]))

    async def _search(
        self, plan: Plan, vec: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> list[tuple[Any, ...]]:
        dim = int(vec.shape[0])
        params: dict[str, Any] = {"q": vec, "model": embed_model, "limit": int(limit)}
        where = [f"vector_dims(c.embedding) = {dim}"]
        join = " JOIN kb_documents d ON d.id = c.doc_id AND d.embed_model = %(model)s" if plan.join else ""
        use_ids = scope.doc_ids is not None and (
            plan.exact or (scope.bucket is None and scope.filter is None and scope.doc_id is None)
        )
        if use_ids:
            where.append("c.doc_id = ANY(%(doc_ids)s::text[])")
            params["doc_ids"] = list(scope.doc_ids or ())
        elif not KBScope(scope.bucket, scope.filter, scope.doc_id).everything:
            inner, inner_params = scope_sql(scope, await self._schema_of(scope.bucket))
            where.append("c.doc_id IN (" + named_params(inner, inner_params, params) + ")")
        distance = f"c.embedding::vector({dim}) <=> %(q)s::vector({dim})"
        async with self._db.reading() as conn, conn.transaction():
            if plan.exact:
                # Materialised: every vector in scope is scored once, counted, and the
                # best are picked with a top-N sort (the index is never asked).
                sql = (
                    f"WITH s AS MATERIALIZED (SELECT c.id, 1 - ({distance}) AS sim FROM kb_chunks c{join} "
                    f"WHERE {' AND '.join(where)}) "
                    "SELECT id, sim, (SELECT count(*) FROM s WHERE sim > 0) FROM s "
                    "ORDER BY sim DESC, id LIMIT %(limit)s"
                )
            else:
                await conn.execute(f"SET LOCAL hnsw.ef_search = {int(plan.ef_search)}")  # type: ignore[arg-type]
                if plan.scan_tuples:
                    await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                    await conn.execute(f"SET LOCAL hnsw.max_scan_tuples = {int(plan.scan_tuples)}")  # type: ignore[arg-type]
                sql = (
                    f"SELECT c.id, 1 - ({distance}), %(estimate)s FROM kb_chunks c{join} "
                    f"WHERE {' AND '.join(where)} ORDER BY {distance} LIMIT %(limit)s"  # HNSW orders
                )
                params["estimate"] = plan.estimate
            cur = await conn.execute(sql, params)  # type: ignore[arg-type]
            return list(await cur.fetchall())

    async def cosines(self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32]) -> dict[int, float]:
        """Cosine similarity of each stored chunk vector to ``query`` (chunks without a
        vector of that dimension are left out): the re-ranker's dense signal."""
        if not chunk_ids:
            return {}
        dim = int(np.asarray(query).shape[-1])
        rows = await self._db.fetchall(
            f"SELECT id, 1 - (embedding::vector({dim}) <=> %s::vector({dim})) FROM kb_chunks "
            f"WHERE id = ANY(%s) AND vector_dims(embedding) = {dim}",
            (np.asarray(query, dtype=np.float32).reshape(dim), [int(i) for i in chunk_ids]),
        )
        return {int(i): float(c) for i, c in rows}


__all__ = ["EXACT_SCOPE_VECTORS", "HNSW_MAX_DIM", "Plan", "VectorCounts", "VectorSearch"]
