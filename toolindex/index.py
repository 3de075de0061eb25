"""``ToolIndex``: tool vectors in one float32 matrix, ranked by cosine similarity.

Rows and the query are both L2-normalised, so a dot product is the cosine and a
score threshold means the same thing for every embedder (the Go original never
normalised the query, so its thresholds silently depended on the embedder's scale).

Ranking rules, all deterministic:

* ``allowlist=None`` searches every tool; an allowlist searches only the named tools
  (unknown names are ignored, and an *empty* allowlist matches nothing — unlike Go,
  where empty meant "all", which turned an empty context into a search of everything).
* ``min_score > 0`` keeps ``score >= min_score``; ``min_score <= 0`` disables the
  threshold (Go's semantics: ``AGENT_RAG_MIN_SCORE=0`` keeps negative scores too).
* ``top_k <= 0`` returns every match; otherwise at most ``top_k``.
* Scores are rounded to 6 decimals; equal scores are ordered by tool name ascending,
  including at the top-k cut (BLAS may differ in the last bit between identical rows,
  so exact float equality would make ties depend on row position).

A failed or partial build raises ``IndexBuildError``: an index is complete or absent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from toolindex.caches import EmbeddingSpace, QueryCache, VectorCache, text_digest
from toolindex.embedder import Embedder, EmbeddingError, Matrix, Vector
from toolindex.vectors import describe_error, to_unit_rows, unit_vector

logger = logging.getLogger(__name__)

#: Above this many matrix elements (n × dim) a search ranks in a worker thread;
#: 1M float32 multiply-adds take about half a millisecond on one core.
DEFAULT_OFFLOAD_ELEMENTS = 1_000_000
#: Below this many candidates, sorting them all beats partitioning first.
_PARTITION_MIN = 64
_SCORE_DECIMALS = 6
_TIE_EPS = 1e-6
_MAX_ALLOWLISTS = 64


class IndexBuildError(Exception):
    """The index could not be built completely (embedder failure, partial or bad vectors)."""


@dataclass(frozen=True, slots=True)
class ToolMatch:
    name: str
    score: float


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Matches best first, plus where the time went (for the selection log record)."""

    matches: list[ToolMatch]
    embed_ms: float
    rank_ms: float
    query_cached: bool = False

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.matches]


