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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

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
        self._row_of_chunk: dict[int, int] = {}
        self._rows_of_doc: dict[int, list[int]] = {}
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
        row = n
        chunk_list = ids.tolist()
        for dcode, count in zip(dcodes, counts, strict=True):
            assert dcode is not None
            rows_list = self._rows_of_doc.setdefault(dcode, [])
            for cid in chunk_list[row - n : row - n + count]:
                self._row_of_chunk[cid] = row
                rows_list.append(row)
                row += 1
        self._snap = Snapshot(snap.matrix, snap.chunk_ids, snap.doc_codes, snap.bucket_codes, snap.alive, n + k)

    def remove_document(self, doc_id: str) -> int:
        code = self._doc_code.get(doc_id)
        if code is None:
            return 0
        rows = self._rows_of_doc.pop(code, [])
        snap = self._snap
        for r in rows:
            snap.alive[r] = False
            self._row_of_chunk.pop(int(snap.chunk_ids[r]), None)
        self._dead += len(rows)
        if self._dead > 4096 and self._dead > self._snap.n // 4:
            self.compact()
        return len(rows)

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
        self._row_of_chunk = {int(c): i for i, c in enumerate(new.chunk_ids[:n].tolist())}
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
        pairs = [(c, self._row_of_chunk.get(c)) for c in chunk_ids]
        found = [(c, r) for c, r in pairs if r is not None and r < snap.n]
        if not found:
            return {}
        rows = np.fromiter((r for _, r in found), dtype=np.int64, count=len(found))
        scores = snap.matrix[rows] @ query.astype(np.float32, copy=False).reshape(-1)
        return {c: float(s) for (c, _), s in zip(found, scores.tolist(), strict=True)}

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


#: Rows gathered at a time by ``gathered_scores``: 1,024 rows of 384 floats is 1.5 MB, in
#: cache for the product and under numpy's 4 MB threshold for asking the kernel for huge
#: pages (``madvise``), so the buffer is plain heap memory that the allocator hands back
#: search after search.
GATHER_BLOCK = 1_024


def gathered_scores(matrix: F32, rows: I64, query: F32) -> F32:
    """``matrix[rows] @ query``, gathering ``GATHER_BLOCK`` rows at a time into one small
    buffer instead of copying every row in scope at once.

    Why: at 1M chunks a filter keeping 38k invoices gathered a 58 MB copy per search: a
    fresh mapping each time, whose pages the kernel faults in (huge pages, zeroed, with
    compaction when memory is fragmented) before the product reads them once; that
    allocation was most of a filtered search by meaning's tail (issue 24). Each row's
    score is the same dot product either way: the block is a multiple of the four rows
    OpenBLAS's kernel takes at a time, so every row meets the same kernel as in the
    one-shot product, and the scores (and so the rankings) are bit for bit the same
    (``tests/test_vector_gather.py``, with the one BLAS thread the service runs).
    """
    out = np.empty(len(rows), np.float32)
    if not len(rows):
        return out
    buf = np.empty((min(GATHER_BLOCK, len(rows)), matrix.shape[1]), np.float32)
    for start in range(0, len(rows), GATHER_BLOCK):
        part = rows[start : start + GATHER_BLOCK]
        k = len(part)
        # ``clip``: the rows are in range (positions of a mask of the matrix); the
        # default ``raise`` would copy through a second buffer of the block's size.
        np.take(matrix, part, axis=0, out=buf[:k], mode="clip")
        np.matmul(buf[:k], query, out=out[start : start + k])
    return out


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


async def load_vectors(vectors: VectorIndex, index: KBIndex, embed_model: str) -> int:
    """Fill ``vectors`` with every stored vector of ``embed_model`` (at ``vectors.dim``
    dimensions); returns how many rows were added.

    ``LOAD_BATCH_DOCUMENTS`` documents (at most ``LOAD_BATCH_ROWS`` rows) at a time
    through ``add_many``, which leaves the matrix exactly as ``add`` per document would:
    appending one document at a time cost ~45 us each (a normalisation, a copy and a
    snapshot per one-chunk document), most of the two to three minutes a 1M-chunk
    knowledge base took to open (issue 24)."""
    added = 0
    batch: list[KBVectorRows] = []
    rows_in_batch = 0
    async for rows in index.iter_vectors(embed_model, vectors.dim):
        batch.append(rows)
        added += len(rows.chunk_ids)
        rows_in_batch += len(rows.chunk_ids)
        if len(batch) >= LOAD_BATCH_DOCUMENTS or rows_in_batch >= LOAD_BATCH_ROWS:
            vectors.add_many(batch)
            batch, rows_in_batch = [], 0
    vectors.add_many(batch)
    return added
