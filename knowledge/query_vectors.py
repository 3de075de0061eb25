"""A search's query as a unit vector of the knowledge base's vector space, cached.

One job, apart from the ranking that uses it (``knowledge.search``): ask the embedder
for the query's vector (cut to what the embedder reads, ``task="query"``), refuse one
whose size is not the stored vectors' (an embedder swapped under a stored KB would
otherwise rank by garbage), normalise it so a dot product is a cosine, and keep the last
``KBConfig.query_cache`` of them: an agent repeats its queries (a retry, the relaxed
search, another index in the same vector space through ``KnowledgeBase.embed_query``),
and each embedding is a model call.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from knowledge.dense import DenseSide
from toolindex.embedder import Embedder, EmbeddingError


class QueryVectors:
    """The query vectors of the search over ``dense`` (whose ``dim`` they must have)."""

    def __init__(self, embedder: Embedder | None, dense: DenseSide, cache_size: int) -> None:
        self._embedder = embedder
        self._dense = dense
        self._cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()

    async def embed(self, query: str) -> np.ndarray:
        """``query``'s unit vector (cached, least recently used dropped first). Raises
        ``EmbeddingError`` when the embedder fails, answers another size than the stored
        vectors', or there is no embedder."""
        if self._embedder is None:
            raise EmbeddingError("the knowledge base has no embedder")
        cached = self._cache.get(query)
        if cached is not None:
            self._cache.move_to_end(query)
            return cached
        vec = np.asarray(await self._embedder.embed(query[: self._embedder.max_chars], task="query"), np.float32)
        vec = vec.reshape(-1)
        if vec.shape[0] != self._dense.dim:
            raise EmbeddingError(f"query vector has {vec.shape[0]} dimensions, index has {self._dense.dim}")
        norm = float(np.linalg.norm(vec))
        vec = vec / norm if norm > 0 else vec
        self._cache[query] = vec
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return vec


__all__ = ["QueryVectors"]
