"""PostgreSQL dense-side recall against cost (issue 24 item 2): ``bench/corpus.py``'s
synthetic corpus on the PostgreSQL engine, then its semantic queries answered through
the HNSW index with ``hnsw.ef_search`` at several multiples of what a scope needs
(``kb_vectors.EF_SEARCH_FACTOR``), each beside the exact scan, query by query
(alternating, so the machine's load hits every setting alike).

``agreement_at_10``: the mean overlap of a search's top-10 documents with the exact
scan's, through ``KnowledgeBase.search`` (fusion and re-ranking included) — the figure
``bench/corpus.py`` reports against SQLite's exact in-memory scan.

Run from the repository root:  .venv/bin/python bench/pg_recall.py [--chunks N]
Writes bench/results/corpus_pg_recall.json (corpus_pg_recall_<n>.json for other sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import SCHEMAS, LookupEmbedder, embedding_text, generate, prepare, query_set  # noqa: E402

FACTORS = (2, 4, 8)


async def run(n: int, url: str, workdir: Path) -> dict[str, Any]:
    from knowledge.kb import KBConfig, KnowledgeBase
    from storage.postgres import kb_vectors, open_postgres_storage

    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    docs = list(generate(n))
    table = {embedding_text(d[3], d[4]): i for i, d in enumerate(docs)}
    storage = await open_postgres_storage(url)
    kb = await KnowledgeBase.create(
        storage.kb_index,
        LookupEmbedder(table, np.ascontiguousarray(vectors)),
        config=KBConfig(batch_documents=2000),
        on_close=storage.close,
    )
    try:
        for bucket, fields in SCHEMAS.items():
            await kb.create_bucket(bucket, fields)
        by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in SCHEMAS}
        for bucket, doc_id, meta, title, text in docs:
            by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
        del docs
        started = time.perf_counter()
        async with kb.bulk_load():
            for bucket, items in by_bucket.items():
                for start in range(0, len(items), 10_000):
                    await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
        ingest_s = time.perf_counter() - started
        index = storage.kb_index
        default_exact = index.exact_scope_vectors
        queries = query_set()
        settings = [f"ef_x{f}" for f in FACTORS]
        timings: dict[str, list[float]] = {s: [] for s in [*settings, "exact"]}
        overlap: dict[str, list[float]] = {s: [] for s in settings}

        async def top(q: dict[str, Any], name: str) -> list[str]:
            t0 = time.perf_counter()
            res = await kb.search(q["text"], bucket=q["bucket"], top_k=10, mode="semantic")
            timings[name].append((time.perf_counter() - t0) * 1000)
            return [h.doc_id for h in res.hits]

        for q in queries[:3]:  # warm-up
            await kb.search(q["text"], bucket=q["bucket"], mode="semantic")
        for q in queries:
            index.exact_scope_vectors = 10**9
            exact = set(await top(q, "exact"))
            index.exact_scope_vectors = default_exact
            for factor, name in zip(FACTORS, settings, strict=True):
                kb_vectors.EF_SEARCH_FACTOR = factor
                got = set(await top(q, name))
                overlap[name].append(len(got & exact) / max(1, len(exact)))
        return {
            "chunks": n,
            "ingest_seconds_with_index_build": round(ingest_s, 1),
            "agreement_at_10": {s: round(float(np.mean(v)), 4) for s, v in overlap.items()},
            "latency_ms": {s: summary(v) for s, v in timings.items()},
            "hnsw": "pgvector 0.6.2 defaults (m 16, ef_construction 64); no iterative scans before 0.8",
        }
    finally:
        await kb.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    args = ap.parse_args()
    from tests.support.postgres import TestPostgres

    load_start = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="agentchat-pgrecall-"))
    prepare(args.chunks, workdir)
    server = TestPostgres().start()
    try:
        server.admin('CREATE DATABASE "recall"')
        result = asyncio.run(run(args.chunks, server.url("recall"), workdir))
    finally:
        server.stop()
    result["load_average_1_5_15"] = {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]}
    name = "corpus_pg_recall" if args.chunks == 100_000 else f"corpus_pg_recall_{args.chunks}"
    print(result)
    print(f"wrote {write_results(name, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
