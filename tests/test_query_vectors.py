"""A search's query vector (``knowledge.query_vectors``), read through the knowledge base's
face (``KnowledgeBase.embed_query``, what ``search`` uses): embedded once while cached, the
least recently used dropped past ``KBConfig.query_cache``, a unit vector, and refused
loudly when there is no embedder or it answers another size than the stored vectors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge import KBConfig, KnowledgeBase
from toolindex.embedder import EmbeddingError, EmbedTask, Vector
from toolindex.hashing import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the query texts it was asked to embed; ``dim_out``
    makes it answer vectors of another size than the one it announced."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim=dim)
        self.asked: list[str] = []
        self.dim_out = dim

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        self.asked.append(text)
        vector = await super().embed(text, task=task)
        return vector if self.dim_out == self.dim else np.ones(self.dim_out, np.float32)


@pytest.fixture
async def counted(tmp_path: Path) -> AsyncIterator[tuple[KnowledgeBase, CountingEmbedder]]:
    embedder = CountingEmbedder(dim=64)
    kb = await open_kb_file(tmp_path / "kb.db", embedder, config=KBConfig(query_cache=2))
    try:
        yield kb, embedder
    finally:
        await kb.aclose()


async def test_a_repeated_query_is_embedded_once_as_a_unit_vector(
    counted: tuple[KnowledgeBase, CountingEmbedder],
) -> None:
    kb, embedder = counted
    first = await kb.embed_query("otters and shellfish")
    again = await kb.embed_query("otters and shellfish")
    assert embedder.asked == ["otters and shellfish"]
    assert again is first
    assert first.shape == (64,)
    assert float(np.linalg.norm(first)) == pytest.approx(1.0, abs=1e-5)


async def test_the_least_recently_used_query_leaves_the_cache_first(
    counted: tuple[KnowledgeBase, CountingEmbedder],
) -> None:
    kb, embedder = counted
    for query in ("a", "b", "a", "c"):  # "a" used again before "c": "b" is the one dropped
        await kb.embed_query(query)
    await kb.embed_query("a")
    await kb.embed_query("b")
    assert embedder.asked == ["a", "b", "c", "b"]


async def test_a_vector_of_another_size_is_refused_and_not_cached(
    counted: tuple[KnowledgeBase, CountingEmbedder],
) -> None:
    kb, embedder = counted
    embedder.dim_out = 32
    with pytest.raises(EmbeddingError, match="query vector has 32 dimensions, index has 64"):
        await kb.embed_query("herons")
    embedder.dim_out = 64
    vector = await kb.embed_query("herons")
    assert vector.shape == (64,)
    assert embedder.asked == ["herons", "herons"]


async def test_without_an_embedder_there_is_no_query_vector(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", None)
    try:
        with pytest.raises(EmbeddingError, match="no embedder"):
            await kb.embed_query("beavers")
    finally:
        await kb.aclose()
