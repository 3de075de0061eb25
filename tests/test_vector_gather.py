"""A filtered search by meaning scores a scattered scope in blocks (issue 24): the
scores are those of the one-shot gather, bit for bit, and the scan never copies every
row in scope at once (at 1M chunks that copy was 58 MB per search, and its page faults
were most of the filtered tail)."""

from __future__ import annotations

import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np

from knowledge.vector_gather import GATHER_BLOCK, gathered_scores
from knowledge.vectors import VectorIndex

ROOT = Path(__file__).resolve().parent.parent

_SAME_BITS = """
import numpy as np
from knowledge.vector_gather import GATHER_BLOCK, gathered_scores
from knowledge.vectors import VectorIndex
rng = np.random.default_rng(11)
matrix = rng.standard_normal((9_000, 384)).astype(np.float32)
query = rng.standard_normal(384).astype(np.float32)
for count in (1, 3, GATHER_BLOCK - 1, GATHER_BLOCK, GATHER_BLOCK + 5, 3 * GATHER_BLOCK + 2, 2_717):
    rows = np.sort(rng.choice(len(matrix), count, replace=False))
    assert np.array_equal(gathered_scores(matrix, rows, query), matrix[rows] @ query), count
print("same")
"""


def test_blocked_scores_are_the_one_shot_gathers_bit_for_bit() -> None:
    """With the one BLAS thread the service runs (``app/cli/commands.py``), so the
    rankings a filtered search returns cannot move by a rounding."""
    env = {"OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", _SAME_BITS], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "same"


def test_empty_scope_scores_nothing() -> None:
    matrix = np.ones((4, 8), np.float32)
    assert gathered_scores(matrix, np.zeros(0, np.int64), np.ones(8, np.float32)).shape == (0,)


def test_a_scattered_scope_is_scanned_without_copying_all_of_it() -> None:
    """A mask that keeps every seventh row of a 20k x 384 matrix (7.5 MB of rows in
    scope, scattered: the gather path) is scanned with well under that much memory
    allocated at once, and finds what a brute-force ranking finds."""
    rng = np.random.default_rng(4)
    n, dim = 20_000, 384
    index = VectorIndex(dim, capacity=n)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    for start in range(0, n, 1_000):
        index.add(range(start, start + 1_000), f"doc{start}", "b", vectors[start : start + 1_000])
    snap = index.snapshot()
    mask = np.zeros(snap.n, np.bool_)
    mask[::7] = True
    query = vectors[3] / np.linalg.norm(vectors[3])
    scope_bytes = int(mask.sum()) * dim * 4
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        ids, scores, positive = VectorIndex.scan(snap, query, 10, mask)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < scope_bytes / 2, (peak, scope_bytes)
    assert peak >= GATHER_BLOCK * dim * 4  # the block buffer itself is traced: the measure sees numpy's memory
    all_scores = np.where(mask, snap.matrix[: snap.n] @ query, -np.inf)
    order = np.argsort(-all_scores, kind="stable")[:10]
    assert ids.tolist() == snap.chunk_ids[order].tolist()
    assert np.allclose(scores, all_scores[order])
    assert positive == int(((all_scores > 0) & mask).sum())
