"""PostgreSQL dense-side recall against cost (issue 24 item 2): ``bench/corpus.py``'s
synthetic corpus on the PostgreSQL engine, then its semantic queries answered through
the HNSW index with ``hnsw.ef_search`` at several multiples of what a scope needs
(``kb_vectors.EF_SEARCH_FACTOR``), each beside the exact scan, query by query
(alternating, so the machine's load hits every setting alike).

``agreement_at_10``: the mean overlap of a search's top-10 documents with the exact
scan's, through ``KnowledgeBase.search`` (fusion and re-ranking included) — the figure
``bench/corpus.py`` reports against SQLite's exact in-memory scan.

Run from the repository root:  .venv/bin/python bench/pg_recall.py [--chunks N] [--database-url URL]
Writes bench/results/corpus_pg_recall.json (corpus_pg_recall_<n>.json for other sizes).

``--database-url`` measures a database that already holds this corpus — the one
``bench/corpus.py`` just loaded on a server it was pointed at with
``AGENT_TEST_DATABASE_URL`` — instead of starting a server and loading it again: at 1M
the load and index build take half an hour of a shared two-core machine, and only one
such build should run at a time. The load is skipped only when the three buckets hold
exactly the corpus's documents; anything else is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
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
from bench.corpus import DIM, SCHEMAS, LookupEmbedder, embedding_text, generate, prepare, query_set  # noqa: E402

FACTORS = (2, 4, 8)


async def _loaded(db: Any, n: int) -> bool:
    """Whether the database already holds this corpus: per bucket, the documents
    ``generate(n)`` makes (one chunk each; kind ``i % 4``: two invoices, a contract, a
    datasheet). Another corpus there is refused rather than measured."""
    rows = await db.fetchall("SELECT bucket, count(*), coalesce(sum(chunk_count), 0) FROM kb_documents GROUP BY bucket")
    held = {str(b): (int(d), int(c)) for b, d, c in rows}
    per = {b: sum(n // 4 + (k < n % 4) for k in range(4) if _BUCKET_OF_KIND[k] == b) for b in SCHEMAS}
    expected = {b: (per[b], per[b]) for b in SCHEMAS}
    if held == expected:
        return True
    if held:
        raise SystemExit(f"the database holds another corpus: {held}, expected {expected}")
    return False


_BUCKET_OF_KIND = ("invoices", "invoices", "contracts", "datasheets")


async def run(n: int, url: str, workdir: Path, *, reuse: bool = False) -> dict[str, Any]:
    from knowledge.kb import KBConfig, KnowledgeBase
    from storage.postgres import kb_vectors, open_postgres_storage

    storage = await open_postgres_storage(url)
    try:
        loaded = reuse and await _loaded(storage.db, n)
    except BaseException:
        await storage.close()
        raise
    # Queries are projected (``LookupEmbedder.embed``); document vectors only for a load.
    embedder = LookupEmbedder({}, np.zeros((0, DIM), np.float32))
    by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in SCHEMAS}
    if not loaded:
        prepare(n, workdir)
        vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
        docs = list(generate(n))
        embedder = LookupEmbedder(
            {embedding_text(d[3], d[4]): i for i, d in enumerate(docs)}, np.ascontiguousarray(vectors)
        )
        for bucket, doc_id, meta, title, text in docs:
            by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
        del docs
    kb = await KnowledgeBase.create(
        storage.kb_index, embedder, config=KBConfig(batch_documents=2000), on_close=storage.close
    )
    ingest_s: float | None = None
    try:
        if not loaded:
            for bucket, fields in SCHEMAS.items():
                await kb.create_bucket(bucket, fields)
            started = time.perf_counter()
            async with kb.bulk_load():
                for bucket, items in by_bucket.items():
                    for start in range(0, len(items), 10_000):
                        await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
            ingest_s = time.perf_counter() - started
        by_bucket.clear()
        version = await storage.db.fetchone("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        indexes = await storage.db.fetchall(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'kb_chunks' AND indexdef ILIKE %s", ("%using hnsw%",)
        )
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
            "ingest_seconds_with_index_build": round(ingest_s, 1) if ingest_s is not None else None,
            **({"loaded_by": "loaded before this run (--database-url), e.g. by bench/corpus.py"} if loaded else {}),
            "agreement_at_10": {s: round(float(np.mean(v)), 4) for s, v in overlap.items()},
            "latency_ms": {s: summary(v) for s, v in timings.items()},
            "pgvector": str(version[0]) if version else None,
            "hnsw_indexes": [str(r[0]) for r in indexes],
            "hnsw": "pgvector defaults (m 16, ef_construction 64) unless the index definition says otherwise; "
            "no iterative scans before 0.8; hnsw.ef_search stops at 1,000",
        }
    finally:
        await kb.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--database-url", help="a database already holding this corpus (see the module docstring)")
    args = ap.parse_args()
    from tests.support.postgres import TestPostgres

    load_start = [round(x, 2) for x in os.getloadavg()]
    workdir = Path(tempfile.mkdtemp(prefix="agentchat-pgrecall-"))
    try:
        if args.database_url:
            result = asyncio.run(run(args.chunks, args.database_url, workdir, reuse=True))
        else:
            server = TestPostgres().start()
            try:
                server.admin('CREATE DATABASE "recall"')
                result = asyncio.run(run(args.chunks, server.url("recall"), workdir))
            finally:
                server.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["load_average_1_5_15"] = {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]}
    name = "corpus_pg_recall" if args.chunks == 100_000 else f"corpus_pg_recall_{args.chunks}"
    print(result)
    print(f"wrote {write_results(name, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
