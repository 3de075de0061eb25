"""The in-memory chunk vector matrix, safe to scan from worker threads while it grows.

Rows are L2-normalised float32, aligned with three numpy arrays: chunk row ids, document
codes and bucket codes. Readers take an immutable ``Snapshot`` (buffers + row count) and
scan only rows ``[:n]``; appends write past ``n`` and publish a new snapshot, growth
copies into a bigger buffer, and compaction builds fresh buffers, so a scan in progress
never sees a half-written row. Deletions flip an ``alive`` flag in place: a racing scan
may still return a just-deleted chunk, which the caller drops when the row is not found
in SQLite.

All mutation happens on the event loop thread (after the storage commit); scans may run
anywhere. The rows come from the storage engine's ``KBIndex`` (``load_vectors``). It is
the dense side of an engine without its own vector search (the embedded SQLite);
PostgreSQL answers in the database instead (``knowledge.dense``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from knowledge.vector_gather import gathered_scores
from storage.interfaces import KBIndex
from storage.kb_records import KBVectorRows

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BoolArr = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Snapshot:
    matrix: F32
    chunk_ids: I64
    doc_codes: I32
    bucket_codes: I32
    alive: BoolArr
    n: int


def normalise_rows(rows: npt.ArrayLike) -> F32:
    m = np.asarray(rows, dtype=np.float32)
    if m.ndim == 1:
        m = m.reshape(1, -1)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).astype(np.float32, copy=False)


class VectorIndex:
    """Append-mostly vector store keyed by chunk row id, with doc and bucket codes."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        self._doc_code: dict[str, int] = {}
        self._doc_names: list[str] = []
        self._bucket_code: dict[str, int] = {}
        #: The row of each chunk id (``-1``: none), indexed by the id itself: chunk ids
        #: are the store's small dense integers, so a scope of thousands of chunks maps
        #: to its rows in one numpy indexing (``chunk_rows``), and 1M chunks take 4 MB
        #: here where a dict of them took ~100 MB.
        self._row_of_id: I32 = np.full(max(16, capacity), -1, np.int32)
        self._rows_of_doc: dict[int, list[int]] = {}
        #: Each loaded document's chunks whose stored vector could not be read
        #: (``KBVectorRows.unreadable``), until the document is removed or replaced
        #: (re-embedded, re-ingested, deleted): what ``/readyz``, ``/metrics`` and a
        #: search's warnings count as left out of the search by meaning.
        self.unreadable: dict[str, int] = {}
        self._dead = 0
        cap = max(16, capacity)
        self._snap = Snapshot(
            np.zeros((cap, dim), np.float32),
            np.zeros(cap, np.int64),
            np.zeros(cap, np.int32),
            np.zeros(cap, np.int32),
            np.zeros(cap, np.bool_),
            0,
        )

    # -- codes ------------------------------------------------------------------
    def doc_code(self, doc_id: str, *, create: bool = False) -> int | None:
        code = self._doc_code.get(doc_id)
        if code is None and create:
            code = len(self._doc_names)
            self._doc_code[doc_id] = code
            self._doc_names.append(doc_id)
        return code

    def doc_name(self, code: int) -> str:
        return self._doc_names[code]

    def bucket_code(self, bucket: str, *, create: bool = False) -> int | None:
        code = self._bucket_code.get(bucket)
        if code is None and create:
            code = len(self._bucket_code)
            self._bucket_code[bucket] = code
        return code

    @property
    def doc_code_count(self) -> int:
        return len(self._doc_names)

    @property
    def size(self) -> int:
        """Live rows."""
        return self._snap.n - self._dead

    def snapshot(self) -> Snapshot:
        return self._snap

    # -- mutation ----------------------------------------------------------------
    def add(self, chunk_ids: Iterable[int], doc_id: str, bucket: str, vectors: F32) -> None:
        """Append rows for one document (vectors are normalised here, whatever they were)."""
        ids = np.fromiter(chunk_ids, dtype=np.int64)
        if len(ids) == 0:
            return
        rows = normalise_rows(vectors)
        if rows.shape != (len(ids), self.dim):
            raise ValueError(f"expected {len(ids)}x{self.dim} vectors, got {rows.shape}")
        dcode = self.doc_code(doc_id, create=True)
        bcode = self.bucket_code(bucket, create=True)
        assert dcode is not None and bcode is not None
        self._append(ids, rows, [dcode], [bcode], [len(ids)])

    def add_many(self, docs: Sequence[KBVectorRows]) -> None:
        """``add`` for several documents at once, as if added one after the other: one
        normalisation, one copy and one new snapshot for the lot. Ingestion writes
        batches of thousands of one-chunk documents, and ``add``'s fixed numpy cost
        (~28 us a call, most of it normalising a single row) was ~15 % of an ingest's
        CPU at 100k chunks; a search sees the batch appear at once."""
        for d in docs:
            if d.unreadable:
                self.unreadable[d.doc_id] = d.unreadable
        docs = [d for d in docs if len(d.chunk_ids)]
        if not docs:
            return
        counts = [len(d.chunk_ids) for d in docs]
        for d, k in zip(docs, counts, strict=True):
            shape = np.shape(d.vectors)
            if shape != (k, self.dim) and not (k == 1 and shape == (self.dim,)):
                raise ValueError(f"expected {k}x{self.dim} vectors, got {shape}")
        ids = np.fromiter((c for d in docs for c in d.chunk_ids), dtype=np.int64, count=sum(counts))
        rows = normalise_rows(np.concatenate([np.asarray(d.vectors, np.float32).reshape(-1, self.dim) for d in docs]))
        dcodes = [self.doc_code(d.doc_id, create=True) for d in docs]
        bcodes = [self.bucket_code(d.bucket, create=True) for d in docs]
        self._append(ids, rows, dcodes, bcodes, counts)

    def _append(
        self,
        ids: npt.NDArray[np.int64],
        rows: F32,
        dcodes: Sequence[int | None],
        bcodes: Sequence[int | None],
        counts: Sequence[int],
    ) -> None:
        """Write ``rows`` (normalised) after the live ones, ``counts[i]`` of them for the
        document ``dcodes[i]`` in bucket ``bcodes[i]``, and publish one new snapshot."""
        snap = self._snap
        n, k = snap.n, len(ids)
        if n + k > len(snap.chunk_ids):
            snap = self._grow(n + k)
        snap.matrix[n : n + k] = rows
        snap.chunk_ids[n : n + k] = ids
        snap.doc_codes[n : n + k] = np.repeat(np.asarray(dcodes, np.int32), counts)
        snap.bucket_codes[n : n + k] = np.repeat(np.asarray(bcodes, np.int32), counts)
        snap.alive[n : n + k] = True
        self._map_ids(ids, np.arange(n, n + k, dtype=np.int32))
        row = n
        for dcode, count in zip(dcodes, counts, strict=True):
            assert dcode is not None
            self._rows_of_doc.setdefault(dcode, []).extend(range(row, row + count))
            row += count
        self._snap = Snapshot(snap.matrix, snap.chunk_ids, snap.doc_codes, snap.bucket_codes, snap.alive, n + k)

    def remove_document(self, doc_id: str) -> int:
        self.unreadable.pop(doc_id, None)
        code = self._doc_code.get(doc_id)
        if code is None:
            return 0
        rows = self._rows_of_doc.pop(code, [])
        snap = self._snap
        if rows:
            at = np.asarray(rows, np.int64)
            snap.alive[at] = False
            self._row_of_id[snap.chunk_ids[at]] = -1
        self._dead += len(rows)
        if self._dead > 4096 and self._dead > self._snap.n // 4:
            self.compact()
        return len(rows)

    def _map_ids(self, ids: I64, rows: I32) -> None:
        """Record ``rows[i]`` as the row of chunk ``ids[i]``, growing the map to the
        largest id (doubling, so appends of ever larger ids cost amortised O(1))."""
        if not len(ids):
            return
        if int(ids.min()) < 0:
            raise ValueError("chunk ids must not be negative")
        top = int(ids.max())
        if top >= len(self._row_of_id):
            grown = np.full(max(top + 1, 2 * len(self._row_of_id)), -1, np.int32)
            grown[: len(self._row_of_id)] = self._row_of_id
            self._row_of_id = grown
        self._row_of_id[ids] = rows

    def chunk_rows(self, snap: Snapshot, chunk_ids: npt.ArrayLike) -> I64:
        """The rows of ``snap`` holding the given chunks (those without one left out), in
        the order given. Called on the event loop, where rows are assigned, with a
        snapshot taken there: a row appended since is past ``snap.n`` and left out."""
        ids = np.asarray(chunk_ids, np.int64).reshape(-1)
        ids = ids[(ids >= 0) & (ids < len(self._row_of_id))]
        rows = self._row_of_id[ids].astype(np.int64)
        return rows[(rows >= 0) & (rows < snap.n)]

    def chunk_mask(self, snap: Snapshot, chunk_ids: npt.ArrayLike) -> BoolArr:
        """The rows of ``snap`` of the given chunks: the same rows as ``doc_mask`` of
        their documents, found by chunk id in one indexing instead of one dict look-up
        per document (a filter keeping 38k documents at 1M chunks: 35-45 ms of the event
        loop, issue 24)."""
        mask = np.zeros(snap.n, np.bool_)
        mask[self.chunk_rows(snap, chunk_ids)] = True
        return mask

    def _grow(self, needed: int) -> Snapshot:
        old = self._snap
        cap = max(needed, len(old.chunk_ids) * 2)
        n = old.n
        matrix = np.zeros((cap, self.dim), np.float32)
        matrix[:n] = old.matrix[:n]
        new = Snapshot(
            matrix,
            _resized(old.chunk_ids, cap, n),
            _resized(old.doc_codes, cap, n),
            _resized(old.bucket_codes, cap, n),
            _resized(old.alive, cap, n),
            n,
        )
        self._snap = new
        return new

    def compact(self) -> None:
        """Drop dead rows into fresh buffers (old snapshots stay valid for running scans)."""
        old = self._snap
        keep = np.flatnonzero(old.alive[: old.n])
        cap = max(16, int(len(keep) * 1.25) + 16)
        n = len(keep)
        matrix = np.zeros((cap, self.dim), np.float32)
        matrix[:n] = old.matrix[keep]
        new = Snapshot(
            matrix,
            _resized(old.chunk_ids[keep], cap, n),
            _resized(old.doc_codes[keep], cap, n),
            _resized(old.bucket_codes[keep], cap, n),
            np.concatenate([np.ones(n, np.bool_), np.zeros(cap - n, np.bool_)]),
            n,
        )
        self._row_of_id = np.full(len(self._row_of_id), -1, np.int32)
        self._map_ids(new.chunk_ids[:n], np.arange(n, dtype=np.int32))
        self._rows_of_doc = {}
        for i, code in enumerate(new.doc_codes[:n].tolist()):
            self._rows_of_doc.setdefault(code, []).append(i)
        self._dead = 0
        self._snap = new

    # -- masks and scans (thread-safe reads) ----------------------------------------
    def doc_mask(self, snap: Snapshot, doc_ids: Iterable[str]) -> BoolArr:
        get = self._doc_code.get
        codes = np.fromiter((get(d, -1) for d in doc_ids), dtype=np.int64)
        allowed = np.zeros(max(1, self.doc_code_count) + 1, np.bool_)
        allowed[codes] = True  # unknown ids (-1) land in the spare last slot
        allowed[-1] = False
        return allowed[snap.doc_codes[: snap.n]]

    def hidden_mask(self, snap: Snapshot, prefix: str) -> BoolArr | None:
        """The rows of ``snap`` whose bucket, as stored with the row, does not start
        with ``prefix`` (``None``: no row's does, every row is in). An every-bucket
        search leaves the conversations' private buckets out so, by the bucket each
        vector was added with, never by a list of buckets read before: a private
        bucket made since is out all the same. Called on the event loop, where codes
        are made, so every code in ``snap`` is known here."""
        hidden = [code for name, code in self._bucket_code.items() if name.startswith(prefix)]
        if not hidden:
            return None
        allowed = np.ones(len(self._bucket_code), np.bool_)
        allowed[hidden] = False
        return allowed[snap.bucket_codes[: snap.n]]

    def cosines(self, chunk_ids: Iterable[int], query: F32) -> dict[int, float]:
        """Cosine of ``query`` with each given chunk that has a vector (for re-ranking)."""
        snap = self._snap
        ids = np.fromiter(chunk_ids, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < len(self._row_of_id))]
        rows = self._row_of_id[ids].astype(np.int64)
        found = (rows >= 0) & (rows < snap.n)
        if not found.any():
            return {}
        ids, rows = ids[found], rows[found]
        scores = snap.matrix[rows] @ query.astype(np.float32, copy=False).reshape(-1)
        return dict(zip(ids.tolist(), scores.tolist(), strict=True))

    @staticmethod
    def scan(snap: Snapshot, query: F32, limit: int, mask: BoolArr | None = None) -> tuple[I64, F32, int]:
        """Top ``limit`` rows by cosine: ``(chunk_ids, scores, positive_count)``.

        ``positive_count`` counts eligible rows with a positive similarity (the
        semantic side's "matches"). A selective mask gathers just its rows; a broad one
        scores the span of rows it covers and masks the result, which is cheaper than a
        big gather.
        """
        n = snap.n
        if n == 0 or limit <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
        eligible = snap.alive[:n] if mask is None else (mask & snap.alive[:n])
        count = int(eligible.sum())
        if count == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32), 0
        q = query.astype(np.float32, copy=False).reshape(-1)
        # Rows of one bucket (or ingest batch) are mostly adjacent: when the eligible
        # rows are dense within their span, score the span (a view, not a copy).
        offset = int(np.argmax(eligible))
        end = n - int(np.argmax(eligible[::-1]))
        rows: I64 | None = None
        # Measured on 2 cores: a gather costs ~7x a streamed row, so past ~1/6 of the
        # rows scoring them all and masking is faster.
        if end - offset <= 2 * count or count >= n // 6:
            scores = snap.matrix[offset:end] @ q
            if end - offset > count:
                scores = np.where(eligible[offset:end], scores, np.float32(-np.inf))
        else:
            rows = np.flatnonzero(eligible)
            scores = gathered_scores(snap.matrix, rows, q)
        positive = int((scores > 0).sum())
        k = min(limit, count)
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        top = top[np.isfinite(scores[top])]
        picked = top + offset if rows is None else rows[top]
        return snap.chunk_ids[picked].copy(), scores[top].astype(np.float32), positive


