"""The re-ranker's cosines (``DenseSide.cosines``) come from vectors of the searching
embedder only, on both engines - never from another embedder's vectors of the same width.

A document keeps vectors of another embedder until the service's re-embedding replaces
them (an embedder changed on purpose - Gemini and Ollama's nomic-embed-text are both 768
wide -, or ``agentchat ingest`` under ``AUTO`` fallen back to the hashing embedder beside
a service on the local one, both 384: ``knowledge.ingest_docs.keeps_vectors``). The
in-memory matrix (SQLite) holds only the searching embedder's vectors, so those chunks
have no cosine; PostgreSQL's ``cosines`` read any stored vector of the query's width, so
the re-ranker scored text hits by the similarity of the query to vectors of another model
(``knowledge.rerank_score``: relevance is the larger of term coverage and that cosine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.cli.kb_file import open_kb_file
from tests.fakes import FakeOllama, running_fake
from toolindex.hashing import HashingEmbedder
from toolindex.ollama import OllamaEmbedder

DIM = 48


async def test_cosines_leave_out_vectors_of_another_embedder_of_the_same_width(target: str, tmp_path: Path) -> None:
    d = tmp_path / "manual"
    d.mkdir()
    (d / "install.md").write_text("# Install\n\nRun the installer, then restart the shell.\n")
    fake = FakeOllama(embed_dim=DIM)
    async with running_fake(fake.app) as base_url:
        kb = await open_kb_file(target, OllamaEmbedder(base_url, "nomic-embed-text", dim=DIM))
        try:
            assert (await kb.ingest_paths([d])).added == 1
        finally:
            await kb.aclose()

    kb = await open_kb_file(target, HashingEmbedder(dim=DIM))  # another embedder, the same width
    try:
        assert kb.embedder is not None and kb.embed_key is not None
        docs = await kb.index.documents_without_vectors(kb.embed_key, DIM, limit=10)
        chunk_ids = [c.id for doc in docs for c in doc.chunks]
        assert chunk_ids, "the document holds Ollama's vectors, not the hashing embedder's"
        query = await kb.embedder.embed("restart the shell")
        dense: Any = kb._vectors
        assert await dense.cosines(chunk_ids, query) == {}  # before, on PostgreSQL: a cosine per chunk

        assert await kb.backfill.run_pass() == 1  # re-embedded: now they are this embedder's
        assert set(await dense.cosines(chunk_ids, query)) == set(chunk_ids)
    finally:
        await kb.aclose()
