"""Ingestion's stages overlap (issue 24 item 4): embedding requests of a batch run
concurrently, the next batch is read, chunked and embedded while a batch is written,
progress keeps coming while a write is slow, and a failed write is raised, not lost."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from app.cli.kb_file import open_kb_file
from knowledge.ingest_stages import EMBED_CONCURRENCY, embed_texts
from knowledge.types import KBConfig
from storage.kb_records import KBDocumentWrite
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder

#: Guards against a hang only: every wait below ends as soon as its condition holds.
GUARD_S = 60


class GatedEmbedder(HashingEmbedder):
    """The real hashing embedder, holding each request until ``wanted`` are in flight
    (``reached`` is set then), so a test sees whether requests overlap."""

    def __init__(self, wanted: int) -> None:
        super().__init__(dim=32)
        self.wanted = wanted
        self.in_flight = 0
        self.most = 0
        self.reached = asyncio.Event()

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.in_flight >= self.wanted:
                self.reached.set()
            await asyncio.wait_for(self.reached.wait(), GUARD_S)
            return await super().embed_batch(texts, task="document")
        finally:
            self.in_flight -= 1


async def test_embedding_requests_overlap_and_rows_keep_their_order() -> None:
    texts = [f"text number {i} about kiwis and {i % 7} puffins" for i in range(40)]
    gated = GatedEmbedder(wanted=EMBED_CONCURRENCY)
    heard: list[tuple[int, int]] = []
    matrix = await embed_texts(gated, texts, 4, lambda k, n: heard.append((k, n)))
    assert gated.most == EMBED_CONCURRENCY  # several at once, never more than the limit
    expected = await HashingEmbedder(dim=32).embed_batch(texts)
    assert np.array_equal(matrix, np.asarray(expected, np.float32))
    assert [k for k, _ in heard] == sorted(k for k, _ in heard) and heard[-1] == (40, 40)


async def test_a_failing_request_fails_the_batch_and_stops_the_others() -> None:
    started: list[int] = []
    cancelled: list[int] = []

    class Failing(HashingEmbedder):
        async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
            k = len(started)
            started.append(k)
            if k == 0:
                raise EmbeddingError("upstream 503")
            try:
                await asyncio.Event().wait()  # would never answer: must be cancelled
            except asyncio.CancelledError:
                cancelled.append(k)
                raise
            raise AssertionError("unreachable")

    texts = [f"t{i}" for i in range(12)]
    try:
        await embed_texts(Failing(dim=16), texts, 2, concurrency=3)
    except EmbeddingError as exc:
        assert "503" in str(exc)
    else:
        raise AssertionError("the failure was lost")
    # No request is left waiting, and the six requests were not all made.
    assert cancelled == started[1:] and len(started) < 6


def _write_docs(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (root / f"p{i:02d}.md").write_text(f"# Page {i}\n\nWords about topic {i}: kiwis, puffins and gannets.\n")


async def test_the_next_batch_is_prepared_while_a_batch_is_written(tmp_path: Path) -> None:
    """The first write is held until the embedder was asked for a later batch's chunks
    and progress heard of files past the first batch: the stages overlap. Nothing is
    lost: every document is stored and counted once."""
    _write_docs(tmp_path / "docs", 8)
    embedded: list[str] = []
    later_batch_embedded = asyncio.Event()

    class Recording(HashingEmbedder):
        async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
            embedded.extend(texts)
            if any("Page 3" in t for t in texts):
                later_batch_embedded.set()
            return await super().embed_batch(texts, task="document")

    kb = await open_kb_file(tmp_path / "kb.db", Recording(dim=32), config=KBConfig(batch_documents=2))
    index: Any = kb._ingest.index
    real_write = index.write_documents
    writes: list[list[str]] = []
    progress: list[tuple[int, str]] = []
    progress_during_first_write: list[int] = []

    async def held_write(bucket: str, fields: Any, docs: Sequence[KBDocumentWrite]) -> list[list[int]]:
        writes.append([d.id for d in docs])
        if len(writes) == 1:
            await asyncio.wait_for(later_batch_embedded.wait(), GUARD_S)
            progress_during_first_write.extend(done for done, _ in progress)
        result: list[list[int]] = await real_write(bucket, fields, docs)
        return result

    index.write_documents = held_write
    try:
        report = await kb.ingest_paths(
            [tmp_path / "docs"], progress=lambda done, total, label: progress.append((done, label))
        )
        assert report.added == 8 and report.chunks == 8 and not report.rejected
        assert max(progress_during_first_write) > 2  # files of later batches were read meanwhile
        assert sorted(d for w in writes for d in w) == sorted({d for w in writes for d in w})
        assert (await kb.status.stats())["documents"] == 8
        assert (await kb.search("gannets page 5", mode="text")).hits
    finally:
        await kb.aclose()


async def test_a_failed_write_is_raised_and_earlier_batches_stay(tmp_path: Path) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=32), config=KBConfig(batch_documents=2))
    index: Any = kb._ingest.index
    real_write = index.write_documents
    calls = 0

    async def failing_second(bucket: str, fields: Any, docs: Sequence[KBDocumentWrite]) -> list[list[int]]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("disk full")
        result: list[list[int]] = await real_write(bucket, fields, docs)
        return result

    index.write_documents = failing_second
    docs = [{"id": f"d{i}", "title": f"Doc {i}", "text": f"kiwi text {i}"} for i in range(10)]
    try:
        try:
            await kb.ingest_documents(docs)
        except RuntimeError as exc:
            assert "disk full" in str(exc)
        else:
            raise AssertionError("the failed write was lost")
        stored = (await kb.status.stats())["documents"]
        assert stored >= 2 and stored % 2 == 0  # whole batches only; the first one for sure
        assert await kb.get_document("d0") is not None
    finally:
        await kb.aclose()