G = TypeVar("G", bound=np.generic)


def _resized(arr: npt.NDArray[G], cap: int, n: int) -> npt.NDArray[G]:
    out = np.zeros(cap, arr.dtype)
    out[:n] = arr[:n]
    return out


#: Documents ``load_vectors`` appends at once (one ``add_many``) ...
LOAD_BATCH_DOCUMENTS = 5_000
#: ... or fewer, once they hold this many rows: a few long documents must not make one
#: batch of the whole knowledge base (its per-document arrays, their concatenation and
#: its normalised copy all held at once: 890 MB over the matrix for 293 MB of vectors).
LOAD_BATCH_ROWS = 20_000


async def load_vectors(vectors: VectorIndex, index: KBIndex, embed_model: str, *, private: bool = False) -> int:
    """Fill ``vectors`` with every stored vector of ``embed_model`` (at ``vectors.dim``
    dimensions); returns how many rows were added.

    ``LOAD_BATCH_DOCUMENTS`` documents (at most ``LOAD_BATCH_ROWS`` rows) at a time
    through ``add_many``, which leaves the matrix exactly as ``add`` per document would:
    appending one document at a time cost ~45 us each (a normalisation, a copy and a
    snapshot per one-chunk document), most of the two to three minutes a 1M-chunk
    knowledge base took to open (issue 24).

    ``private``: ``vectors`` is nobody else's yet (a reload's new matrix, swapped in when
    full): each batch is appended on a worker thread, not the event loop, which serves
    searches from the old matrix meanwhile."""
    added = 0
    batch: list[KBVectorRows] = []
    rows_in_batch = 0
    async for rows in index.iter_vectors(embed_model, vectors.dim):
        batch.append(rows)
        added += len(rows.chunk_ids)
        rows_in_batch += len(rows.chunk_ids)
        if len(batch) >= LOAD_BATCH_DOCUMENTS or rows_in_batch >= LOAD_BATCH_ROWS:
            await _append(vectors, batch, private)
            batch, rows_in_batch = [], 0
    await _append(vectors, batch, private)
    return added


async def _append(vectors: VectorIndex, batch: list[KBVectorRows], private: bool) -> None:
    if private and batch:
        await asyncio.to_thread(vectors.add_many, batch)
    else:
        vectors.add_many(batch)
