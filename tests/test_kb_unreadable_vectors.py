"""A stored chunk vector the load cannot read (the wrong length, or none for a chunk of
an embedded document: a partial write, a copy from another embedder) on a real SQLite
knowledge base: it used to be skipped without a word, its document still marked as
embedded, so no search by meaning could ever find that chunk and nothing re-embedded it.
Now it is counted (``/readyz``'s ``semantic_search.index``, ``/metrics``, a search's
``warnings``) and its document is re-embedded by the background pass."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge.kb import KnowledgeBase
from storage.kb_records import KBUnembedded
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder

DOCS = [
    {"id": "kiwi", "title": "Kiwi", "text": "Kiwi birds cannot fly and live in New Zealand forests."},
    {"id": "penguin", "title": "Penguin", "text": "Penguins swim in cold southern oceans and eat krill."},
    {"id": "ostrich", "title": "Ostrich", "text": "Ostriches run fast across the African savanna."},
]


def _cut_vector(path: Path, doc_id: str) -> None:
    """Cut the stored vector of ``doc_id``'s chunk to half its length, as a torn write would."""
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kb_chunks SET vector = substr(vector, 1, length(vector) / 2) WHERE doc_id = ?", (doc_id,))


async def _opened_with_penguin_torn(path: Path) -> KnowledgeBase:
    """``DOCS`` ingested into a new file, penguin's vector torn (``_cut_vector``) while the
    file is closed, then the file opened again: the load finds one unreadable vector."""
    kb = await open_kb_file(path, HashingEmbedder(dim=128))
    await kb.ingest_documents(DOCS)
    await kb.aclose()
    await asyncio.to_thread(_cut_vector, path, "penguin")
    return await open_kb_file(path, HashingEmbedder(dim=128))


