"""Selection latency: ``ToolIndex.rank`` against a straight port of the Go loop.

Measures ranking only — the query is embedded beforehand — for 24, 1,000 and 10,000
tools with 768-dim random unit vectors. The baseline is what the Go service did, in
Python: a loop computing one dot product per tool over lists of floats, then a sort
by score and a cut to top-k. Both run in the same process on the same data, so the
ratio is meaningful even on a noisy machine.

Run from the repository root:  .venv/bin/python bench/selection.py
Writes bench/results/selection.json.
"""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from toolindex.index import ToolIndex  # noqa: E402

DIM = 768
TOP_K = 6
SIZES = (24, 1_000, 10_000)
TARGETS = {"speedup_at_1000": 20.0, "p50_ms_at_24": 0.2, "p50_ms_at_10000": 5.0}


def go_loop_rank(names: list[str], vectors: list[list[float]], query: list[float], top_k: int) -> list[tuple[str, float]]:
    """The Go original's search, ported as is: dot per tool, sort descending, cut."""
    matches: list[tuple[str, float]] = []
    for name, vec in zip(names, vectors):
        n = min(len(vec), len(query))
        score = 0.0
        for i in range(n):
            score += vec[i] * query[i]
        matches.append((name, score))
    matches.sort(key=lambda m: m[1], reverse=True)
    if 0 < top_k < len(matches):
        matches = matches[:top_k]
    return matches


def timed(fn: Callable[[], object], *, runs: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    return samples


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run() -> dict[str, object]:
    rng = np.random.default_rng(20240601)
    rows: list[dict[str, float | int]] = []
    for n in SIZES:
        names = [f"tool_{i:05d}" for i in range(n)]
        matrix = rng.standard_normal((n, DIM)).astype(np.float32)
        index = ToolIndex.from_vectors(names, matrix)
        query = rng.standard_normal(DIM).astype(np.float32)
        query /= np.linalg.norm(query)

        # The loop gets the same normalised data as Python lists (its best case).
        list_vectors = index.matrix.tolist()
        list_query = query.tolist()

        fast = timed(lambda: index.rank(query, top_k=TOP_K), runs=2_000 if n < 10_000 else 300, warmup=50)
        loop_runs = {24: 200, 1_000: 15, 10_000: 3}[n]
        slow = timed(lambda: go_loop_rank(names, list_vectors, list_query, TOP_K), runs=loop_runs, warmup=1)

        ours = [m.name for m in index.rank(query, top_k=TOP_K)]
        theirs = [name for name, _ in go_loop_rank(names, list_vectors, list_query, TOP_K)]
        if ours != theirs:
            raise SystemExit(f"rankings differ at n={n}: {ours} vs {theirs}")

        rows.append(
            {
                "tools": n,
                "numpy_p50_ms": pct(fast, 0.50),
                "numpy_p95_ms": pct(fast, 0.95),
                "loop_p50_ms": pct(slow, 0.50),
                "loop_p95_ms": pct(slow, 0.95),
                "speedup_p50": pct(slow, 0.50) / pct(fast, 0.50),
                "numpy_runs": len(fast),
                "loop_runs": len(slow),
            }
        )
    by_n = {r["tools"]: r for r in rows}
    checks = {
        "speedup_at_1000": by_n[1_000]["speedup_p50"] >= TARGETS["speedup_at_1000"],
        "p50_ms_at_24": by_n[24]["numpy_p50_ms"] <= TARGETS["p50_ms_at_24"],
        "p50_ms_at_10000": by_n[10_000]["numpy_p50_ms"] <= TARGETS["p50_ms_at_10000"],
    }
    return {
        "benchmark": "selection",
        "dim": DIM,
        "top_k": TOP_K,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "machine": platform.machine(),
        "rows": rows,
        "targets": TARGETS,
        "targets_met": checks,
        "median_of": "per-call wall time, time.perf_counter",
    }


def main() -> int:
    result = run()
    print(f"selection latency, rank only, dim={DIM}, top_k={TOP_K}")
    print(f"{'tools':>7} | {'numpy p50':>10} {'p95':>9} | {'go-loop p50':>12} {'p95':>10} | {'speedup':>8}")
    print("-" * 70)
    for r in result["rows"]:  # type: ignore[union-attr]
        print(
            f"{r['tools']:>7} | {r['numpy_p50_ms']:>8.4f}ms {r['numpy_p95_ms']:>7.4f}ms | "
            f"{r['loop_p50_ms']:>10.3f}ms {r['loop_p95_ms']:>8.3f}ms | {r['speedup_p50']:>7.1f}x"
        )
    met = result["targets_met"]
    print("targets:", ", ".join(f"{k} {'OK' if v else 'MISSED'}" for k, v in met.items()))  # type: ignore[union-attr]
    out = ROOT / "bench" / "results" / "selection.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0 if all(met.values()) else 1  # type: ignore[union-attr]


if __name__ == "__main__":
    raise SystemExit(main())
