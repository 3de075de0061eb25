"""The stages an ingest overlaps: embedding a batch's texts several requests at once
(``embed_texts``, also what re-embedding uses) and writing batches behind the
preparation of the next one (``BatchWrites``). Kept apart from ``knowledge.ingest``,
which decides *what* is read, chunked and stored, so each stays small."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

import numpy as np

from knowledge.ingest_docs import Prepared
from toolindex.embedder import Embedder

T = TypeVar("T")
#: ``(chunks embedded, chunks to embed)`` of the batch being embedded.
EmbedHook = Callable[[int, int], None]
#: ``(stage, done, total)``, for a display that counts a stage of an ingest: ``STAGE_COMPARE``,
#: HTML pages compared with their Markdown twins (before any file is read); ``STAGE_EMBED``,
#: chunks embedded of those to embed so far, over all batches (``EmbedTally``).
StageHook = Callable[[str, int, int], None]
STAGE_COMPARE = "compare"
STAGE_EMBED = "embed"
#: Embedding requests of one batch in flight at once: a remote embedder answers them on
#: several connections of its pool (``AGENT_EMBED_MAX_CONNECTIONS``), the hashing one in
#: worker threads; one at a time, the embedder idles during every round trip.
EMBED_CONCURRENCY = 4


async def embed_texts(
    embedder: Embedder,
    texts: Sequence[str],
    batch: int,
    on_embed: EmbedHook | None = None,
    *,
    concurrency: int = EMBED_CONCURRENCY,
) -> np.ndarray:
    """One float32 row per text, embedded ``batch`` at a time (each cut to the
    embedder's ``max_chars``), up to ``concurrency`` requests at once: how ingest and
    re-embedding both call the embedder. ``on_embed`` hears the rows embedded so far
    after each request. Raises ``EmbeddingError`` (the requests still running are
    cancelled)."""
    step = max(1, batch)
    starts = range(0, len(texts), step)
    rows: list[np.ndarray | None] = [None] * len(starts)
    done = 0
    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(k: int, start: int) -> None:
        nonlocal done
        part = [t[: embedder.max_chars] for t in texts[start : start + step]]
        async with gate:
            rows[k] = np.asarray(await embedder.embed_batch(part, task="document"), np.float32)
        done += len(part)
        if on_embed is not None:
            on_embed(done, len(texts))

    await _all_or_none([one(k, start) for k, start in enumerate(starts)])
    parts = [r for r in rows if r is not None]
    return np.concatenate(parts) if parts else np.zeros((0, embedder.dim), np.float32)


class EmbedTally:
    """The chunks an ingest has embedded, and has to embed, over its batches so far: each
    batch's hook (``batch()``) tells ``per_batch`` its own ``(k, n)`` and ``overall`` the
    batches' together. Without it a progress display had the stored chunks alone, which
    moved only as each batch's write committed: ``0 chunks, 0 chunks/s`` for the whole
    embedding of one large batch. A batch whose embedding failed counts the chunks it
    embedded and all it had to: the difference stays visible."""

    def __init__(self, per_batch: EmbedHook | None, overall: EmbedHook | None) -> None:
        self._per_batch = per_batch
        self._overall = overall
        self.done = 0
        self.total = 0

    def batch(self) -> EmbedHook:
        """The hook of the next batch (its embedding starts after the last one's ended)."""
        before, before_total = self.done, self.total

        def hook(k: int, n: int) -> None:
            self.done, self.total = before + k, before_total + n
            if self._per_batch is not None:
                self._per_batch(k, n)
            if self._overall is not None:
                self._overall(self.done, self.total)

        return hook


def write_parts(todo: Sequence[Prepared], most_chunks: int | None) -> list[list[Prepared]]:
    """``todo`` in consecutive parts of at most ``most_chunks`` chunks, whole documents
    each (a document with more chunks is a part of its own): one write transaction a
    part (``KBIndex.chunks_per_write`` says why; ``None``: one part)."""
    return bounded_parts(todo, [len(p.chunks) for p in todo], most_chunks)


def bounded_parts(items: Sequence[T], sizes: Sequence[int], most: int | None) -> list[list[T]]:
    """``items`` in consecutive parts whose ``sizes`` add up to at most ``most`` (an item
    larger than that is a part of its own; ``None``: one part)."""
    if most is None:
        return [list(items)] if items else []
    out: list[list[T]] = []
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if out and total + size <= most:
            out[-1].append(item)
            total += size
        else:
            out.append([item])
            total = size
    return out


async def _all_or_none(coros: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run ``coros`` together; the first failure cancels the others and is raised as
    itself (not wrapped in an ``ExceptionGroup``: callers catch ``EmbeddingError``)."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class BatchWrites:
    """Batch writes running behind the preparation of the next batch: ``submit`` starts
    one, first waiting while ``limit`` are in flight; ``drain`` waits for them all. A
    failed write is raised by the next ``submit`` or ``drain``; leaving the block with
    an error cancels the writes still running (each is one transaction: a cancelled one
    leaves nothing behind). The first write runs alone: it may create what later ones
    share (the bucket's table, PostgreSQL's HNSW index under its lock), and two
    transactions doing that at once could wait on each other."""

    def __init__(self, limit: int) -> None:
        self._limit = max(1, limit)
        self._running: set[asyncio.Task[None]] = set()
        self._committed = False

    async def __aenter__(self) -> BatchWrites:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for t in self._running:
            t.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        self._running.clear()

    async def _settle(self, limit: int) -> None:
        while len(self._running) > limit:
            done, _ = await asyncio.wait(self._running, return_when=asyncio.FIRST_COMPLETED)
            self._running -= done
            for t in done:
                t.result()
                self._committed = True

    async def submit(self, write: Coroutine[Any, Any, None]) -> None:
        try:
            await self._settle(self._limit - 1 if self._committed else 0)
        except BaseException:
            write.close()
            raise
        self._running.add(asyncio.ensure_future(write))

    async def drain(self) -> None:
        await self._settle(0)


__all__ = [
    "EMBED_CONCURRENCY",
    "STAGE_COMPARE",
    "STAGE_EMBED",
    "BatchWrites",
    "EmbedHook",
    "EmbedTally",
    "StageHook",
    "bounded_parts",
    "embed_texts",
    "write_parts",
]
