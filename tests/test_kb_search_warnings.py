"""``knowledge_base_search`` says when its search fell back (no silent degradation): an
embedder that fails at query time leaves a text-ranked result, and the tool result the
model and the stream see carries the knowledge base's warning, as the corpus tools do."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.tools import KB_SEARCH, RagToolDeps, register_rag_tools
from knowledge import DocumentIn, KnowledgeBase
from storage.sqlite import open_sqlite_storage
from toolindex.embedder import EmbeddingError, EmbedTask, Matrix, Vector
from toolindex.hashing import HashingEmbedder


class BreakableEmbedder(HashingEmbedder):
    """The hashing embedder, until ``broken`` is set: then every call fails as a
    remote embedder does when its server is down."""

    broken = False

    async def embed(self, text: str, *, task: EmbedTask = "query") -> Vector:
        if self.broken:
            raise EmbeddingError("connection refused")
        return await super().embed(text, task=task)

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        if self.broken:
            raise EmbeddingError("connection refused")
        return await super().embed_batch(texts, task=task)


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[tuple[ToolRegistry, BreakableEmbedder]]:
    storage = await open_sqlite_storage(tmp_path / "agent.db")
    embedder = BreakableEmbedder()
    kb = await KnowledgeBase.create(storage.kb_index, embedder)
    try:
        doc = DocumentIn("Resume a stream by sending the Last-Event-ID header.", "Resume", "resume")
        assert (await kb.ingest_documents([doc])).added == 1
        registry = ToolRegistry(build_catalog())
        register_rag_tools(
            registry,
            RagToolDeps(kb, KeywordIndex(storage.keywords, storage.external_results), storage.external_results),
        )
        yield registry, embedder
    finally:
        await kb.aclose()
        await storage.close()


async def test_a_search_ranked_by_text_after_the_embedder_failed_says_so(
    setup: tuple[ToolRegistry, BreakableEmbedder],
) -> None:
    registry, embedder = setup
    handler = registry.handler(KB_SEARCH)
    assert handler is not None
    async with httpx.AsyncClient() as http:
        ctx = ToolContext("u1", None, "c1", "r1", "knowledge", {}, http, RunToolState())
        healthy = await handler({"query": "resume a stream after a disconnect"}, ctx)
        assert healthy.content["chunks"] and "warnings" not in healthy.content
        embedder.broken = True
        degraded = await handler({"query": "how do I resume the stream with last-event-id"}, ctx)
    assert not degraded.is_error and degraded.content["chunks"]  # still answered, by text
    (warning,) = degraded.content["warnings"]
    assert "embedder failed" in warning and "text" in warning
    assert list(degraded.content)[:3] == ["query_id", "kb_id", "warnings"]  # before the chunks
