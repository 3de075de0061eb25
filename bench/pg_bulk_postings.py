"""PostgreSQL bulk ingest with full-text postings (issue 24 item 4): ``bench/corpus.py``'s
synthetic corpus loaded the way ``agentchat ingest`` and ``bench/corpus.py`` load it
(``kb.bulk_load()``, batches of 10,000 documents), rounds alternating between

* ``before``: the per-statement trigger posting every ``COPY`` with migration 18's
  impact function, which PostgreSQL cannot inline (``kb_index.BULK_POSTINGS`` off and
  that function put back in the fresh database);
* ``after``: migration 19's inlinable impact function, each transaction posting its
  chunks in one sorted statement, a first load building the postings' B-tree at its end.

Each load goes into a fresh database on one server; chunks/s counts everything up to
the end of ``bulk_load`` (the HNSW and postings index builds included). After each
load the postings are checked against the chunks (one row per lexeme of every chunk)
and fingerprinted: both sides must hold the same rows.

Run from the repository root:  .venv/bin/python bench/pg_bulk_postings.py [--chunks N] [--rounds R]
Writes bench/results/pg_bulk_postings.json (pg_bulk_postings_<n>.json for other sizes).
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

from bench._common import write_results  # noqa: E402
from bench.corpus import SCHEMAS, LookupEmbedder, embedding_text, generate, prepare  # noqa: E402

DEFAULT_CHUNKS = 20_000


async def load(n: int, url: str, workdir: Path, side: str) -> dict[str, Any]:
    from knowledge.kb import KnowledgeBase
    from storage.postgres import kb_index, open_postgres_storage

    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    docs = list(generate(n))
    table = {embedding_text(d[3], d[4]): i for i, d in enumerate(docs)}
    bulk_postings = side == "after"
    kb_index.BULK_POSTINGS = bulk_postings
    storage = await open_postgres_storage(url)
    if not bulk_postings:
        # Migration 18's impact function (not inlinable): the code before this change.
        from storage.postgres.migration_steps.postings import KB_POSTINGS

        await storage.db.execute([(KB_POSTINGS[0], ())])
    if side == "no_postings":
        # The floor: no full-text postings at all (the code before migration 18).
        await storage.db.execute([("DROP TRIGGER kb_chunks_postings_add ON kb_chunks", ())])
    kb = await KnowledgeBase.create(
        storage.kb_index, LookupEmbedder(table, np.ascontiguousarray(vectors)), on_close=storage.close
    )
    try:
        for bucket, fields in SCHEMAS.items():
            await kb.create_bucket(bucket, fields)
        by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in SCHEMAS}
        for bucket, doc_id, meta, title, text in docs:
            by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
        del docs
        chunks = 0
        started = time.perf_counter()
        async with kb.bulk_load():
            for bucket, items in by_bucket.items():
                for start in range(0, len(items), 10_000):
                    report = await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
                    assert not report.rejected, report.rejected[:3]
                    chunks += report.chunks
            load_s = time.perf_counter() - started
        total_s = time.perf_counter() - started
        row = await storage.db.fetchone(
            "SELECT (SELECT count(*) FROM kb_postings), (SELECT sum(length(tsv)) FROM kb_chunks),"
            " (SELECT sum(hashtextextended(lexeme || ':' || impact::text || ':' || bucket, 0)"
            "   + chunk_id - (SELECT min(id) FROM kb_chunks)) FROM kb_postings),"
            " (SELECT count(*) FROM pg_indexes WHERE indexname = 'kb_postings_impact')"
        )
        assert row is not None
        postings, lexemes, fingerprint, indexed = row
        return {
            "chunks": chunks,
            "chunks_per_s": round(chunks / total_s, 1),
            "rows_s": round(load_s, 2),
            "index_builds_s": round(total_s - load_s, 2),
            "total_s": round(total_s, 2),
            "postings": int(postings),
            "postings_match_chunks": side == "no_postings" or (int(postings) == int(lexemes) and indexed == 1),
            "fingerprint": str(fingerprint),
        }
    finally:
        kb_index.BULK_POSTINGS = True
        await kb.aclose()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--floor", action="store_true", help="also load without any postings (the code before them)")
    args = ap.parse_args()
    from tests.support.postgres import TestPostgres

    n = args.chunks
    workdir = Path(tempfile.mkdtemp(prefix="agentchat-pgbulk-"))
    prepare(n, workdir)
    server = TestPostgres().start()
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            sides = ["before", "after", *(["no_postings"] if args.floor else [])]
            for side in sides if r % 2 == 0 else sides[::-1]:
                db = f"bulk_{r}_{side}"
                server.admin(f'CREATE DATABASE "{db}"')
                load1 = os.getloadavg()[0]
                result = asyncio.run(load(n, server.url(db), workdir, side))
                result.update(side=side, round=r, load_avg_1m=[round(load1, 2), round(os.getloadavg()[0], 2)])
                print(result, flush=True)
                runs.append(result)
                server.admin(f'DROP DATABASE "{db}"')
    finally:
        server.stop()
    summary: dict[str, Any] = {}
    for side in sorted({x["side"] for x in runs}):
        rates = sorted(x["chunks_per_s"] for x in runs if x["side"] == side)
        summary[side] = {"chunks_per_s": rates, "median": rates[len(rates) // 2]}
    summary["same_postings_both_sides"] = len({x["fingerprint"] for x in runs if x["side"] != "no_postings"}) == 1
    summary["postings_exact_every_run"] = all(x["postings_match_chunks"] for x in runs)
    name = "pg_bulk_postings" if n == DEFAULT_CHUNKS else f"pg_bulk_postings_{n}"
    write_results(
        name,
        {
            "chunks": n,
            "server": "pgserver wheel (PostgreSQL 16, pgvector), fsync off, shared_buffers 64MB",
            "summary": summary,
            "runs": runs,
        },
    )
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
