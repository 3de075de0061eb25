"""The parts of a knowledge base sized or keyed by its embedder, built together.

Why apart from ``knowledge.kb``: the dense side (as wide as the embedder's dimension,
its rows those stored under the embedder's key), ingest, search and the re-embedding all
take the embedder, and ``KnowledgeBase`` builds them twice: at construction, and again
when an embedder found after start-up is adopted (``KnowledgeBase.adopt_embedder``) -
then the new dense side is loaded before anything switches to it, and the counters
``/metrics`` reads off the search carry over from the old one.
"""

from __future__ import annotations

from dataclasses import dataclass

from knowledge.backfill import VectorBackfill
from knowledge.buckets import Buckets
from knowledge.dense import DenseSide, dense_side
from knowledge.ingest import Ingestor
from knowledge.search import Searcher
from knowledge.types import KBConfig
from storage.interfaces import KBIndex
from toolindex.embedder import Embedder
from toolindex.probe import probe_embedder


@dataclass(slots=True)
class EmbedderParts:
    """One embedder's (or none's) dense side, ingest, search and re-embedding."""

    embedder: Embedder | None
    vectors: DenseSide
    ingest: Ingestor
    search: Searcher
    backfill: VectorBackfill


def embedder_parts(
    index: KBIndex, buckets: Buckets, embedder: Embedder | None, config: KBConfig, dense: DenseSide | None = None
) -> EmbedderParts:
    """The parts on ``dense`` (loaded already), or on a new dense side ``load`` fills."""
    vectors = dense if dense is not None else _dense_side(index, embedder, config)
    return EmbedderParts(
        embedder,
        vectors,
        Ingestor(index, buckets, vectors, embedder, config),
        Searcher(index, buckets, vectors, embedder, config),
        VectorBackfill(index, vectors, embedder, config),
    )


async def adopted_parts(
    index: KBIndex, buckets: Buckets, embedder: Embedder, config: KBConfig, old_search: Searcher
) -> EmbedderParts:
    """The parts of an embedder found late: probed if its dimension is not known yet, its
    dense side loaded, the old search's ``/metrics`` counters carried over. Nothing
    awaits between the carrying and the caller's switch to them."""
    if embedder.dim <= 0:
        await probe_embedder(embedder)
    dense = _dense_side(index, embedder, config)
    await dense.load()
    parts = embedder_parts(index, buckets, embedder, config, dense)
    parts.search.text_fallbacks, parts.search.fusion_drops = old_search.text_fallbacks, old_search.fusion_drops
    return parts


def _dense_side(index: KBIndex, embedder: Embedder | None, config: KBConfig) -> DenseSide:
    return dense_side(
        index,
        f"{embedder.name}:{embedder.model}" if embedder else None,  # as ``Ingestor`` stores it
        embedder.dim if embedder else 1,
        executor_rows=config.executor_rows,
        count_stop_s=config.unreadable_count_stop_s,
    )


__all__ = ["EmbedderParts", "adopted_parts", "embedder_parts"]
