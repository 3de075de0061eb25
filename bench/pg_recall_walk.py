"""How far a big bucket's HNSW walk must go (issue 24 item 2): one bucket of a database
``bench/pg_recall.py --buckets B --keep`` loaded, its queries run as the product's
whole-bucket statement (``storage.postgres.kb_vector_scan``: an iterative scan handing
``pool`` chunks to an exact re-rank) under raw pgvector settings the product does not
expose (``hnsw.max_scan_tuples``, ``hnsw.scan_mem_multiplier``, the pool), each beside
numpy's exact top 10 within the bucket.

Why a separate bench: ``pg_recall`` measures the product's planner (``VectorSearch``),
whose whole-bucket plan fixes the scan's tuples (``MIN_SCAN_TUPLES``) and memory; this
one finds which of those limits a walk hits, so the planner is changed only where a
measurement says so. Settings alternate query by query, so the machine's load hits
them alike. ``--graph NAME``: measure that index of the bucket (another graph built
beside the product's, e.g. with a larger ``m``); the bucket's other graphs are dropped
inside each query's transaction and the drop rolled back, so the planner sees one.

    .venv/bin/python bench/pg_recall_walk.py --database-url URL --workdir DIR --bucket invoices \\
        --settings product,pool5000_t100k_mem16 --tag invoices_1m
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import DIM, query_set  # noqa: E402

_BUCKET_OF_KIND = ("invoices", "invoices", "contracts", "datasheets")  # bench/pg_recall.py's
LIMIT = 100  # KBConfig.candidates


@dataclass(frozen=True, slots=True)
class Walk:
    """One query's settings: ``pool`` 0 is a plain scan (``ef_search`` wide)."""

    pool: int
    max_scan_tuples: int = 20_000
    mem: int = 1
    ef_search: int = 1000
    order: str = "relaxed_order"


#: ``product``: what ``VectorSearch.graph_plan`` gives a whole bucket past
#: ``LARGE_GRAPH_VECTORS`` today (pool 20 x 100, tuples max(20,000, 2 x pool), memory 1).
SETTINGS: dict[str, Walk] = {
    "plain_ef1000": Walk(0),
    "product": Walk(2000),
    "pool2000_t20k_mem8": Walk(2000, 20_000, 8),
    "pool2000_t100k_mem16": Walk(2000, 100_000, 16),
    "pool3000_t100k_mem16": Walk(3000, 100_000, 16),
    "pool3500_t40k_mem8": Walk(3500, 40_000, 8),
    "pool3500_t50k_mem4": Walk(3500, 50_000, 4),
    "pool3500_t50k_mem8": Walk(3500, 50_000, 8),
    "pool4000_t40k_mem4": Walk(4000, 40_000, 4),
    "pool4000_t50k_mem8": Walk(4000, 50_000, 8),
    "pool4000_t100k_mem16": Walk(4000, 100_000, 16),
    "pool5000_t20k_mem16": Walk(5000, 20_000, 16),
    "pool5000_t50k_mem16": Walk(5000, 50_000, 16),
    "pool5000_t100k_mem1": Walk(5000, 100_000, 1),
    "pool5000_t100k_mem4": Walk(5000, 100_000, 4),
    "pool5000_t100k_mem16": Walk(5000, 100_000, 16),
    "pool8000_t200k_mem32": Walk(8000, 200_000, 32),
    "strict_pool5000_t100k_mem16": Walk(5000, 100_000, 16, order="strict_order"),
}


def truth(workdir: Path, bucket: str) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The bucket's queries (indexes into ``queries.npy``), their exact top 100 chunk ids
    within the bucket and those cosines (numpy over ``vectors.npy``; ties by id)."""
    qvecs = np.load(workdir / "queries.npy").astype(np.float32)
    qi = [i for i, q in enumerate(query_set()) if q["bucket"] == bucket]
    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    idx = np.array([i for i in range(len(vectors)) if _BUCKET_OF_KIND[i % 4] == bucket])
    sims = np.empty((len(qi), len(idx)), np.float32)
    for s in range(0, len(idx), 100_000):
        block = np.asarray(vectors[idx[s : s + 100_000]], np.float32)
        norms = np.linalg.norm(block, axis=1)
        norms[norms == 0] = 1
        sims[:, s : s + len(block)] = (qvecs[qi] @ block.T) / norms
    order = np.argsort(-sims, axis=1, kind="stable")[:, :LIMIT]
    return qi, idx[order] + 1, np.take_along_axis(sims, order, axis=1)


async def _one(cur: Any) -> str:
    """The first column of a query's one row, as text."""
    row = await cur.fetchone()
    if row is None:
        raise SystemExit("the server answered no row")
    return str(row[0])


