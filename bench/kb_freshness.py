"""What the knowledge base's freshness check costs a search, and what a reload costs.

Before each search the server reads the stored generation (``knowledge/freshness.py``:
one indexed read on a reader connection) to take in what other processes changed. This
measures, on one KB in one process, searches with the check and without it (the check
switched off by hand, which nothing else can do), alternated A/B/A/B so load drifts
hit both alike, and the check alone; and the full reload another process's change
starts (the SQLite matrix read anew).

Run from the repository root:
  .venv/bin/python bench/kb_freshness.py                  # the sample knowledge base
  .venv/bin/python bench/kb_freshness.py --chunks 100000  # a synthetic 100k-chunk corpus
Prints JSON (CPU and wall microseconds per search, medians over the rounds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from knowledge.kb import KnowledgeBase
from storage.sqlite import open_sqlite_storage
from toolindex.hashing import HashingEmbedder

QUERIES = [
    "How do I resume a stream after a disconnect?",
    "which embedder does auto choose",
    "typed metadata filters on buckets",
    "what happens when the model is unreachable",
    "invoice amount vendor",
]
WORDS = "fjord glacier moraine invoice vendor amount contract party datasheet part sensor valve".split()


async def fill(kb: KnowledgeBase, chunks: int) -> None:
    if chunks <= 0:
        await kb.ingest_paths([Path(__file__).resolve().parents[1] / "knowledge" / "sample_kb"])
        return
    batch = []
    for i in range(chunks):
        words = " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 5, 7, 11))
        batch.append({"id": f"doc-{i}", "title": f"Document {i}", "text": f"Record {i}: {words} number {i % 977}."})
        if len(batch) == 5_000:
            await kb.ingest_documents(batch)
            batch = []
    if batch:
        await kb.ingest_documents(batch)


async def searches(kb: KnowledgeBase, n: int) -> tuple[float, float]:
    """CPU and wall microseconds per search, over ``n`` searches one after another."""
    cpu, wall = time.process_time(), time.perf_counter()
    for i in range(n):
        await kb.search(QUERIES[i % len(QUERIES)])
    return (time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


async def main() -> dict[str, Any]:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=0, help="a synthetic corpus of this many chunks (0: the sample KB)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--searches", type=int, default=200)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        storage = await open_sqlite_storage(Path(tmp) / "kb.sqlite3")
        kb = await KnowledgeBase.create(storage.kb_index, HashingEmbedder())
        try:
            started = time.perf_counter()
            await fill(kb, args.chunks)
            filled_s = time.perf_counter() - started
            fresh = kb._fresh
            gens = fresh._gens
            await searches(kb, 20)  # warm caches
            on: list[tuple[float, float]] = []
            off: list[tuple[float, float]] = []
            for _ in range(args.rounds):
                fresh._gens = gens
                on.append(await searches(kb, args.searches))
                fresh._gens = None
                off.append(await searches(kb, args.searches))
            fresh._gens = gens
            cpu, wall = time.process_time(), time.perf_counter()
            n = 2_000
            for _ in range(n):
                await fresh.check()
            check = ((time.process_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6)
            reload_cpu, reload_wall = time.process_time(), time.perf_counter()
            await kb._vectors.reload()
            reload = (time.process_time() - reload_cpu, time.perf_counter() - reload_wall)
            stats = await kb.status.stats()
        finally:
            await kb.aclose()
            await storage.close()

    def med(rows: list[tuple[float, float]], i: int) -> float:
        return round(statistics.median(r[i] for r in rows), 1)

    return {
        "corpus": "sample KB" if args.chunks <= 0 else f"synthetic, {args.chunks} chunks",
        "chunks": stats["chunks"],
        "vectors": stats["vectors"],
        "fill_s": round(filled_s, 1),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "search_us_with_check": {"cpu": med(on, 0), "wall": med(on, 1)},
        "search_us_without_check": {"cpu": med(off, 0), "wall": med(off, 1)},
        "added_us_per_search": {"cpu": round(med(on, 0) - med(off, 0), 1), "wall": round(med(on, 1) - med(off, 1), 1)},
        "check_alone_us": {"cpu": round(check[0], 1), "wall": round(check[1], 1)},
        "full_reload_s": {"cpu": round(reload[0], 3), "wall": round(reload[1], 3)},
        "rounds": args.rounds,
        "searches_per_round": args.searches,
    }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main()), indent=2))
