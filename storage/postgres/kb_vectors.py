"""The knowledge base's dense side on PostgreSQL: the chunks nearest to a query by
cosine, found inside the database by pgvector, so no replica keeps the vectors in
memory and every replica sees what another one ingested the moment it commits.

How a query runs, and why:

* **Small scopes are scanned exactly.** Scoring a few thousand vectors exactly costs a
  few milliseconds (a bitmap scan on the chunks' ``doc_id`` index), and is what the
  in-memory engine returns, to the last tie (broken by chunk id).
* **Each bucket past the exact threshold has its own HNSW graph** (``kb_graphs``: a
  partial index per dimension and bucket, over the chunk's copy of its document's
  bucket, migration 26). Until issue 24 one graph per dimension served every bucket,
  and a bucket's search was post-filtered: the bench's bucket, a quarter of the index,
  drove ``ef_search`` to 1,000 at 100k (semantic p95 86 ms of hybrid's 90) and at 1M
  agreed with the exact top 10 only 0.92 of the time even with pgvector 0.8's
  iterative scans. A bucket's own graph is walked as an unscoped search is.
* **A query is split into statements** (``kb_vector_parts``): one per bucket of its
  scope whose graph answers it, the bucket written as a literal so the planner proves
  the partial index's predicate whatever plan a prepared statement gets
  (``kb_vector_scan``), and one exact scan of whatever is left (small buckets, thin
  scopes); the parts' best are merged by cosine, then chunk id. Several buckets (a
  list of documents from ``knowledge.search``) are split by their documents' buckets;
  every bucket is one part per graph the counts know and an exact scan of every other
  bucket in ``kb_buckets``.
* **A whole bucket** walks its graph with a plain scan ``POOL_FACTOR`` x ``limit``
  wide (``ef_search`` 1,000 for the service's 100 candidates): nothing is filtered
  out, so the iterative scan's pool is not needed. ``bench/pg_recall.py --buckets``:
  top-10 agreement with the exact scan at 100k (buckets of 25–50k) 0.995 on pgvector
  0.6.2 (0.937 at the share-based ``ef_search`` of 400), 0.992 on 0.8.5 — where the
  plain scan's p95 was 60 ms against the iterative pool's 79 for the same agreement.
  A bucket past ``LARGE_GRAPH_VECTORS`` walks further, iterating (pgvector ≥ 0.8), to a
  pool that grows with the bucket, with the scan's tuples and memory sized for it
  (``kb_vector_walk``): at 1M the bench's 250k-vector buckets agreed 0.90 with a plain
  scan at ``ef_search`` 1,000 and 1.0 with a pool of 2,000; its 500k one needs a pool of
  4,000 and the memory to walk 80,000 tuples (``corpus_pg_recall_1000000_s41*.json``).
  pgvector 0.6 cannot walk past 1,000: there a 1M corpus stays near 0.90.
* **A thinner scope inside a big bucket** (a filter, a list of documents) follows the
  rules the single graph had, relative to the bucket's graph: a scan stops after
  ``hnsw.ef_search`` candidates and the scope's filter applies to those, so
  ``ef_search`` grows with how little of the bucket the scope covers
  (``EF_SEARCH_FACTOR`` times ``limit`` / share). pgvector < 0.8 stops there, so a
  scope too thin for the largest ``ef_search`` (1,000) is scanned exactly instead, and
  a scan that comes back short is done again exactly. pgvector ≥ 0.8 (the version is
  read once, from ``pg_extension``) scans iteratively: ``relaxed_order`` walks on past
  ``ef_search`` until ``POOL_FACTOR`` x ``limit`` chunks passed the filter (at most
  ``hnsw.max_scan_tuples`` index tuples), and the pool is re-ranked exactly; in a graph
  past ``LARGE_GRAPH_VECTORS`` the pool grows with the graph (``kb_vector_walk``). Scopes whose
  walk would visit more index tuples than they hold vectors are scanned exactly.
* **How large a scope is** comes from counts per bucket and embedder (one ``GROUP BY``
  over ``kb_documents``) and which graphs are valid and ready (``pg_index``: one a
  concurrent build is making, or a failed one left, is not), cached until this
  process writes and for at most ``STATS_TTL_S``. A stale count only changes *how* a
  query runs (exact or through a graph), never which chunks of a named bucket may be
  returned, nor which buckets a search of every bucket covers (the buckets without a
  graph part are read from ``kb_buckets`` by the exact part's own statement, so a bucket
  another replica has just created is searched at once). A bucket past the threshold
  whose graph is missing, under way or invalid (built in the background after the
  write that took it there; a crash or a failed build: the repair at open makes it) is
  scanned exactly and listed by ``describe`` (the KB's status).
* **The embedder check** (``kb_documents.embed_model``) is a join per chunk; when the
  counts say only one embedder has vectors of the query's dimension the join is left
  out. Replicas configured with two embedders of the same dimension could then, for up
  to ``STATS_TTL_S``, mix them; one replica switching embedders refreshes at once.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from storage.kb_records import KBRanked, KBScope
from storage.postgres.database import PostgresDatabase
from storage.postgres.kb_filters_sql import count_sql
from storage.postgres.kb_graphs import (
    HNSW_MAX_DIM,
    bucket_key,
    graph_memory,
    graph_names,
    graph_states,
    graphs_in_progress,
)
from storage.postgres.kb_text import STATS_TTL_S
from storage.postgres.kb_vector_parts import SchemaOf, VectorCounts, split
from storage.postgres.kb_vector_scan import Part, Plan, ScanSettings, run_part
from storage.postgres.kb_vector_walk import LARGE_GRAPH_VECTORS, WalkRule
from storage.stores.kb_generation import READ as READ_GENERATION

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
#: With iterative scans (pgvector ≥ 0.8): how many index tuples a scan may visit, at
#: least (pgvector's default); more when the pool over the scope's share needs more.
MIN_SCAN_TUPLES = 20_000
#: With iterative scans: chunks taken from the index per chunk asked for, re-ranked
#: exactly. ``bench/pg_recall.py``, bucket-scoped top-10 agreement with the exact scan
#: (``bench/results/corpus_pg_recall*.json``): 100k 0.982 at 2, 0.997 at 10; 1M 0.863 at
#: 2, 0.920 at 10 and 20. At 2 a filtered scope at 1M went through the index (0.973);
#: at 10 its walk exceeds what it holds and it is scanned exactly (1.0).
POOL_FACTOR = 10
#: A whole bucket's graph past ``LARGE_GRAPH_VECTORS`` is walked wider, to a pool that
#: grows with the bucket (``kb_vector_walk``), which only an iterative scan can collect
#: (``hnsw.ef_search`` stops at 1,000). ``bench/pg_recall.py --buckets``: top-10
#: agreement with the exact scan of a 250k-vector bucket (the 1M corpus's contracts,
#: pgvector 0.8.5) 0.90 with a plain scan at ``ef_search`` 1,000 (two of 20 queries found
#: none of their top 10), 1.0 iterating to a pool of 2,000 (p50 93 ms against 45, load
#: ~5); buckets of 25–50k agree 0.99 with the plain scan.
#: With iterative scans: the scan's memory, in ``work_mem``s (``hnsw.scan_mem_multiplier``),
#: at least; ``kb_vector_walk`` sizes it from the walk's tuple cap.
SCAN_MEM_MULTIPLIER = 1
#: With iterative scans: ``relaxed_order`` (results nearly in order, re-ranked here)
#: or ``strict_order`` (pgvector keeps them in order, and visits more to do so).
SCAN_ORDER = "relaxed_order"
#: The first pgvector with iterative index scans.
ITERATIVE_SINCE = (0, 8)


def pgvector_version(text: str | None) -> tuple[int, ...]:
    """``"0.8.5"`` -> ``(0, 8, 5)``; anything unreadable -> ``()`` (older than all)."""
    parts: list[int] = []
    for p in str(text or "").split("."):
        if not p.isdigit():
            break
        parts.append(int(p))
    return tuple(parts)


class VectorSearch:
    """``vector_candidates`` / ``cosines`` / counts of ``PostgresKBIndex``."""

    def __init__(
        self, db: PostgresDatabase, schema_of: SchemaOf, *, exact_scope_vectors: int = EXACT_SCOPE_VECTORS
    ) -> None:
        self._db = db
        self.schema_of = schema_of
        self.exact_scope_vectors = exact_scope_vectors
        self._counts: VectorCounts | None = None
        self._counts_at = 0.0
        #: The knowledge base's stored generation the counts were read at (``None``: not
        #: known, a search's read): while it stands, they are exact whatever their age.
        self._counts_kb_generation: int | None = None
        self._generation = 0
        self._pgvector: str | None = None
        self._work_mem: int | None = None
        #: Knobs ``bench/pg_recall.py`` turns to measure each setting on one server;
        #: ``iterative`` None: as the server's pgvector allows.
        self.iterative: bool | None = None
        self.ef_search_factor = EF_SEARCH_FACTOR
        self.pool_factor = POOL_FACTOR
        self.scan_order = SCAN_ORDER
        self.scan_mem_multiplier = SCAN_MEM_MULTIPLIER
        self.walk = WalkRule()
        #: Index scans that came back short and were done again exactly (a metric's worth).
        self.exact_reruns = 0

    @property
    def db(self) -> PostgresDatabase:
        return self._db

    def changed(self) -> None:
        """This process wrote: the counts are stale."""
        self._generation += 1
        self._counts = None

    # ------------------------------------------------------------------ counts
    async def counts(self, *, fresh: bool = False, kb_generation: int | None = None) -> VectorCounts:
        """Per model, dimension and bucket, and the graphs there are: kept ``STATS_TTL_S``
        for the searches' plans (a graph built or dropped counts up no generation).
        ``kb_generation``: the stored generation, read just before (``/readyz``'s
        ``describe``, which reads the graphs from the catalog itself): the documents'
        counts read at that very generation are exact still - nothing was written since -
        whatever their age; others are read again. Every read is kept with the generation
        read before it, so a search's read serves the next probe too."""
        if kb_generation is not None:
            if self._counts is not None and self._counts_kb_generation == kb_generation:
                return self._counts
            fresh = True
        if not fresh and self._counts is not None and time.monotonic() - self._counts_at < STATS_TTL_S:
            return self._counts
        generation = self._generation
        if kb_generation is None:
            row = await self._db.fetchone(READ_GENERATION)
            kb_generation = int(row[0]) if row else None
        rows = await self._db.fetchall(
            "SELECT embed_model, embed_dim, bucket, count(*), coalesce(sum(chunk_count), 0) FROM kb_documents "
            "WHERE embed_model IS NOT NULL AND embed_dim IS NOT NULL GROUP BY embed_model, embed_dim, bucket"
        )
        async with self._db.reading() as conn:
            graphs = await graph_names(conn)
        counts = VectorCounts(graphs=graphs)
        for model, dim, bucket, docs, vectors in rows:
            counts.by_model.setdefault((str(model), int(dim)), {})[str(bucket)] = (int(docs), int(vectors))
        if generation == self._generation:
            self._counts, self._counts_at, self._counts_kb_generation = counts, time.monotonic(), kb_generation
        return counts

    async def count_vectors(self, embed_model: str, dim: int) -> int:
        """From the counts per model and bucket, read anew: the one sum over the documents
        that ``/readyz``'s count in the background makes serves ``describe`` too, which
        then never reads them in a probe (``describe(kept_counts=True)``)."""
        counts = await self.counts(fresh=True)
        return sum(vectors for _docs, vectors in counts.by_model.get((embed_model, int(dim)), {}).values())

    async def has_vectors(self, embed_model: str, dim: int) -> bool:
        row = await self._db.fetchone(
            "SELECT EXISTS (SELECT 1 FROM kb_documents WHERE embed_model = %s AND embed_dim = %s AND chunk_count > 0)",
            (embed_model, int(dim)),
        )
        return bool(row and row[0])

    async def pgvector(self) -> str:
        """The server's pgvector version, read once (an upgrade needs a restart of the
        server's sessions anyway: ``ALTER EXTENSION`` under running replicas is rare)."""
        if self._pgvector is None:
            row = await self._db.fetchone("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            self._pgvector = str(row[0]) if row else ""
        return self._pgvector

    async def work_mem(self) -> int:
        """The server's ``work_mem`` for this service's sessions, in bytes, read once:
        pgvector bounds an iterative scan's memory by it (x ``hnsw.scan_mem_multiplier``)."""
        if self._work_mem is None:
            row = await self._db.fetchone("SELECT pg_size_bytes(current_setting('work_mem'))")
            self._work_mem = int(row[0]) if row else 0
        return self._work_mem

    async def _iterative_scans(self) -> bool:
        """pgvector ≥ 0.8 has iterative index scans (unless switched off by ``iterative``)."""
        if self.iterative is not None:
            return self.iterative
        return pgvector_version(await self.pgvector()) >= ITERATIVE_SINCE

    async def describe(self, kb_generation: int | None = None, *, kept_counts: bool = False) -> dict[str, Any]:
        """How scoped searches run on this server, for the KB's status: which pgvector,
        whether its scans are iterative and how big the exactly re-ranked pool is.
        ``kb_generation``: the stored generation just read (``counts``). ``kept_counts``
        (``/readyz``): the buckets without a graph from the counts kept, whatever their
        generation, and ``null`` before any - a read of them sums every document (~1 s
        at 1M chunks); ``count_vectors`` (``/readyz``'s count in the background) and the
        searches keep them anew."""
        iterative = await self._iterative_scans()
        out: dict[str, Any] = {
            "pgvector": await self.pgvector() or None,
            "iterative_scans": iterative,
            "ef_search_factor": self.ef_search_factor,
            "exact_scope_vectors": self.exact_scope_vectors,
            "exact_reruns": self.exact_reruns,
        }
        counts = self._counts if kept_counts else await self.counts(kb_generation=kb_generation)
        # The catalog itself, not the cached counts: a build that just ended shows at once.
        async with self._db.reading() as conn:
            states = await graph_states(conn)
            running = await graphs_in_progress(conn)
            graph_bytes, buffer_bytes = await graph_memory(conn)
        valid = {k for k, ok in states.items() if ok}
        out["bucket_graphs"] = len(valid)
        # Graphs larger than the server's shared_buffers are walked partly from the OS
        # (half as fast at 100k: docs/scaling.md, "HNSW memory"): the operator's sign to
        # raise shared_buffers.
        out["graph_bytes"] = graph_bytes
        out["shared_buffers_bytes"] = buffer_bytes
        out["graphs_fit_shared_buffers"] = graph_bytes <= buffer_bytes
        # A bucket past the threshold without a valid graph (being built, a build not run
        # yet, or one that failed: the next write into it or the next open's repair makes
        # it) is searched exactly meanwhile. ``None``: no counts kept yet (``kept_counts``).
        by_model = counts.by_model if counts is not None else {}
        out["buckets_without_graph"] = None if counts is None else sorted(
            {
                b
                for (_m, dim), buckets in by_model.items()
                for b, (_d, vectors) in buckets.items()
                if 0 < dim <= HNSW_MAX_DIM and vectors > self.exact_scope_vectors and (dim, bucket_key(b)) not in valid
            }
        )
        # Graphs in the catalog but not valid: under way (any replica), or left invalid
        # by a failed or cancelled build (dropped and built again by the next repair).
        names = {bucket_key(b): b for buckets in by_model.values() for b in buckets}
        invalid = {k for k, ok in states.items() if not ok}
        out["buckets_building_graph"] = sorted({names.get(k, k) for _d, k in invalid & running})
        out["buckets_with_invalid_graph"] = sorted({names.get(k, k) for _d, k in invalid - running})
        if iterative:
            out.update(scan_order=self.scan_order, candidate_pool_factor=self.pool_factor)
        else:
            out["detail"] = (
                "pgvector < 0.8: no iterative index scans; thin scopes are scanned exactly (0.8 recommended)"
            )
        return out

    # ------------------------------------------------------------------ planning
    async def estimate(self, scope: KBScope, counts: VectorCounts, model: str, dim: int) -> int:
        """About how many vectors of ``model`` the scope (within its bucket) holds."""
        if scope.doc_ids is not None:
            return math.ceil(len(scope.doc_ids) * counts.per_document(model, dim))
        if scope.doc_id is not None:
            return math.ceil(counts.per_document(model, dim))
        if scope.filter is not None:
            sql, params = count_sql(scope, await self.schema_of(scope.bucket))
            row = await self._db.fetchone(sql, params)
            return math.ceil((int(row[0]) if row else 0) * counts.per_document(model, dim))
        return counts.vectors(model, dim, scope.bucket)

    async def graph_plan(self, estimate: int, total: int, limit: int, *, join: bool, whole: bool = False) -> Plan:
        """How a scope of about ``estimate`` vectors runs on a bucket graph of ``total``:
        through it, with ``ef_search`` (and, iterating, the pool and the walk) sized for
        the scope's share of the graph, or exactly, when the scope is small or the walk
        would visit more than the scope holds. ``whole``: the scope is the whole bucket,
        so nothing the graph hands over is filtered out — a plain scan as wide as the
        pool (``POOL_FACTOR`` x ``limit``, at most ``MAX_EF_SEARCH``) gives the same
        walk as an iterative one, cheaper (``bench/pg_recall.py --buckets``), on every
        pgvector; only a pool past ``MAX_EF_SEARCH`` (a graph past
        ``LARGE_GRAPH_VECTORS``) needs iterating."""
        if estimate <= self.exact_scope_vectors or total <= 0:
            return Plan(True, join=join, estimate=estimate)
        pool = max(limit, math.ceil(self.pool_factor * limit))
        if total > LARGE_GRAPH_VECTORS:
            pool = max(pool, self.walk.large_pool(total, limit)) if whole else self.walk.scoped_pool(pool, total)
        if whole:
            ef = max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, max(pool, math.ceil(self.ef_search_factor * limit))))
            if pool <= MAX_EF_SEARCH or not await self._iterative_scans():
                return Plan(False, ef, join=join, estimate=estimate)
            tuples = self.walk.large_tuples(pool, MIN_SCAN_TUPLES)
            return Plan(False, ef, tuples, join=join, estimate=estimate, pool=pool, scan_mem=await self._mem(tuples))
        share = min(1.0, estimate / total)
        needed = math.ceil(2 * limit / share)  # candidates to walk for ``limit`` in scope, with margin
        wanted = math.ceil(self.ef_search_factor * limit / share)
        ef = max(MIN_EF_SEARCH, min(MAX_EF_SEARCH, wanted))
        if await self._iterative_scans():
            walk = math.ceil(2 * pool / share)  # index tuples to visit for the pool, with margin
            if walk > estimate:  # the walk would visit more than the scope holds
                return Plan(True, join=join, estimate=estimate)
            tuples = max(MIN_SCAN_TUPLES, 2 * walk)
            return Plan(False, ef, tuples, join=join, estimate=estimate, pool=pool, scan_mem=await self._mem(tuples))
        if needed > MAX_EF_SEARCH:
            return Plan(True, join=join, estimate=estimate)
        return Plan(False, ef, join=join, estimate=estimate)

    async def _mem(self, tuples: int) -> int:
        """``hnsw.scan_mem_multiplier`` for a walk allowed ``tuples`` index tuples."""
        return self.walk.mem_multiplier(tuples, await self.work_mem(), self.scan_mem_multiplier)

    async def counts_for(self, model: str, dim: int) -> VectorCounts:
        counts = await self.counts()
        if model not in counts.models(dim):  # new since the counts were read, or nothing at all
            counts = await self.counts(fresh=True)
        return counts

    async def parts(self, scope: KBScope, model: str, dim: int, limit: int) -> list[Part]:
        """The statements a query of ``scope`` runs (``kb_vector_parts``)."""
        return await split(self, scope, model, dim, limit)

    # ------------------------------------------------------------------ search
    async def candidates(
        self, query: npt.NDArray[np.float32], embed_model: str, scope: KBScope, limit: int
    ) -> KBRanked:
        """The ``limit`` chunks nearest to ``query`` (see the module docstring): each part
        (a bucket's graph, the exact rest) gives its best ``limit``, and the union is
        ranked by cosine, then chunk id — the order of an exact scan of the whole scope.
        ``total`` adds the parts' (an exact part counts its chunks with a positive
        similarity, a graph part its estimated size). A graph part that brings back
        fewer than ``limit`` chunks of a scope that holds more is done again exactly: an
        approximate search never returns less than there is."""
        if limit <= 0:
            return KBRanked()
        dim = int(np.asarray(query).shape[-1])
        vec = np.asarray(query, dtype=np.float32).reshape(dim)
        settings = ScanSettings(self.scan_order, self.scan_mem_multiplier)
        rows: list[tuple[Any, ...]] = []
        total = 0
        for part in await self.parts(scope, embed_model, dim, limit):
            got = await run_part(self._db, part, vec, embed_model, limit, settings)
            if not part.plan.exact and len(got) < limit and part.plan.estimate > len(got):
                self.exact_reruns += 1
                exact = Part(Plan(True, join=part.plan.join), part.where, part.params, part.graph)
                got = await run_part(self._db, exact, vec, embed_model, limit, settings)
            rows.extend(got)
            total += int(got[0][2]) if got else 0
        if not rows:
            return KBRanked()
        rows.sort(key=lambda r: (-float(r[1]), int(r[0])))
        best = rows[:limit]
        return KBRanked([int(r[0]) for r in best], [float(r[1]) for r in best], total)

    async def cosines(
        self, chunk_ids: Sequence[int], query: npt.NDArray[np.float32], embed_model: str
    ) -> dict[int, float]:
        """Cosine similarity of each stored chunk vector of ``embed_model`` to ``query``
        (chunks without a vector of that embedder and dimension are left out, as from the
        in-memory matrix): the re-ranker's dense signal. Another embedder's vectors of the
        same width, kept until the re-embedding replaces them, are another model's space."""
        if not chunk_ids:
            return {}
        dim = int(np.asarray(query).shape[-1])
        rows = await self._db.fetchall(
            f"SELECT c.id, 1 - (c.embedding::vector({dim}) <=> %s::vector({dim})) FROM kb_chunks c "
            "JOIN kb_documents d ON d.id = c.doc_id "
            f"WHERE c.id = ANY(%s) AND d.embed_model = %s AND d.embed_dim = {dim} AND vector_dims(c.embedding) = {dim}",
            (np.asarray(query, dtype=np.float32).reshape(dim), [int(i) for i in chunk_ids], embed_model),
        )
        return {int(i): float(c) for i, c in rows}


__all__ = ["EXACT_SCOPE_VECTORS", "HNSW_MAX_DIM", "Plan", "VectorCounts", "VectorSearch", "pgvector_version"]