async def run(url: str, workdir: Path, bucket: str, names: list[str], graph: str, reps: int) -> dict[str, Any]:
    import psycopg
    from pgvector.psycopg import register_vector_async

    from storage.postgres.kb_graphs import graph_name

    qi, ids, sims = truth(workdir, bucket)
    qvecs = np.load(workdir / "queries.npy").astype(np.float32)
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await register_vector_async(conn)
    try:
        cur = await conn.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunks' AND indexdef LIKE %s",
            (f"%bucket = '{bucket}'%",),
        )
        graphs = [str(r[0]) for r in await cur.fetchall()]
        graph = graph or graph_name(DIM, bucket)
        if graph not in graphs:
            raise SystemExit(f"no graph {graph} on bucket {bucket}: {graphs}")
        others = [g for g in graphs if g != graph]
        cur = await conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s", (graph,))
        indexdef = await _one(cur)
        dist = f"c.embedding::vector({DIM}) <=> %(q)s::vector({DIM})"
        cond = f"vector_dims(c.embedding) = {DIM} AND c.bucket = '{bucket}'"
        agree: dict[str, list[float]] = {n: [] for n in names}
        recall100: dict[str, list[float]] = {n: [] for n in names}
        ms: dict[str, list[float]] = {n: [] for n in names}
        for _ in range(reps):
            for j, q in enumerate(qi):
                for name in names:
                    w = SETTINGS[name]
                    async with conn.transaction(force_rollback=True):
                        for other in others:  # rolled back with the transaction
                            await conn.execute(f'DROP INDEX "{other}"')  # type: ignore[arg-type]
                        await conn.execute(f"SET LOCAL hnsw.ef_search = {w.ef_search}")  # type: ignore[arg-type]
                        if w.pool:
                            for setting in (
                                f"hnsw.iterative_scan = {w.order}",
                                f"hnsw.max_scan_tuples = {w.max_scan_tuples}",
                                f"hnsw.scan_mem_multiplier = {w.mem}",
                            ):
                                await conn.execute(f"SET LOCAL {setting}")  # type: ignore[arg-type]
                            sql = (
                                f"WITH s AS MATERIALIZED (SELECT c.id, {dist} AS dist FROM kb_chunks c WHERE {cond} "
                                f"ORDER BY {dist} LIMIT %(pool)s) SELECT id FROM s ORDER BY dist, id LIMIT {LIMIT}"
                            )
                        else:
                            sql = f"SELECT c.id FROM kb_chunks c WHERE {cond} ORDER BY {dist} LIMIT {LIMIT}"
                        t0 = time.perf_counter()
                        cur = await conn.execute(sql, {"q": qvecs[q], "pool": w.pool})  # type: ignore[arg-type]
                        got = [int(r[0]) for r in await cur.fetchall()]
                        ms[name].append((time.perf_counter() - t0) * 1000)
                    agree[name].append(len(set(got[:10]) & set(ids[j][:10].tolist())) / 10)
                    recall100[name].append(len(set(got) & set(ids[j].tolist())) / LIMIT)
        cur = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = await _one(cur)
        cur = await conn.execute("SHOW work_mem")
        work_mem = await _one(cur)
    finally:
        await conn.close()
    return {
        "pgvector": version,
        "work_mem": work_mem,
        "graph": indexdef,
        "queries": len(qi),
        "distinct_queries": len({qvecs[q].tobytes() for q in qi}),
        "exact_cosine_top1_10th_100th_mean": [round(float(sims[:, k].mean()), 4) for k in (0, 9, 99)],
        "settings": {n: asdict(SETTINGS[n]) for n in names},
        "agreement_at_10": {n: round(float(np.mean(v)), 4) for n, v in agree.items()},
        "agreement_at_10_min": {n: min(v) for n, v in agree.items()},
        "recall_at_100": {n: round(float(np.mean(v)), 4) for n, v in recall100.items()},
        "latency_ms": {n: summary(v) for n, v in ms.items()},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", required=True, help="a database bench/pg_recall.py --keep loaded")
    ap.add_argument("--workdir", type=Path, required=True, help="its vectors.npy / queries.npy (read only)")
    ap.add_argument("--bucket", default="invoices")
    ap.add_argument("--settings", default="plain_ef1000,product,pool5000_t100k_mem16")
    ap.add_argument("--graph", default="", help="the bucket's index to measure (default: the product's)")
    ap.add_argument("--reps", type=int, default=1, help="passes over the queries")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    for n in names:
        if n not in SETTINGS:
            raise SystemExit(f"unknown setting {n!r}: {', '.join(SETTINGS)}")
    load_start = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(run(args.database_url, args.workdir, args.bucket, names, args.graph, args.reps))
    out = {
        "bucket": args.bucket,
        "limit": LIMIT,
        "reps": args.reps,
        **result,
        "load_average_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
    }
    for n in names:
        print(n, out["agreement_at_10"][n], out["recall_at_100"][n], out["latency_ms"][n])
    print("load", out["load_average_1_5_15"])
    name = "corpus_pg_recall_walk" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_results(name, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
