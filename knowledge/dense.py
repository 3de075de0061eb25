"""The dense side of search: the chunks nearest to a query vector, from wherever the
engine keeps them.

Two ways, one interface (``DenseSide``), chosen once by ``dense_side``:

* ``MatrixDense`` — the in-memory float32 matrix (``knowledge.vectors.VectorIndex``),
  filled from the store at start and kept in step by ingestion. The embedded SQLite
  engine has no vector index of its own, and a numpy scan of 1M rows takes ~60 ms.
  Where another process writes the same file (a ``--workers`` sibling, ``agentchat
  ingest`` or ``docs rm`` while the server runs) the stored generation says so before
  the next search (``knowledge.freshness``) and the matrix is loaded anew (``reload``).
* ``DatabaseDense`` — the engine answers (``storage.interfaces.KBVectorSearch``:
  pgvector on PostgreSQL). Nothing is held in memory, so replicas do not each carry
  the whole matrix, and a document another replica ingested is found the moment its
  transaction commits.

Filters reach both as the same ``KBScope``; the fusion, re-ranking and tool results
around them (``knowledge.search``) do not know which one answered.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from knowledge.vectors import VectorIndex, load_vectors
from storage.interfaces import KBIndex, KBVectorSearch
from storage.kb_records import KBRanked, KBScope, KBVectorRows

F32 = npt.NDArray[np.float32]

log = logging.getLogger("agentchat.knowledge")


class DenseSide(Protocol):
    #: How often another process's changes need looking for before a search
    #: (``knowledge.freshness``): 0, before every search, where this process holds the
    #: vectors; otherwise at most once per this many seconds (only statistics and
    #: schemas are cached then, and a read of the generation is a round trip).
    check_every_s: float

    #: Whether a filtered scope reaches ``nearest`` best resolved to its chunk ids
    #: (``KBScope.chunk_ids``: the in-memory matrix masks its rows by them) rather
    #: than to its documents (an engine's own statement takes their ids).
    scope_by_chunks: bool

    @property
    def dim(self) -> int: ...

    def add(self, chunk_ids: Iterable[int], doc_id: str, bucket: str, vectors: F32) -> None:
        """Ingestion stored these vectors (committed): make them searchable."""
        ...

    def add_many(self, docs: Sequence[KBVectorRows]) -> None:
        """``add`` for each of ``docs`` (a committed ingest batch), in one step."""
        ...

    def remove_document(self, doc_id: str) -> int:
        """Ingestion deleted or replaced this document (committed)."""
        ...

    async def load(self) -> int:
        """Called once at start; returns how many vectors were loaded into memory."""
        ...

    async def aclose(self) -> None:
        """Stop what ``load`` left running in the background (``KnowledgeBase.aclose``)."""
        ...

    async def reload(self) -> None:
        """Another process changed the stored knowledge base (``knowledge.freshness``):
        take it in (the matrix loaded anew; nothing where the engine searches)."""
        ...

    async def available(self) -> bool:
        """Whether there is anything to search (else the search falls back to text)."""
        ...

    async def count(self) -> int:
        """The vectors searches by meaning see: the matrix's size in memory, or a sum over
        the documents' rows in the store (``/readyz`` reads it beside the counts, in the
        background: ``knowledge.kb_counts_memo``)."""
        ...

    async def nearest(self, query: F32, scope: KBScope, limit: int) -> KBRanked:
        """The ``limit`` chunks in ``scope`` nearest to ``query`` (unit length), by cosine,
        best first; ``total`` counts the chunks in scope with a positive similarity (an
        engine's index may estimate it)."""
        ...

    async def cosines(self, chunk_ids: Sequence[int], query: F32) -> dict[int, float]: ...

    async def status(self, *, kept_counts: bool = False) -> dict[str, Any]:
        """How a search by meaning runs here (``/readyz``): exact in memory, or which
        index of the engine and how it is asked (``kept_counts``: from the counts kept,
        never a sum over the documents - ``KBVectorSearch.vector_index_status``)."""
        ...

    def unreadable(self) -> dict[str, int]:
        """The chunks, per document, whose stored vector the load could not read (a
        wrong length, none): out of every search by meaning until re-embedded."""
        ...

    def unreadable_counted(self) -> bool:
        """Whether ``unreadable`` is a count (else none has landed yet: it is empty, not 0)."""
        ...

    async def count_unreadable(self) -> None:
        """Count ``unreadable`` anew from the store (the back-fill pass asks before it
        repairs): where the load reads every vector it counts them itself."""
        ...


class MatrixDense:
    """The in-memory matrix (see the module docstring)."""

    check_every_s = 0.0

    scope_by_chunks = True

    def __init__(self, index: KBIndex, embed_model: str | None, dim: int, *, executor_rows: int = 2_000) -> None:
        self.matrix = VectorIndex(dim)
        self._index = index
        self._embed_model = embed_model
        self._executor_rows = executor_rows
        self._reloading = asyncio.Lock()
        #: While a reload reads the store: the changes made here meanwhile, replayed
        #: onto the new matrix before it takes over (``reload``).
        self._journal: list[Callable[[VectorIndex], object]] | None = None

    async def reload(self) -> None:
        """Load the matrix anew from the store: another process changed it
        (``knowledge.freshness``). Searches meanwhile use the old one. What this process
        adds or removes during the load goes to the old matrix and is replayed onto the
        new one before it takes over: each such change removes a document's rows before
        adding its new ones, so it lands right whether or not the load already read it."""
        if self._embed_model is None:
            return
        async with self._reloading:
            self._journal = []
            try:
                fresh = VectorIndex(self.matrix.dim)
                await load_vectors(fresh, self._index, self._embed_model, private=True)
                for change in self._journal:
                    change(fresh)
                self.matrix = fresh
            finally:
                self._journal = None

    def _also_after_reload(self, change: Callable[[VectorIndex], object]) -> None:
        if self._journal is not None:
            self._journal.append(change)

    @property
    def dim(self) -> int:
        return self.matrix.dim

    def add(self, chunk_ids: Iterable[int], doc_id: str, bucket: str, vectors: F32) -> None:
        ids = list(chunk_ids)
        self.matrix.add(ids, doc_id, bucket, vectors)
        self._also_after_reload(lambda m: m.add(ids, doc_id, bucket, vectors))

    def add_many(self, docs: Sequence[KBVectorRows]) -> None:
        batch = list(docs)
        self.matrix.add_many(batch)
        self._also_after_reload(lambda m: m.add_many(batch))

    def remove_document(self, doc_id: str) -> int:
        self._also_after_reload(lambda m: m.remove_document(doc_id))
        return self.matrix.remove_document(doc_id)

    async def load(self) -> int:
        if self._embed_model is None:
            return 0
        return await load_vectors(self.matrix, self._index, self._embed_model)

    async def aclose(self) -> None:
        """Nothing runs in the background here."""

    async def available(self) -> bool:
        return self.matrix.size > 0

    async def count(self) -> int:
        return self.matrix.size

    async def nearest(self, query: F32, scope: KBScope, limit: int) -> KBRanked:
        matrix = self.matrix
        snap = matrix.snapshot()
        mask = None
        if scope.chunk_ids is not None:
            mask = matrix.chunk_mask(snap, scope.chunk_ids)
        elif scope.doc_ids is not None:
            mask = matrix.doc_mask(snap, scope.doc_ids)
        elif scope.bucket is not None:
            code = matrix.bucket_code(scope.bucket)
            if code is None:
                return KBRanked()
            mask = snap.bucket_codes[: snap.n] == code
        elif scope.hidden_prefix:
            mask = matrix.hidden_mask(snap, scope.hidden_prefix)
        if snap.n > self._executor_rows:
            loop = asyncio.get_running_loop()
            ids, scores, positive = await loop.run_in_executor(None, VectorIndex.scan, snap, query, limit, mask)
        else:
            ids, scores, positive = VectorIndex.scan(snap, query, limit, mask)
        return KBRanked(ids.tolist(), [float(s) for s in scores], positive)

    async def cosines(self, chunk_ids: Sequence[int], query: F32) -> dict[int, float]:
        return self.matrix.cosines(chunk_ids, query)

    async def status(self, *, kept_counts: bool = False) -> dict[str, Any]:
        unreadable = self.matrix.unreadable
        return {
            "search": "exact, in memory",
            "unreadable_vectors": sum(unreadable.values()),
            "unreadable_documents": len(unreadable),
        }

    def unreadable(self) -> dict[str, int]:
        return self.matrix.unreadable

    def unreadable_counted(self) -> bool:
        return True  # the load, awaited at start, read and counted every vector

    async def count_unreadable(self) -> None:
        """Nothing to do: every load and reload reads each vector and counts (``VectorIndex``)."""


class DatabaseDense:
    """The engine's own vector search (see the module docstring)."""

    #: A search reads the vectors from the database: only the bucket schemas and text
    #: statistics may be stale, and for at most this long (a round trip to PostgreSQL
    #: before every search cost 0.5 ms of CPU and ~4 ms of a loaded machine's time).
    check_every_s = 1.0

    scope_by_chunks = False

    def __init__(self, search: KBVectorSearch, embed_model: str, dim: int, *, count_stop_s: float = 5.0) -> None:
        self._search = search
        #: How long ``aclose`` waits for the start's count once cancelled (``KBConfig``).
        self._count_stop_s = count_stop_s
        self._embed_model = embed_model
        self._dim = dim
        self._seen = False
        #: Chunks per document whose stored vector is none or of another width (the
        #: engine's search leaves them out by its own condition), as last counted: after
        #: the load, by each back-fill pass (``count_unreadable``), and those still
        #: counted are asked again at a reload (another process may have repaired them).
        self._unreadable: dict[str, int] = {}
        #: Whether a whole count has landed: until then ``status`` says "counting" (or
        #: why it failed) rather than 0, and ``/metrics`` leaves the gauge out.
        self._counted = False
        self._count_error: str | None = None
        #: The count ``load`` starts in the background: one scan of every chunk of this
        #: embedder (1.7-2.0 s warm per 1,000,000 chunks of 384 dimensions, the whole heap
        #: read cold), which a replica's start and ``agentchat ingest`` no longer wait for.
        self._first_count: asyncio.Task[None] | None = None
        self._closed = False
        #: Per count under way, the documents replaced here since it began: its scan may
        #: have read their old vectors, and setting them back would say "unreadable" until
        #: the next pass (which finds them readable and leaves them).
        self._replaced_while_counting: list[set[str]] = []

    @property
    def dim(self) -> int:
        return self._dim

    def add(self, chunk_ids: Iterable[int], doc_id: str, bucket: str, vectors: F32) -> None:
        self._seen = True  # the rows are in the database already

    def add_many(self, docs: Sequence[KBVectorRows]) -> None:
        if docs:
            self._seen = True

    def remove_document(self, doc_id: str) -> int:
        self._unreadable.pop(doc_id, None)  # replaced or re-embedded: its new vectors are readable
        for replaced in self._replaced_while_counting:
            replaced.add(doc_id)
        return 0

    async def load(self) -> int:
        """Starts the count of unreadable vectors and returns at once: the rare torn
        vector must not hold a replica's readiness for a scan of the whole table.
        Searches meanwhile warn of none; ``status`` says the count is under way."""
        self._count_in_background()
        return 0

    def _count_in_background(self) -> None:
        """Start the whole count unless one runs or this side is closed."""
        if self._closed or (self._first_count is not None and not self._first_count.done()):
            return
        self._first_count = asyncio.create_task(self._count_at_start(), name="kb-unreadable-count")

    async def _count_at_start(self) -> None:
        try:
            await self._count_whole()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the leader's pass or the next reload counts again; status says why
            self._count_error = f"{type(exc).__name__}: {exc}"[:300]
            log.warning(
                "knowledge base: counting unreadable stored vectors failed", extra={"reason": self._count_error}
            )

    async def aclose(self) -> None:
        """Cancel the start's count if it still runs; wait at most ``count_stop_s`` for it:
        a cancelled statement waits for PostgreSQL to answer the cancel, which a frozen
        server never does (psycopg then drops the connection after ~10 s). One still
        running is logged with its stack and left, so the shutdown goes on."""
        self._closed = True
        task, self._first_count = self._first_count, None
        if task is not None and not task.done():
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=self._count_stop_s)
            if not done:
                task.print_stack(file=(stack := io.StringIO()))
                log.error("knowledge base: the count of unreadable stored vectors did not end within %.1f s of "
                          "its cancellation; closing without it", self._count_stop_s,
                          extra={"task": task.get_name(), "stack": stack.getvalue()[-3000:]})  # fmt: skip

    async def reload(self) -> None:
        self._seen = False  # another process may have removed every vector: ask again
        if not self._counted:  # the start's count failed: only the leader's passes count again
            self._count_in_background()
        if self._unreadable:  # only those counted: a whole count is the load's and the pass's
            asked = list(self._unreadable)
            found = await self._search.unreadable_vectors(self._embed_model, self._dim, asked)
            # Only those asked about: what a whole count that ended meanwhile found of the
            # others stays; one replaced here meanwhile (``remove_document``) stays out.
            for doc_id in asked:
                if doc_id in found and doc_id in self._unreadable:
                    self._unreadable[doc_id] = found[doc_id]
                else:
                    self._unreadable.pop(doc_id, None)

    async def available(self) -> bool:
        # Once vectors exist they are assumed to stay (a search of an emptied index just
        # finds nothing); until then every search asks, since another replica may ingest.
        if not self._seen:
            self._seen = await self._search.has_vectors(self._embed_model, self._dim)
        return self._seen

    async def count(self) -> int:
        return await self._search.count_vectors(self._embed_model, self._dim)

    async def nearest(self, query: F32, scope: KBScope, limit: int) -> KBRanked:
        return await self._search.vector_candidates(query, self._embed_model, scope, limit)

    async def cosines(self, chunk_ids: Sequence[int], query: F32) -> dict[int, float]:
        return await self._search.cosines(chunk_ids, query, self._embed_model)

    async def status(self, *, kept_counts: bool = False) -> dict[str, Any]:
        return {
            "search": "the engine's vector index",
            **await self._search.vector_index_status(kept_counts=kept_counts),
            **self._unreadable_status(),
        }

    def _unreadable_status(self) -> dict[str, Any]:
        if not self._counted:  # not 0: nobody has looked yet
            state = f"failed: {self._count_error}" if self._count_error is not None else "counting"
            return {"unreadable_vectors": None, "unreadable_documents": None, "unreadable_count": state}
        return {
            "unreadable_vectors": sum(self._unreadable.values()),
            "unreadable_documents": len(self._unreadable),
            "unreadable_count": "counted",
        }

    def unreadable(self) -> dict[str, int]:
        return self._unreadable

    def unreadable_counted(self) -> bool:
        return self._counted

    async def count_unreadable(self) -> None:
        """Count anew (the back-fill pass, before it repairs). While the start's count
        still runs, its answer is this one's: the pass that starts with the leader
        would scan the whole table a second time beside it."""
        first = self._first_count
        if first is not None and not first.done():
            await asyncio.wait({first})  # a cancelled pass leaves the start's count running
            if self._counted:
                return
        await self._count_whole()

    async def _count_whole(self) -> None:
        """Ask the engine (``KBVectorSearch.unreadable_vectors``: one scan of this
        embedder's chunks); a document replaced here meanwhile stays out."""
        replaced: set[str] = set()
        self._replaced_while_counting.append(replaced)
        try:
            found = await self._search.unreadable_vectors(self._embed_model, self._dim)
        finally:
            self._replaced_while_counting = [r for r in self._replaced_while_counting if r is not replaced]
        self._unreadable = {d: n for d, n in found.items() if d not in replaced}
        self._counted, self._count_error = True, None


def dense_side(
    index: KBIndex, embed_model: str | None, dim: int, *, executor_rows: int = 2_000, count_stop_s: float = 5.0
) -> DenseSide:
    """The engine's vector search when it has one (and there is an embedder), else the
    in-memory matrix. ``count_stop_s`` bounds the engine's side's close (``DatabaseDense.aclose``)."""
    if embed_model is not None and isinstance(index, KBVectorSearch):
        return DatabaseDense(index, embed_model, dim, count_stop_s=count_stop_s)
    return MatrixDense(index, embed_model, dim, executor_rows=executor_rows)


__all__ = ["DatabaseDense", "DenseSide", "MatrixDense", "dense_side"]
