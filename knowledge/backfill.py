"""Re-embedding in the background: every stored document gets vectors of the current
embedder, by itself.

Why it exists (issue 20): an ingest whose embedder failed stores its documents for text
search only — never half-stored, never lost — and a database filled while the embedder
was broken (or by another embedder: another model, another dimension) has documents a
search by meaning cannot see. Nothing but a re-ingest of the same files used to repair
them. ``VectorBackfill`` does:

* a **pass** reads the documents whose chunks lack vectors of the current embedder
  (``KBIndex.documents_without_vectors``, a batch at a time by id), embeds their stored
  chunk texts through the same embedder call as ingest (``knowledge.ingest_stages.embed_texts``)
  and writes the vectors in one transaction per batch (``KBIndex.store_vectors``), only
  for documents still as they were read — one re-ingested meanwhile belongs to that
  ingest. The dense side (in-memory matrix) learns them after the commit, as after an
  ingest.
* a document some of whose stored vectors cannot be read (a wrong length, none: the
  dense side counts them, ``DenseSide.unreadable``) still says it is embedded, so no
  pass would list it: each pass first embeds such documents again and stores their
  vectors in one write, only those still unreadable in the store
  (``KBIndex.documents_with_unreadable_vectors``); their readable chunks stay searched
  meanwhile, in every process, whatever the embedder does.
* passes run at start-up, after every ingest that left documents without vectors (and
  after one that embedded while documents were pending: the embedder is back), and on
  a slow timer (``KBConfig.reembed_interval_s``). While the embedder keeps failing the
  next pass waits longer each time (``reembed_backoff_min_s`` doubling up to
  ``reembed_backoff_max_s``), so a dead server is asked rarely, a recovered one soon.
* ``status()`` is what ``/readyz`` shows and ``pending`` / ``reembedded`` what
  ``/metrics`` exports: nothing here is silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge.dense import DenseSide
from knowledge.ingest_docs import embedding_text
from knowledge.ingest_stages import embed_texts
from knowledge.types import IngestReport, KBConfig
from storage.interfaces import KBIndex
from storage.kb_records import KBUnembedded, KBVectorWrite
from toolindex.embedder import Embedder, EmbeddingError

log = logging.getLogger("agentchat.kb.backfill")


@dataclass(slots=True)
class BatchResult:
    """One batch of a pass: documents read, those given vectors, the last id read."""

    read: int
    written: list[str]
    last_id: str | None


class VectorBackfill:
    """Gives documents without vectors of ``embedder`` their vectors, in the background
    once ``start()``ed (see the module docstring). Built by ``KnowledgeBase``."""

    def __init__(self, index: KBIndex, dense: DenseSide, embedder: Embedder | None, config: KBConfig) -> None:
        self._index = index
        self._dense = dense
        self._embedder = embedder
        self._config = config
        self._embed_key = f"{embedder.name}:{embedder.model}" if embedder else None
        #: Times ``pending`` was set, by anyone (``pending``'s setter).
        self.tally_moves = 0
        self._pending: int | None = None if embedder is not None else 0
        #: Documents given vectors by this process (``/metrics``).
        self.reembedded = 0
        #: Passes that ended on an embedder or storage failure, in a row.
        self.failures = 0
        self.state = "not started" if embedder is not None else "no embedder"
        self.last_error: str | None = None
        self._retry_at: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: Set by ``aclose`` for the loop it stops (each ``start`` makes a new one).
        self._stop = asyncio.Event()

    @property
    def pending(self) -> int | None:
        """Documents without vectors of this embedder, as last counted and moved since
        (``None``: not yet counted)."""
        return self._pending

    @pending.setter
    def pending(self, value: int | None) -> None:
        """Counts the move: ``/readyz`` sets the tally from counts current at the
        generation it read only when nothing moved it after that read began
        (``app.knowledge_component``) - a pass that stored vectors and ended while the
        probe awaited made those counts older than the tally."""
        self._pending = value
        self.tally_moves += 1

    # ------------------------------------------------------------------ control
    def start(self) -> asyncio.Task[None] | None:
        """Run passes in the background until ``aclose`` (the first one now)."""
        if self._embedder is None or self._task is not None:
            return None
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(self._stop), name="kb-vector-backfill")
        return self._task

    def wake(self) -> None:
        """Run a pass now (or right after the one running)."""
        self._wake.set()

    def ingested(self, report: IngestReport) -> None:
        """An ingest finished: documents it stored without vectors are queued (a pass
        runs now); one that embedded while others wait says the embedder is back."""
        if self._embedder is None:
            return
        if report.queued_for_embedding:
            self.pending = (self.pending or 0) + report.queued_for_embedding
            self.wake()
        elif (report.added or report.updated) and self.pending and self.state == "waiting to retry":
            self.wake()

    async def aclose(self) -> None:
        """Stop the passes: at shutdown, or when this process no longer leads the
        background jobs (``app/rooms.py``) and another re-embeds. What its passes found
        stops counting then: ``/readyz`` calls the KB stalled while the process that
        re-embeds keeps failing, not because this one failed before it let go."""
        task, self._task = self._task, None
        if task is not None:
            # The flag, not the cancel alone: on Python 3.11 ``asyncio.wait_for`` (the
            # loop's wait for a wake-up) returns when the cancel lands as ``wake()`` is
            # called, the cancel is lost, and the loop went on waiting for ever - and
            # this close, hence the process's shutdown, with it.
            self._stop.set()
            task.cancel()
            stop_s = self._config.reembed_stop_s
            done, _ = await asyncio.wait({task}, timeout=stop_s)
            if not done:
                log.error(
                    "the re-embedding loop did not stop; left behind",
                    extra={"after_s": stop_s, "stack": _stack_text(task)},
                )
            elif not task.cancelled() and task.exception() is not None:
                log.error("the re-embedding loop failed", exc_info=task.exception())
            self.failures, self.last_error, self._retry_at = 0, None, None
            self.state = "stopped"

    def status(self) -> dict[str, Any]:
        """For ``/readyz``: what waits for vectors and what the re-embedding is doing."""
        out: dict[str, Any] = {
            "state": self.state,
            "pending_documents": self.pending,
            "reembedded_documents": self.reembedded,
        }
        if self.last_error is not None and self.state == "waiting to retry":
            out["failures"] = self.failures
            out["last_error"] = self.last_error
        if self._retry_at is not None and self.state == "waiting to retry":
            out["retry_in_s"] = round(max(0.0, self._retry_at - time.monotonic()), 1)
        return out

    # ------------------------------------------------------------------ the loop
    async def _run(self, stop: asyncio.Event) -> None:
        cfg = self._config
        delay = 0.0
        while not stop.is_set():
            if delay > 0:
                self._retry_at = time.monotonic() + delay
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                if stop.is_set():
                    return
            self._wake.clear()
            self._retry_at = None
            try:
                await self.run_pass(stop)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the embedder or the database: try again later
                self.failures += 1
                self.state = "waiting to retry"
                reason = str(exc) if isinstance(exc, EmbeddingError) else f"{type(exc).__name__}: {exc}"
                self.last_error = reason[:400]
                delay = min(cfg.reembed_backoff_max_s, cfg.reembed_backoff_min_s * 2 ** (self.failures - 1))
                log.warning(
                    "re-embedding documents failed; retrying",
                    extra={"pending": self.pending, "retry_in_s": delay, "reason": self.last_error},
                )
                continue
            self.failures, self.last_error = 0, None
            self.state = "idle"
            delay = cfg.reembed_interval_s

    async def run_pass(self, stop: asyncio.Event | None = None) -> int:
        """Re-embed every document with unreadable vectors, then every one without
        current vectors, a batch at a time; how many got vectors. Raises
        ``EmbeddingError`` (or a storage error) on the first failure.
        ``stop`` (the loop's, set by ``aclose``): no batch starts once it is set - a
        close whose cancel a store call swallowed (psycopg's pool waits through
        ``asyncio.wait_for``) ends the pass at its next batch, not after all of them."""
        if self._embedder is None:
            return 0
        done = 0
        after: str | None = None
        done += await self._repair_unreadable(stop)
        await self.count_pending()
        if self.pending:
            self.state = "re-embedding"
            log.info(
                "re-embedding documents without vectors", extra={"pending": self.pending, "embedder": self._embed_key}
            )
        while self.pending:
            if stop is not None and stop.is_set():
                return done
            batch = await self.run_batch(after)
            done += len(batch.written)
            if batch.last_id is None:
                break
            after = batch.last_id
        await self.count_pending()
        if done:
            log.info("documents re-embedded", extra={"documents": done, "pending": self.pending})
        return done

    async def _repair_unreadable(self, stop: asyncio.Event | None) -> int:
        """Documents some of whose stored vectors the dense side could not read (a wrong
        length, none: ``DenseSide.unreadable``) are embedded again and their vectors
        stored: their document says it is embedded, so nothing else would ever look at
        them again. Embedded first, stored in one write (``store_vectors``): never marked
        as without vectors beforehand, which took the document's readable chunks out of
        every other process's search by meaning (and out of this one's at its next
        reload) until the embedding was done - for as long as the embedder was down.
        Only documents whose stored vectors are still unreadable
        (``KBIndex.documents_with_unreadable_vectors``): one re-ingested or re-embedded
        since this matrix was loaded keeps its vectors. How many were repaired."""
        embedder = self._embedder
        if embedder is None or self._embed_key is None:
            return 0
        await self._dense.count_unreadable()  # where the engine searches, nothing else counts them
        # A copy: the dense side's own dict loses a document the moment an ingest or a
        # delete of this process replaces it, which may happen during this pass's awaits.
        unreadable = dict(self._dense.unreadable())
        todo = sorted(unreadable)
        step = max(1, self._config.reembed_batch_documents)
        repaired = 0
        for start in range(0, len(todo), step):
            if stop is not None and stop.is_set():
                break
            part = todo[start : start + step]
            docs = await self._index.documents_with_unreadable_vectors(self._embed_key, embedder.dim, part)
            if not docs:  # readable by now: this matrix is older than the store, its next reload says so
                continue
            self.state = "re-embedding"
            log.warning(
                "stored vectors that could not be read (wrong length or missing): re-embedding their documents",
                extra={"documents": len(docs), "chunks": sum(unreadable.get(d.id, 0) for d in docs)},
            )
            repaired += len(await self._embed_and_store(docs))
        self.reembedded += repaired
        return repaired

    async def count_pending(self) -> int:
        if self._embedder is None:
            return 0
        counts = await self._index.counts(self._embed_key, self._embedder.dim)
        self.pending = counts.without_vectors
        return self.pending

    async def run_batch(self, after: str | None = None) -> BatchResult:
        """Embed and store the next batch of documents after the id ``after``."""
        embedder = self._embedder
        if embedder is None or self._embed_key is None:
            return BatchResult(0, [], None)
        docs = await self._index.documents_without_vectors(
            self._embed_key, embedder.dim, limit=max(1, self._config.reembed_batch_documents), after=after
        )
        if not docs:
            return BatchResult(0, [], None)
        written = await self._embed_and_store(docs)
        self.reembedded += len(written)
        if self.pending is not None:
            self.pending = max(0, self.pending - len(written))
        return BatchResult(len(docs), [d.id for d in docs if d.id in written], docs[-1].id)

    async def _embed_and_store(self, docs: Sequence[KBUnembedded]) -> set[str]:
        """Embed these documents' chunks and store their vectors (only for documents
        still as they were read: ``store_vectors``); the ids written, in the dense side too."""
        embedder = self._embedder
        assert embedder is not None and self._embed_key is not None
        texts = [embedding_text(d.title, c) for d in docs for c in d.chunks]
        matrix = await embed_texts(embedder, texts, self._config.embed_batch)
        writes: list[KBVectorWrite] = []
        offset = 0
        for d in docs:
            n = len(d.chunks)
            writes.append(KBVectorWrite(d.id, d.content_hash, [c.id for c in d.chunks], matrix[offset : offset + n]))
            offset += n
        written = set(await self._index.store_vectors(self._embed_key, embedder.dim, writes))
        for d, w in zip(docs, writes, strict=True):
            if d.id in written:  # committed: searchable by meaning from now on
                self._dense.remove_document(d.id)
                self._dense.add(w.chunk_ids, d.id, d.bucket, np.asarray(w.vectors, np.float32))
        return written


def _stack_text(task: asyncio.Task[None]) -> str:
    """Where a task that would not stop is (for the log)."""
    out = io.StringIO()
    task.print_stack(file=out)
    return out.getvalue()


__all__ = ["BatchResult", "VectorBackfill"]

