"""The vector scan's gather of a scattered scope, in blocks (``knowledge.vectors``'
``VectorIndex.scan``): a filter's rows scored without copying them all at once.

Why apart: a numpy kernel with its own measurements and tests
(``tests/test_vector_gather.py``), beside the matrix that calls it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]

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


__all__ = ["GATHER_BLOCK", "gathered_scores"]