async def test_a_vector_of_the_wrong_length_is_counted_and_its_document_re_embedded(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    kb = await _opened_with_penguin_torn(path)
    try:
        index = (await kb.status.semantic())["index"]
        assert (index["unreadable_vectors"], index["unreadable_documents"]) == (1, 1), index
        assert kb.status.unreadable_vectors == 1
        found = await kb.search("penguins in cold southern oceans", mode="semantic")
        assert "penguin" not in [h.doc_id for h in found.hits]
        assert any("1 chunk(s) of 1 document(s) have stored vectors that could not be read" in w
                   for w in found.warnings), found.warnings

        # The background pass routes the document to re-embedding, like one without vectors.
        assert await kb.backfill.run_pass() == 1
        assert kb.status.unreadable_vectors == 0 and kb.backfill.pending == 0
        assert (await kb.status.semantic())["index"]["unreadable_vectors"] == 0
        found = await kb.search("penguins in cold southern oceans", mode="semantic")
        assert found.hits[0].doc_id == "penguin" and not found.warnings
        assert (await kb.status.stats())["vectors"] == 3
    finally:
        await kb.aclose()

    reopened = await open_kb_file(path, HashingEmbedder(dim=128))
    try:  # the repair was stored: a restart reads every vector
        assert (await reopened.status.stats())["vectors"] == 3 and reopened.status.unreadable_vectors == 0
    finally:
        await reopened.aclose()


async def test_a_document_re_ingested_elsewhere_since_the_load_is_not_re_embedded(tmp_path: Path) -> None:
    """The pass marks what this process's matrix read as unreadable, and that may be old:
    another process (the CLI, a sibling worker) re-ingested the document since, with
    readable vectors. Marking it threw them away - re-embedded for nothing, and out of
    every other process's search by meaning meanwhile. The mark checks the stored
    vectors themselves."""
    path = tmp_path / "kb.db"
    kb = await _opened_with_penguin_torn(path)
    try:
        assert kb.status.unreadable_vectors == 1
        elsewhere = await open_kb_file(path, HashingEmbedder(dim=128))
        try:
            report = await elsewhere.ingest_documents(
                [{"id": "penguin", "title": "Penguin", "text": "Penguins dive for krill under the Antarctic ice."}]
            )
            assert report.updated == 1, report
        finally:
            await elsewhere.aclose()
        assert kb.status.unreadable_vectors == 1  # this process has not looked since

        assert await kb.backfill.run_pass() == 0
        assert kb.backfill.reembedded == 0
        stored = await kb.get_document("penguin")
        assert stored is not None and stored["embedding_model"] == kb.embed_key, stored
        found = await kb.search("penguins dive for krill under the ice", mode="semantic")  # takes the change in
        assert found.hits[0].doc_id == "penguin" and not found.warnings, found.warnings
        assert kb.status.unreadable_vectors == 0
    finally:
        await kb.aclose()


async def test_a_document_replaced_here_while_its_mark_is_written_does_not_fail_the_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass read the dense side's own count of unreadable chunks across its awaits: a
    delete or an ingest of this process that lands meanwhile takes the document out of
    that count, and the pass failed on a KeyError - 'waiting to retry', its backoff, a
    WARNING that re-embedding failed. Here the real delete runs inside the pass's read
    of the store."""
    path = tmp_path / "kb.db"
    kb = await _opened_with_penguin_torn(path)
    try:
        read = kb.index.documents_with_unreadable_vectors

        async def deleted_meanwhile(embed_model: str, embed_dim: int, doc_ids: Sequence[str]) -> list[KBUnembedded]:
            assert await kb.delete_documents(["penguin"]) == 1
            return await read(embed_model, embed_dim, doc_ids)

        monkeypatch.setattr(kb.index, "documents_with_unreadable_vectors", deleted_meanwhile)
        assert await kb.backfill.run_pass() == 0
        assert kb.status.unreadable_vectors == 0 and kb.backfill.pending == 0
    finally:
        await kb.aclose()


class DownEmbedder(HashingEmbedder):
    """The real hashing embedder, whose document embedding fails (the server is down)."""

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
        raise EmbeddingError("upstream 503")


async def test_the_readable_chunks_stay_searched_elsewhere_while_the_embedder_is_down(tmp_path: Path) -> None:
    """A document with one torn vector among six: the pass marked it as without vectors
    before embedding it, so every other process (a sibling worker, once it took the
    change in) lost its five readable chunks from every search by meaning - with no
    warning there (only the leader counts pending documents) - for as long as the
    embedder stayed down. Now nothing is written until the embedding is done."""
    path = tmp_path / "kb.db"
    text = "\n\n".join(
        ["Kiwi birds cannot fly and live in New Zealand forests. " * 40,
         "Penguins swim in cold southern oceans and eat krill. " * 40]
    )
    kb = await open_kb_file(path, HashingEmbedder(dim=128))
    await kb.ingest_documents([{"id": "birds", "title": "Birds", "text": text}, DOCS[2]])
    await kb.aclose()
    with sqlite3.connect(path) as conn:  # one chunk's vector torn
        conn.execute("UPDATE kb_chunks SET vector = substr(vector, 1, 8)"
                     " WHERE id = (SELECT min(id) FROM kb_chunks WHERE doc_id = 'birds')")

    sibling = await open_kb_file(path, HashingEmbedder(dim=128))
    leader = await open_kb_file(path, DownEmbedder(dim=128))
    try:
        question = "penguins swim in cold southern oceans and eat krill"
        assert (await sibling.search(question, mode="semantic")).hits[0].doc_id == "birds"
        with pytest.raises(EmbeddingError):
            await leader.backfill.run_pass()
        found = await sibling.search(question, mode="semantic")
        assert found.hits and found.hits[0].doc_id == "birds", [h.doc_id for h in found.hits]
        assert leader.status.unreadable_vectors == 1  # still counted, still to repair
    finally:
        await leader.aclose()
        await sibling.aclose()