class ToolIndex:
    """An immutable set of tool vectors plus the embedder that made them.

    Build with ``await ToolIndex.build(items, embedder)``; ``ToolIndex.from_vectors``
    wraps ready vectors (tests, benchmarks). ``rank`` is pure numpy and thread-safe;
    ``search`` embeds the query (through the per-index LRU) and ranks.
    """

    def __init__(
        self,
        names: Sequence[str],
        matrix: Matrix,
        embedder: Embedder | None = None,
        *,
        query_cache: QueryCache | None = None,
        offload_elements: int = DEFAULT_OFFLOAD_ELEMENTS,
    ) -> None:
        names = tuple(names)
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise IndexBuildError(f"duplicate tool names: {dupes}")
        if matrix.ndim != 2 or matrix.shape[0] != len(names):
            raise IndexBuildError(f"matrix shape {matrix.shape} does not fit {len(names)} names")
        self._names = names
        self._matrix: Matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        self._matrix.setflags(write=False)
        self._embedder = embedder
        self._row_of = {name: i for i, name in enumerate(names)}
        # Rank of each row's name in ascending order: the tie-breaker for lexsort.
        self._name_rank = np.argsort(np.argsort(np.array(names, dtype=object), kind="stable"), kind="stable")
        self._all_rows = np.arange(len(names), dtype=np.intp)
        self._allow_rows: dict[frozenset[str], np.ndarray] = {}
        self._query_cache = query_cache if query_cache is not None else QueryCache()
        self._offload_elements = offload_elements

    # --- construction ---------------------------------------------------------------

    @classmethod
    def from_vectors(
        cls,
        names: Sequence[str],
        vectors: Matrix | Sequence[Sequence[float]],
        embedder: Embedder | None = None,
        *,
        query_cache: QueryCache | None = None,
        offload_elements: int = DEFAULT_OFFLOAD_ELEMENTS,
    ) -> ToolIndex:
        """Wrap ready vectors; rows are validated and L2-normalised."""
        try:
            matrix = to_unit_rows(vectors, expected_count=len(names), expected_dim=None, source="vectors")
        except EmbeddingError as exc:
            raise IndexBuildError(str(exc)) from exc
        return cls(names, matrix, embedder, query_cache=query_cache, offload_elements=offload_elements)

    @classmethod
    async def build(
        cls,
        items: Sequence[tuple[str, str]],
        embedder: Embedder,
        *,
        cache: VectorCache | None = None,
        query_cache_size: int = 512,
        offload_elements: int = DEFAULT_OFFLOAD_ELEMENTS,
    ) -> ToolIndex:
        """Embed ``(tool name, embedding text)`` pairs as documents and index them.

        With a ``cache``, only texts whose vectors are not stored for this embedder's
        (name, model, dim) are embedded, and the cache is rewritten afterwards; an
        unchanged catalog makes no embedding call at all. Raises ``IndexBuildError``
        on any embedder failure or defective result.
        """
        names = [name for name, _ in items]
        texts = [text for _, text in items]
        if len(set(names)) != len(names):
            raise IndexBuildError(f"duplicate tool names: {sorted({n for n in names if names.count(n) > 1})}")
        space = EmbeddingSpace.of(embedder)

        def make(index_names: Sequence[str], matrix: Matrix) -> ToolIndex:
            return cls(
                index_names,
                matrix,
                embedder,
                query_cache=QueryCache(query_cache_size),
                offload_elements=offload_elements,
            )

        if not items:
            return make([], np.zeros((0, space.dim), dtype=np.float32))

        digests = [text_digest(t) for t in texts]
        cached_dim: int = 0
        stored: dict[str, Vector] = {}
        if cache is not None:
            try:
                cached_dim, stored = await cache.load(space)
            except Exception as exc:  # an unreadable cache only costs an embedding call
                logger.warning("could not read the tool vector cache: %s", exc)
        missing: dict[str, str] = {}  # digest -> text, first occurrence; duplicates embed once
        for digest, text in zip(digests, texts, strict=True):
            if digest not in stored and digest not in missing:
                missing[digest] = text

        vectors: dict[str, Vector] = {d: stored[d] for d in digests if d in stored}
        if missing:
            fresh = await cls._embed_documents(embedder, list(missing.values()), space.dim or None)
            if vectors and fresh.shape[1] != cached_dim:
                # The embedder now answers in another dimension than the cached vectors
                # (an unknown-dim Ollama model was replaced): re-embed everything.
                logger.info(
                    "tool vector cache dim %d != embedder dim %d; re-embedding all tools", cached_dim, fresh.shape[1]
                )
                vectors = {}
                missing = dict(zip(digests, texts, strict=True))
                fresh = await cls._embed_documents(embedder, list(missing.values()), int(fresh.shape[1]))
            vectors.update(zip(missing, fresh, strict=True))
        try:
            matrix = to_unit_rows(
                np.stack([vectors[d] for d in digests]), expected_count=len(digests), expected_dim=None, source="index"
            )
        except (EmbeddingError, ValueError) as exc:
            raise IndexBuildError(f"tool vectors unusable: {exc}") from exc
        index = make(names, matrix)
        if cache is not None and missing:
            try:
                await cache.save(space, index.dim, {d: vectors[d] for d in digests})
            except Exception as exc:  # a read-only disk costs a re-embed next time, nothing more
                logger.warning("could not write the tool vector cache: %s", exc)
        logger.debug(
            "tool index built: %d tools, dim %d, %d embedded, %d from cache",
            len(names),
            index.dim,
            len(missing),
            len(set(digests)) - len(missing),
        )
        return index

    @staticmethod
    async def _embed_documents(embedder: Embedder, texts: list[str], dim: int | None) -> Matrix:
        try:
            raw = await embedder.embed_batch(texts, task="document")
        except EmbeddingError as exc:
            raise IndexBuildError(f"embedding the tool texts failed: {exc}") from exc
        except Exception as exc:  # an embedder that breaks its contract still must not leak
            raise IndexBuildError(f"embedder raised {describe_error(exc)}") from exc
        try:
            return to_unit_rows(raw, expected_count=len(texts), expected_dim=dim, source=str(embedder.name))
        except EmbeddingError as exc:
            raise IndexBuildError(f"embedder returned unusable vectors: {exc}") from exc

    # --- introspection --------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    @property
    def dim(self) -> int:
        return int(self._matrix.shape[1])

    @property
    def matrix(self) -> Matrix:
        """The read-only n × dim matrix of unit rows."""
        return self._matrix

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    @property
    def query_cache(self) -> QueryCache:
        return self._query_cache

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"ToolIndex(n={len(self)}, dim={self.dim}, embedder={self._embedder!r})"

    # --- ranking --------------------------------------------------------------------

    def _candidate_rows(self, allowlist: Collection[str] | None) -> np.ndarray:
        if allowlist is None:
            return self._all_rows
        key = allowlist if isinstance(allowlist, frozenset) else frozenset(allowlist)
        rows = self._allow_rows.get(key)
        if rows is None:
            rows = np.array(sorted(self._row_of[n] for n in key if n in self._row_of), dtype=np.intp)
            if len(self._allow_rows) >= _MAX_ALLOWLISTS:
                self._allow_rows.clear()  # a handful of contexts in practice; stay bounded
            self._allow_rows[key] = rows
        return rows

    def rank(
        self,
        query_vec: Vector | Sequence[float],
        *,
        top_k: int = 6,
        min_score: float = 0.0,
        allowlist: Collection[str] | None = None,
    ) -> list[ToolMatch]:
        """Score every allowed tool against ``query_vec`` (normalised here) and rank.

        Raises ``ValueError`` if the query has the wrong length or non-finite values.
        """
        if not self._names:
            return []
        return self._rank_unit(unit_vector(query_vec, dim=self.dim), top_k, min_score, allowlist)

    def _rank_unit(
        self, query: Vector, top_k: int, min_score: float, allowlist: Collection[str] | None
    ) -> list[ToolMatch]:
        """``rank`` of a query already a unit float32 vector of the index's length (what
        ``embed_query`` returns: normalising it again was a third pass over it per run)."""
        rows = self._candidate_rows(allowlist)
        if rows.size == 0:
            return []
        scores = self._matrix @ query
        if rows is not self._all_rows:
            scores = scores[rows]
        if min_score > 0:
            keep = scores >= min_score
            scores, rows = scores[keep], rows[keep]
        m = int(scores.size)
        if m == 0:
            return []
        k = m if top_k <= 0 or top_k >= m else top_k
        if k < m and m >= _PARTITION_MIN:
            kth = scores[np.argpartition(scores, m - k)[m - k]]
            pick = np.flatnonzero(scores >= kth - _TIE_EPS)  # keep boundary ties for the name rule
            scores, rows = scores[pick], rows[pick]
        rounded = np.round(scores.astype(np.float64), _SCORE_DECIMALS)
        order = np.lexsort((self._name_rank[rows], -rounded))[:k]
        names = self._names
        return [ToolMatch(names[r], s) for r, s in zip(rows[order].tolist(), rounded[order].tolist(), strict=True)]

    # --- search ---------------------------------------------------------------------

    async def embed_query(self, query: str) -> tuple[Vector, bool]:
        """The query's unit vector through the LRU; returns ``(vector, was_cached)``."""
        embedder = self._embedder
        if embedder is None:
            raise EmbeddingError("this index has no embedder to embed queries with")
        text = query[: embedder.max_chars] if embedder.max_chars > 0 else query
        key = QueryCache.key(EmbeddingSpace.of(embedder), "query", text)
        cached = self._query_cache.get(key)
        if cached is not None:
            return cached, True
        try:
            raw = await embedder.embed(text, task="query")
        except EmbeddingError:
            raise
        except Exception as exc:  # keep the one-exception contract even for a broken embedder
            raise EmbeddingError(f"embedder raised {describe_error(exc)}") from exc
        [vector] = to_unit_rows(
            np.asarray(raw).reshape(1, -1), expected_count=1, expected_dim=self.dim or None, source=str(embedder.name)
        )
        self._query_cache.put(key, vector)
        return vector, False

    async def search(
        self,
        query: str,
        *,
        top_k: int = 6,
        min_score: float = 0.0,
        allowlist: Collection[str] | None = None,
    ) -> SearchResult:
        """Embed ``query`` (task "query") and rank; raises only ``EmbeddingError``.

        Ranking runs inline when the matrix is small and in a worker thread when
        ``len × dim`` exceeds the offload threshold, so the event loop never stalls.
        """
        started = time.perf_counter()
        if not self._names:
            return SearchResult([], 0.0, 0.0)
        try:
            vector, was_cached = await self.embed_query(query)
        except EmbeddingError:
            raise
        except (ValueError, TypeError) as exc:  # e.g. a vector that does not reshape
            raise EmbeddingError(f"query embedding unusable: {exc}") from exc
        embedded = time.perf_counter()
        if vector.shape != (self.dim,):  # an index built without a dimension check: rank() says why
            matches = self.rank(vector, top_k=top_k, min_score=min_score, allowlist=allowlist)
        elif self._matrix.size >= self._offload_elements:
            matches = await asyncio.to_thread(self._rank_unit, vector, top_k, min_score, allowlist)
        else:
            matches = self._rank_unit(vector, top_k, min_score, allowlist)
        ranked = time.perf_counter()
        return SearchResult(
            matches=matches,
            embed_ms=(embedded - started) * 1000.0,
            rank_ms=(ranked - embedded) * 1000.0,
            query_cached=was_cached,
        )
