"""The re-embedding in the background (``knowledge.backfill``) on a real SQLite
knowledge base: documents stored while the embedder failed, or embedded by another
embedder, get vectors of the current one by themselves; a document re-ingested while
its batch was being embedded keeps what its ingest wrote. The HTTP face (202, /readyz,
/metrics) and a real server process are in ``tests/test_default_configs.py`` and
``tests/test_kb_reembed_process.py``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from app.cli.kb_file import open_kb_file
from knowledge import KnowledgeBase
from knowledge.types import KBConfig
from tests.support.deadline import within
from tests.support.procs import until
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder

DOCS = [
    {"id": "kiwi", "title": "Kiwi", "text": "Kiwi birds cannot fly and live in New Zealand forests."},
    {"id": "penguin", "title": "Penguin", "text": "Penguins swim in cold southern oceans and eat krill."},
    {"id": "ostrich", "title": "Ostrich", "text": "Ostriches run fast across the African savanna."},
]


class FlakyEmbedder(HashingEmbedder):
    """The real hashing embedder, except that document embedding fails while ``broken``."""

    def __init__(self, dim: int = 128) -> None:
        super().__init__(dim=dim)
        self.broken = True
        self.calls = 0

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
        self.calls += 1
        if self.broken:
            raise EmbeddingError("upstream 503")
        return await super().embed_batch(texts, task=task)  # type: ignore[arg-type]


async def fast_kb(path: Path, embedder: HashingEmbedder) -> KnowledgeBase:
    kb = await open_kb_file(path, embedder)
    # The backoff and batch size are what this test is about; small so it runs quickly.
    kb.backfill._config = KBConfig(reembed_batch_documents=2, reembed_backoff_min_s=0.05, reembed_backoff_max_s=0.2)
    return kb


async def test_documents_stored_while_the_embedder_fails_get_vectors_once_it_answers(tmp_path: Path) -> None:
    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    try:
        kb.backfill.start()
        report = await kb.ingest_documents(DOCS)
        assert (report.added, report.queued_for_embedding) == (3, 3) and not report.rejected
        # Stored and found by text now; a search by meaning says what it cannot see.
        assert (await kb.search("kiwi birds", mode="text")).hits[0].doc_id == "kiwi"
        await until(lambda: kb.backfill.state == "waiting to retry", "a failed pass", 10)
        assert kb.backfill.pending == 3 and "upstream 503" in str(kb.backfill.status().get("last_error"))
        calls = emb.calls
        await until(lambda: emb.calls >= calls + 2, "retries while the embedder fails", 10)

        emb.broken = False
        # The pass's last batch takes pending to 0 and the pass then counts again before it
        # ends and the state turns idle: wait for its end, not the count.
        await until(lambda: kb.backfill.pending == 0 and kb.backfill.state == "idle", "the documents re-embedded", 10)
        assert kb.backfill.reembedded == 3 and kb.backfill.state == "idle"
        stats = await kb.status.stats()
        assert stats["vectors"] == 3 and stats["documents_without_current_vectors"] == 0
        found = await kb.search("flightless bird of New Zealand forests", mode="semantic")
        assert found.mode == "semantic" and found.hits[0].doc_id == "kiwi" and not found.warnings
        # The matrix in memory was filled without a restart, and a restart reads the same.
        reopened = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=128))
        try:
            assert (await reopened.status.stats())["vectors"] == 3
        finally:
            await reopened.aclose()
    finally:
        await kb.aclose()


async def test_a_semantic_search_names_the_documents_it_cannot_see(tmp_path: Path) -> None:
    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    try:
        emb.broken = False
        await kb.ingest_documents(DOCS[:1])
        emb.broken = True
        await kb.ingest_documents(DOCS[1:])  # queued; the backfill is not running here
        emb.broken = False
        result = await kb.search("penguins in cold oceans", mode="semantic")
        assert result.mode == "semantic"
        assert any("2 document(s) have no vectors yet" in w for w in result.warnings), result.warnings
        assert await kb.backfill.run_pass() == 2
        result = await kb.search("penguins in cold oceans", mode="semantic")
        assert result.hits[0].doc_id == "penguin" and not result.warnings
    finally:
        await kb.aclose()


async def test_vectors_of_another_embedder_are_replaced_on_start(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    old = await open_kb_file(path, HashingEmbedder(dim=64))
    await old.ingest_documents(DOCS)
    await old.aclose()

    kb = await fast_kb(path, HashingEmbedder(dim=128))
    try:
        assert (await kb.status.stats())["documents_without_current_vectors"] == 3
        kb.backfill.start()
        await until(lambda: kb.backfill.reembedded == 3 and kb.backfill.state == "idle", "the start-up pass", 10)
        stats = await kb.status.stats()
        assert (stats["vectors"], stats["documents_without_current_vectors"]) == (3, 0)
        assert (await kb.get_document("ostrich") or {})["embedding_dim"] == 128
    finally:
        await kb.aclose()


async def test_a_document_re_ingested_while_its_batch_is_embedded_keeps_its_ingest(tmp_path: Path) -> None:
    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    try:
        await kb.ingest_documents(DOCS[:1])
        emb.broken = False
        gate = asyncio.Event()
        entered = asyncio.Event()
        real = HashingEmbedder.embed_batch

        async def held(self: HashingEmbedder, texts: list[str], *, task: str = "document") -> np.ndarray:
            if "New Zealand forests" in texts[0]:
                entered.set()
                await gate.wait()
            return await real(self, texts, task=task)  # type: ignore[arg-type]

        emb.embed_batch = held.__get__(emb)  # type: ignore[method-assign]
        passing = asyncio.create_task(kb.backfill.run_pass())
        await within(entered.wait(), "the backfill pass to embed the old text")
        changed = dict(DOCS[0], text="Kiwi birds are nocturnal and sniff out insects with nostrils at the beak tip.")
        report = await kb.ingest_documents([changed])  # while the pass embeds the old text
        assert report.updated == 1 and report.queued_for_embedding == 0
        gate.set()
        assert await passing == 0  # its vectors were for chunks that are gone: not stored
        found = await kb.search("nocturnal insects nostrils", mode="semantic")
        assert found.hits and found.hits[0].doc_id == "kiwi"
        assert (await kb.status.stats())["vectors"] == 1  # the ingest's chunk only, never the stale one too
    finally:
        await kb.aclose()


async def test_readiness_fails_only_while_the_embedder_fails_the_waiting_documents(tmp_path: Path) -> None:
    """Documents waiting for vectors are always shown; the replica leaves service only
    while the re-embedding cannot progress (a model change on a large corpus would
    otherwise keep it out of service for hours while text search works)."""
    from app.rooms import KnowledgeComponent

    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    room = KnowledgeComponent(kb)
    try:
        await kb.ingest_documents(DOCS)  # stored, the embedder failing: queued
        waiting = await room.readiness()
        assert waiting["pending_vectors"] == 3 and waiting["ok"] is True and "wait for vectors" in waiting["detail"]
        kb.backfill.start()
        await until(lambda: kb.backfill.failures > 0, "a failed pass", 10)
        stalled = await room.readiness()
        assert stalled["ok"] is False and "the embedder failed: upstream 503" in stalled["detail"], stalled
        emb.broken = False
        await until(lambda: kb.backfill.pending == 0, "the documents re-embedded", 10)
        ready = await room.readiness()
        assert ready["ok"] is True and ready["pending_vectors"] == 0 and "detail" not in ready
    finally:
        await kb.aclose()


async def test_a_close_stops_the_loop_even_when_its_cancel_lands_with_a_wake_up(tmp_path: Path) -> None:
    """An ingest's wake-up and the close's cancel in the same turn of the loop: Python
    3.11's ``asyncio.wait_for`` (the loop's wait for a wake-up) returns and the cancel is
    lost. The loop stops anyway and the close returns (it used to wait for ever)."""
    kb = await fast_kb(tmp_path / "kb.db", HashingEmbedder(dim=128))
    try:
        kb.backfill._config = KBConfig(reembed_interval_s=3600)
        kb.backfill.start()
        await until(lambda: kb.backfill.state == "idle", "the first pass", 10)  # now waiting for a wake-up
        kb.backfill.wake()
        closing = asyncio.create_task(kb.backfill.aclose())
        done, _ = await asyncio.wait({closing}, timeout=10)  # not wait_for: its cancel would stop the loop
        try:
            assert closing in done, "the close waits for a loop whose cancel was lost"
            assert closing.result() is None and kb.backfill.state == "stopped"
        finally:
            closing.cancel()
    finally:
        await kb.aclose()


class PoolLikeVectorWrites:
    """The real KB index, its ``store_vectors`` behind a wait the test answers through
    ``asyncio.wait_for`` - as psycopg's pool hands out a connection: the answer can land
    with the close's cancel, which Python 3.11's ``wait_for`` then loses mid-pass."""

    def __init__(self, index: object) -> None:
        self._inner = index
        self.asked: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)

    async def store_vectors(self, *args: object, **kwargs: object) -> object:
        connection: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.asked.put_nowait(connection)
        await asyncio.wait_for(connection, 60)
        return await self._inner.store_vectors(*args, **kwargs)  # type: ignore[attr-defined]


async def test_a_close_whose_cancel_a_pass_swallowed_starts_no_further_batch(tmp_path: Path) -> None:
    """Six documents to re-embed, two a batch; the first batch's write gets its connection
    in the same turn as the close: the pass stops at its next batch and the close returns
    (the pass used to go on through every batch, the close waiting its 15 s)."""
    emb = FlakyEmbedder()
    kb = await fast_kb(tmp_path / "kb.db", emb)
    answering: asyncio.Task[None] | None = None
    try:
        docs = [{"id": f"d{i}", "title": f"Doc {i}", "text": f"document {i} about topic {i}"} for i in range(6)]
        assert (await kb.ingest_documents(docs)).queued_for_embedding == 6
        emb.broken = False
        writes = PoolLikeVectorWrites(kb.backfill._index)
        kb.backfill._index = writes  # type: ignore[assignment]
        kb.backfill.start()
        connection = await within(writes.asked.get(), "the first batch's write", 10)
        connection.set_result(None)  # the write's connection...
        closing = asyncio.create_task(kb.backfill.aclose())  # ...and the close, in the same turn
        after_close: list[asyncio.Future[None]] = []

        async def answer() -> None:  # a further batch would find its connection
            while True:
                asked = await writes.asked.get()
                after_close.append(asked)
                asked.set_result(None)

        answering = asyncio.create_task(answer())
        done, _ = await asyncio.wait({closing}, timeout=10)  # not wait_for: its cancel would end the pass
        try:
            assert closing in done, "the close waits for a pass that goes on through its batches"
            assert after_close == [], f"{len(after_close)} batches started after the close"
        finally:
            closing.cancel()
    finally:
        if answering is not None:
            answering.cancel()
        await kb.aclose()
