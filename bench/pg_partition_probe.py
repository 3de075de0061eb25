"""What an HNSW graph per bucket would give (issue 24 item 6, the 10M plan), measured on
a database ``bench/corpus.py`` already loaded, without building partitioning.

Today one HNSW graph holds every chunk, and a bucket's search walks it and keeps the
neighbours that are in the bucket: at 1M chunks a bucket of 25 % sees about a quarter of
``hnsw.ef_search`` (which pgvector 0.6.2 caps at 1,000 and cannot iterate past). A list
partition per bucket would give each bucket a graph of its own. This copies one bucket's
vectors into a table of their own, builds the same HNSW index on it (timed), and asks the
bucket's queries from ``bench/corpus.py``'s query set, alternating query by query:

* ``exact`` — every vector of the bucket scored (the reference);
* ``own_ef_<n>`` — the bucket's own graph at ``hnsw.ef_search`` n;
* ``shared_ef_1000`` — today's shared graph, filtered to the bucket, at the largest ``ef_search``.

``recall_at_10`` / ``recall_at_100``: the share of the exact top-10 / top-100 chunks a
setting returns (100 is what ``KnowledgeBase.search`` asks the dense side for). The copy
is dropped at the end.

Run from the repository root, against a database holding the corpus:
  .venv/bin/python bench/pg_partition_probe.py --database-url postgresql://…/corpus [--bucket datasheets]
Writes bench/results/corpus_pg_recall_per_bucket_<n>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import DIM, SCHEMAS, BowProjection, query_set  # noqa: E402

EF_VALUES = (100, 200, 400, 1000)
PROBE = "kb_probe_bucket"


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in v) + "]"


async def run(url: str, bucket: str, m: int, ef_construction: int) -> dict[str, Any]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:

        async def one(sql: str, params: Any = None) -> Any:
            cur = await conn.execute(sql, params)
            row = await cur.fetchone()
            return row[0] if row else None

        version = await one("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        await conn.execute(f"DROP TABLE IF EXISTS {PROBE}")
        t0 = time.perf_counter()
        await conn.execute(
            f"CREATE TABLE {PROBE} AS SELECT c.id, c.embedding::vector({DIM}) AS e FROM kb_chunks c "
            f"JOIN kb_documents d ON d.id = c.doc_id WHERE d.bucket = %s AND vector_dims(c.embedding) = {DIM}",
            (bucket,),
        )
        copy_s = time.perf_counter() - t0
        rows = int(await one(f"SELECT count(*) FROM {PROBE}"))
        await conn.execute("SET maintenance_work_mem = '2GB'")
        t0 = time.perf_counter()
        await conn.execute(
            f"CREATE INDEX {PROBE}_hnsw ON {PROBE} USING hnsw (e vector_cosine_ops) "
            f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})"
        )
        build_s = time.perf_counter() - t0
        await conn.execute(f"ANALYZE {PROBE}")
        index_mb = int(await one(f"SELECT pg_relation_size('{PROBE}_hnsw')")) / 2**20
        table_bytes = int(await one(f"SELECT pg_total_relation_size('{PROBE}') - pg_relation_size('{PROBE}_hnsw')"))
        table_mb = table_bytes / 2**20
        shared_mb = await one(f"SELECT pg_relation_size('kb_chunks_hnsw_{DIM}')")

        projection = BowProjection(DIM)
        queries = [q for q in query_set() if q["bucket"] == bucket]
        settings = ["exact", *(f"own_ef_{ef}" for ef in EF_VALUES), "shared_ef_1000"]
        timings: dict[str, list[float]] = {s: [] for s in settings}
        recall10: dict[str, list[float]] = {s: [] for s in settings if s != "exact"}
        recall100: dict[str, list[float]] = {s: [] for s in settings if s != "exact"}

        async def ids(sql: str, params: dict[str, Any], name: str, ef: int | None = None) -> list[int]:
            async with conn.transaction():
                if ef is not None:
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {int(ef)}")
                else:
                    await conn.execute("SET LOCAL enable_indexscan = off")
                t0 = time.perf_counter()
                cur = await conn.execute(sql, params)
                got = [int(r[0]) for r in await cur.fetchall()]
                timings[name].append((time.perf_counter() - t0) * 1000)
            return got

        own = f"SELECT id FROM {PROBE} ORDER BY e <=> %(q)s::vector({DIM}) LIMIT 100"
        exact_sql = f"SELECT id FROM {PROBE} ORDER BY e <=> %(q)s::vector({DIM}), id LIMIT 100"
        shared = (
            f"SELECT c.id FROM kb_chunks c WHERE vector_dims(c.embedding) = {DIM} "
            "AND c.doc_id IN (SELECT id FROM kb_documents WHERE bucket = %(b)s) "
            f"ORDER BY c.embedding::vector({DIM}) <=> %(q)s::vector({DIM}) LIMIT 100"
        )
        for i, q in enumerate(queries):
            params = {"q": _vec(projection.embed(q["text"])), "b": bucket}
            exact = await ids(exact_sql, params, "exact")
            plans: list[tuple[str, str, int]] = [(f"own_ef_{ef}", own, ef) for ef in EF_VALUES]
            plans.append(("shared_ef_1000", shared, 1000))
            for name, sql, ef in plans[i % len(plans) :] + plans[: i % len(plans)]:  # rotate the order
                got = await ids(sql, params, name, ef)
                recall10[name].append(len(set(got[:10]) & set(exact[:10])) / max(1, min(10, len(exact))))
                recall100[name].append(len(set(got) & set(exact)) / max(1, len(exact)))
        await conn.execute(f"DROP TABLE {PROBE}")
    return {
        "bucket": bucket,
        "bucket_chunks": rows,
        "queries": len(queries),
        "pgvector": version,
        "hnsw": {"m": m, "ef_construction": ef_construction},
        "copy_seconds": round(copy_s, 1),
        "index_build_seconds": round(build_s, 1),
        "index_mb": round(index_mb, 1),
        "table_mb": round(table_mb, 1),
        "shared_index_mb": round(int(shared_mb) / 2**20, 1) if shared_mb is not None else None,
        "recall_at_10": {k: round(float(np.mean(v)), 4) for k, v in recall10.items()},
        "recall_at_100": {k: round(float(np.mean(v)), 4) for k, v in recall100.items()},
        "latency_ms": {k: summary(v) for k, v in timings.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", required=True, help="a database bench/corpus.py loaded")
    ap.add_argument("--bucket", default="datasheets", choices=sorted(SCHEMAS))
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=64)
    args = ap.parse_args()
    load_start = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(run(args.database_url, args.bucket, args.m, args.ef_construction))

    async def total() -> int:
        import psycopg

        async with await psycopg.AsyncConnection.connect(args.database_url) as conn:
            cur = await conn.execute("SELECT count(*) FROM kb_chunks")
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    n = asyncio.run(total())
    result = {
        "chunks": n,
        **result,
        "load_average_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
    }
    print(result)
    print(f"wrote {write_results(f'corpus_pg_recall_per_bucket_{n}', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
