"""Slicing a big bucket's HNSW graph (issue 24 item 2): does a 500k-vector bucket walked as
two 250k graphs agree with the exact search where its one graph does not?

At 1M (``bench/corpus.py``) the 250k buckets' graphs agree 1.0 with the exact top 10 under
the product's whole-bucket plan (an iterative scan handing a pool of 2,000 to an exact
re-rank, ``hnsw.max_scan_tuples`` 20,000, ``scan_mem_multiplier`` 1) and the 500k invoices
bucket's graph 0.515 (``bench/pg_recall_walk.py``). This bench loads the invoices bucket
alone (``bench/pg_recall.py``'s loader, its graph built by the product), then builds two
more partial indexes over its halves by insertion order — ``id <= SPLIT`` and ``id > SPLIT``,
250k vectors each, what a slice column assigned from the bucket's running count holds — and
measures, query by query with the settings alternating (so the machine's load hits them
alike), the single graph under the product's plan and under pool 3,500 / 50k tuples /
memory x4, against both slices walked in one statement (each slice's ``ORDER BY ... LIMIT
pool`` under a ``UNION ALL``, the union re-ranked exactly) under several per-slice plans.

Queries: the invoices kind of ``bench.corpus.query_set`` has only 15 texts ("invoice for
<service>"; 11 distinct among the 20 the corpus asks), so every single-service text and
pairs ("invoice for <s1> and <s2>", the two services an invoice names) drawn with a fixed
seed are embedded the way ``bench.corpus.prepare`` embeds queries (``BowProjection``).
Truth: numpy over ``vectors.npy``, the bucket's exact top 100 by cosine, ties by id.

Measured (2026-11-27, ``bench/results/corpus_pg_recall_slices_invoices_1m*.json``, 40
distinct queries): agreement follows how many candidates the walks hand over in all,
not how the graph is cut — two 250k slices at a pool of 2,000 each agree 0.78, one 500k
graph at 3,500 0.88, four 125k slices at 2,000 each 0.97, one graph at 8,000 1.0 — and
each slice's walk costs about what the one graph's does, so slicing buys no agreement
per millisecond. A binary-quantized graph (``build --kind bq``, the ``bq_*`` settings)
re-ranked exactly needs a pool of 16,000 for 0.96 and is slower still (``docs/scaling.md``).

    .venv/bin/python bench/pg_recall_slices.py load --workdir DIR       # prints the URL, keeps the server
    .venv/bin/python bench/pg_recall_slices.py measure --database-url URL --workdir DIR --tag invoices_1m
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
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
from bench.corpus import DIM, SERVICES, BowProjection  # noqa: E402

BUCKET = "invoices"
_BUCKET_OF_KIND = ("invoices", "invoices", "contracts", "datasheets")
N = 1_000_000
#: Chunk ``i`` (0-based) has id ``i + 1``; invoices are ``i % 4`` in {0, 1}, so the first
#: 250,000 invoices have ids up to 500,000.
SPLIT = 500_000
LIMIT = 100  # KBConfig.candidates
#: Slice sets, each a list of chunk-id ranges ``[lo, hi)``: ``halves`` are 250k invoices
#: each (what a slice of at most 250k assigned from the bucket's running count holds, and
#: what fixed ranges of 500k chunk ids give a bucket with half the inserts), ``quarters``
#: 125k each (fixed ranges of 250k chunk ids: at most 250k vectors a slice whatever the
#: bucket's share of the inserts).
#: Each slice is (index name, condition on the chunk id); a query names the condition
#: as written so that the planner proves the partial index's predicate from it.
SLICE_SETS: dict[str, tuple[tuple[str, str], ...]] = {
    "halves": ((f"kb_chunks_hnsw_{DIM}_slice0", f"id <= {SPLIT}"), (f"kb_chunks_hnsw_{DIM}_slice1", f"id > {SPLIT}")),
    "quarters": tuple(
        (f"kb_chunks_hnsw_{DIM}_quarter{k}", f"id >= {1 + k * 250_000} AND id < {1 + (k + 1) * 250_000}")
        for k in range(4)
    ),
}


@dataclass(frozen=True, slots=True)
class Walk:
    """One query's plan: ``sliced`` walks each slice's graph for ``pool`` chunks (``pool``
    0: a plain scan ``ef_search`` wide, no iterating); otherwise the bucket's one graph."""

    sliced: str  # a SLICE_SETS key, or "" for the bucket's one graph
    pool: int
    max_scan_tuples: int = 20_000
    mem: int = 1
    ef_search: int = 1000
    #: Ask for the slices' walks as a Parallel Append (parallel costs set to 0). Measured:
    #: the planner keeps a plain Append under the materialized CTE (no workers), so this
    #: setting repeats its serial twin — a reading of the run's noise.
    parallel: bool = False
    #: Walk the bucket's binary-quantized graph (``BQ_GRAPH``: Hamming distance over the
    #: signs, 48 bytes a vector) for ``pool`` candidates, re-ranked by exact cosine.
    quantized: bool = False


#: A graph over ``binary_quantize(embedding)``, built by ``build --kind bq``.
BQ_GRAPH = f"kb_chunks_hnsw_{DIM}_bq"
_BQ = f"binary_quantize(c.embedding::vector({DIM}))::bit({DIM})"


SETTINGS: dict[str, Walk] = {
    "single_plain_ef1000": Walk("", 0),
    "single_product": Walk("", 2000),
    "single_pool3500_t50k_mem4": Walk("", 3500, 50_000, 4),
    "single_pool5000_t100k_mem16": Walk("", 5000, 100_000, 16),
    "single_pool8000_t200k_mem32": Walk("", 8000, 200_000, 32),
    "halves_plain_ef1000": Walk("halves", 0),
    "halves_pool1000_t20k_mem1": Walk("halves", 1000),
    "halves_pool2000_t20k_mem1": Walk("halves", 2000),
    "halves_pool2000_t20k_mem1_parallel": Walk("halves", 2000, parallel=True),
    "halves_pool4000_t50k_mem4": Walk("halves", 4000, 50_000, 4),
    "quarters_plain_ef500": Walk("quarters", 0, ef_search=500),
    "quarters_plain_ef1000": Walk("quarters", 0),
    "quarters_pool1000_t20k_mem1": Walk("quarters", 1000),
    "quarters_pool2000_t20k_mem1": Walk("quarters", 2000),
    "quarters_pool3000_t50k_mem4": Walk("quarters", 3000, 50_000, 4),
    "bq_pool2000_t20k_mem1": Walk("", 2000, quantized=True),
    "bq_pool4000_t50k_mem4": Walk("", 4000, 50_000, 4, quantized=True),
    "bq_pool8000_t100k_mem8": Walk("", 8000, 100_000, 8, quantized=True),
    "bq_pool16000_t200k_mem16": Walk("", 16000, 200_000, 16, quantized=True),
}


def queries(extra_pairs: int, seed: int = 11) -> list[str]:
    """Every "invoice for <service>" and ``extra_pairs`` distinct service pairs."""
    rng = np.random.default_rng(seed)
    texts = [f"invoice for {s}" for s in SERVICES]
    pairs: set[tuple[int, int]] = set()
    while len(pairs) < extra_pairs:
        a, b = (int(x) for x in rng.choice(len(SERVICES), 2, replace=False))
        pairs.add((a, b))
    texts += [f"invoice for {SERVICES[a]} and {SERVICES[b]}" for a, b in sorted(pairs)]
    return texts


def truth(workdir: Path, qvecs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bucket's exact top ``LIMIT`` chunk ids per query and their cosines."""
    vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
    idx = np.array([i for i in range(len(vectors)) if _BUCKET_OF_KIND[i % 4] == BUCKET])
    sims = np.empty((len(qvecs), len(idx)), np.float32)
    for s in range(0, len(idx), 100_000):
        block = np.asarray(vectors[idx[s : s + 100_000]], np.float32)
        norms = np.linalg.norm(block, axis=1)
        norms[norms == 0] = 1
        sims[:, s : s + len(block)] = (qvecs @ block.T) / norms
    order = np.argsort(-sims, axis=1, kind="stable")[:, :LIMIT]
    return idx[order] + 1, np.take_along_axis(sims, order, axis=1)


async def _connect(url: str) -> Any:
    import psycopg
    from pgvector.psycopg import register_vector_async

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await register_vector_async(conn)
    return conn


async def build_slices(url: str, memory: str, kind: str) -> dict[str, float]:
    """A slice set's graphs, one after the other, one maintenance process each."""
    conn = await _connect(url)
    out: dict[str, float] = {}
    try:
        await conn.execute(f"SET maintenance_work_mem = '{memory}'")  # type: ignore[arg-type]
        await conn.execute("SET max_parallel_maintenance_workers = 0")
        if kind == "bq":
            ddl = [
                f"CREATE INDEX IF NOT EXISTS {BQ_GRAPH} ON kb_chunks USING hnsw "
                f"((binary_quantize(embedding::vector({DIM}))::bit({DIM})) bit_hamming_ops) "
                f"WHERE vector_dims(embedding) = {DIM} AND bucket = '{BUCKET}'"
            ]
            names = [BQ_GRAPH]
        else:
            ddl = [
                f"CREATE INDEX IF NOT EXISTS {name} ON kb_chunks USING hnsw "
                f"((embedding::vector({DIM})) vector_cosine_ops) "
                f"WHERE vector_dims(embedding) = {DIM} AND bucket = '{BUCKET}' AND {cond}"
                for name, cond in SLICE_SETS[kind]
            ]
            names = [n for n, _c in SLICE_SETS[kind]]
        for name, statement in zip(names, ddl, strict=True):
            t0 = time.perf_counter()
            await conn.execute(statement)  # type: ignore[arg-type]
            out[name] = round(time.perf_counter() - t0, 1)
            print(f"built {name} in {out[name]} s (load {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        await conn.close()
    return out


def load_main(workdir: Path, shared_buffers: str, memory: str) -> int:
    from bench.pg_recall import load
    from tests.support.postgres import TestPostgres, pgvector08_bin

    server = TestPostgres(pgvector08_bin(), settings={"shared_buffers": shared_buffers}, outlive_parent=True)
    server.start()
    server.admin('CREATE DATABASE "recall"')
    url = server.url("recall")
    print(f"server {url} (data under {server._dir})", flush=True)
    load_avg = [round(x, 2) for x in os.getloadavg()]
    built = asyncio.run(
        load(url, N, workdir, m=16, ef_construction=64, workers=0, memory=memory, overlap=False, only={BUCKET})
    )
    print(f"loaded and built the bucket's graph: {built}", flush=True)
    slices = asyncio.run(build_slices(url, memory, "halves"))
    import orjson

    (workdir / "pg_recall_slices_server.json").write_bytes(
        orjson.dumps({"url": url, "dir": str(server._dir), "whole": built, "slices_s": slices, "load": load_avg})
    )
    print(f"kept {url}: stop it with kill -INT on its postmaster")
    return 0


def _graphs_of(w: Walk, graphs: dict[str, list[str]], whole: str) -> list[str]:
    """The indexes a setting walks (every other one is dropped for its query)."""
    if w.quantized:
        return [BQ_GRAPH]
    return graphs[w.sliced] if w.sliced else [whole]


async def measure(url: str, workdir: Path, names: list[str], texts: list[str], reps: int) -> dict[str, Any]:
    from storage.postgres.kb_graphs import graph_name

    proj = BowProjection()
    qvecs = proj.matrix(texts).astype(np.float32)
    ids, sims = truth(workdir, qvecs)
    whole = graph_name(DIM, BUCKET)
    graphs = {kind: [n for n, _c in SLICE_SETS[kind]] for kind in SLICE_SETS}
    every = [g for names in graphs.values() for g in names] + [BQ_GRAPH]
    conn = await _connect(url)
    dist = f"c.embedding::vector({DIM}) <=> %(q)s::vector({DIM})"
    cond = f"vector_dims(c.embedding) = {DIM} AND c.bucket = '{BUCKET}'"
    agree: dict[str, list[float]] = {n: [] for n in names}
    recall100: dict[str, list[float]] = {n: [] for n in names}
    ms: dict[str, list[float]] = {n: [] for n in names}
    per_query: dict[str, list[float]] = {n: [0.0] * len(texts) for n in names}
    plans: dict[str, str] = {}
    try:
        cur = await conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'kb_chunks'")
        present = {str(r[0]) for r in await cur.fetchall()}
        for name in names:
            w = SETTINGS[name]
            missing = [g for g in _graphs_of(w, graphs, whole) if g not in present]
            if missing:
                raise SystemExit(f"{name}: no index {missing} (build it: {sys.argv[0]} build --kind ...)")
        for rep in range(reps + 1):  # the first pass warms the caches and is not counted
            for j in range(len(texts)):
                for name in names:
                    w = SETTINGS[name]
                    async with conn.transaction(force_rollback=True):
                        mine = _graphs_of(w, graphs, whole)
                        for other in [whole, *every]:  # the others, rolled back with the transaction
                            if other not in mine and other in present:
                                await conn.execute(f'DROP INDEX "{other}"')  # type: ignore[arg-type]
                        await conn.execute(f"SET LOCAL hnsw.ef_search = {w.ef_search}")  # type: ignore[arg-type]
                        if w.pool:
                            for setting in (
                                "hnsw.iterative_scan = relaxed_order",
                                f"hnsw.max_scan_tuples = {w.max_scan_tuples}",
                                f"hnsw.scan_mem_multiplier = {w.mem}",
                            ):
                                await conn.execute(f"SET LOCAL {setting}")  # type: ignore[arg-type]
                        if w.parallel:
                            for setting in (
                                "max_parallel_workers_per_gather = 4",
                                "parallel_setup_cost = 0",
                                "parallel_tuple_cost = 0",
                                "min_parallel_index_scan_size = 0",
                                "min_parallel_table_scan_size = 0",
                            ):
                                await conn.execute(f"SET LOCAL {setting}")  # type: ignore[arg-type]
                        each = w.pool or LIMIT
                        if w.quantized:
                            sql = (
                                f"WITH s AS MATERIALIZED (SELECT c.id, {dist} AS dist FROM kb_chunks c WHERE {cond} "
                                f"ORDER BY {_BQ} <~> binary_quantize(%(q)s::vector({DIM}))::bit({DIM}) "
                                f"LIMIT {each}) SELECT id FROM s ORDER BY dist, id LIMIT {LIMIT}"
                            )
                        elif w.sliced:
                            branches = " UNION ALL ".join(
                                f"(SELECT c.id, {dist} AS dist FROM kb_chunks c WHERE {cond} AND {s} "
                                f"ORDER BY {dist} LIMIT {each})"
                                for _n, s in SLICE_SETS[w.sliced]
                            )
                            sql = (
                                f"WITH s AS MATERIALIZED ({branches}) SELECT id FROM s ORDER BY dist, id LIMIT {LIMIT}"
                            )
                        elif w.pool:
                            sql = (
                                f"WITH s AS MATERIALIZED (SELECT c.id, {dist} AS dist FROM kb_chunks c WHERE {cond} "
                                f"ORDER BY {dist} LIMIT {each}) SELECT id FROM s ORDER BY dist, id LIMIT {LIMIT}"
                            )
                        else:
                            sql = f"SELECT c.id FROM kb_chunks c WHERE {cond} ORDER BY {dist} LIMIT {LIMIT}"
                        if name not in plans:
                            cur = await conn.execute("EXPLAIN " + sql, {"q": qvecs[j]})  # type: ignore[operator]
                            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
                            plans[name] = re.sub(r"'\[[^']*\]'", "'<query>'", plan)
                        t0 = time.perf_counter()
                        cur = await conn.execute(sql, {"q": qvecs[j]})  # type: ignore[arg-type]
                        got = [int(r[0]) for r in await cur.fetchall()]
                        elapsed = (time.perf_counter() - t0) * 1000
                    if rep == 0:
                        continue
                    ms[name].append(elapsed)
                    a = len(set(got[:10]) & set(ids[j][:10].tolist())) / 10
                    agree[name].append(a)
                    per_query[name][j] += a / reps
                    recall100[name].append(len(set(got) & set(ids[j].tolist())) / LIMIT)
        cur = await conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        version = str((await cur.fetchone())[0])
        cur = await conn.execute(
            "SELECT indexname, pg_relation_size(indexname::regclass) FROM pg_indexes WHERE indexname = ANY(%s)",
            ([whole, *every],),
        )
        sizes = {str(n): round(int(s) / 2**20) for n, s in await cur.fetchall()}
    finally:
        await conn.close()
    return {
        "pgvector": version,
        "graphs_mb": sizes,
        "slice_sets": {k: [c for _n, c in v] for k, v in SLICE_SETS.items()},
        "queries": len(texts),
        "distinct_queries": len({q.tobytes() for q in qvecs}),
        "exact_cosine_top1_10th_100th_mean": [round(float(sims[:, k].mean()), 4) for k in (0, 9, 99)],
        "settings": {n: asdict(SETTINGS[n]) for n in names},
        "agreement_at_10": {n: round(float(np.mean(v)), 4) for n, v in agree.items()},
        "agreement_at_10_min": {n: min(v) for n, v in agree.items()},
        "queries_below_0_9": {n: sum(1 for v in per_query[n] if v < 0.9) for n in names},
        "recall_at_100": {n: round(float(np.mean(v)), 4) for n, v in recall100.items()},
        "latency_ms": {n: summary(v) for n, v in ms.items()},
        "plans": plans,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lo = sub.add_parser("load", help="start a pgvector 0.8 server, load the invoices bucket, build the graphs")
    lo.add_argument("--workdir", type=Path, required=True, help="vectors.npy / queries.npy of the 1M corpus")
    lo.add_argument("--shared-buffers", default="3GB")
    lo.add_argument("--memory", default="1500MB", help="maintenance_work_mem of each build")
    bu = sub.add_parser("build", help="build a slice set's graphs on a loaded database")
    bu.add_argument("--database-url", required=True)
    bu.add_argument("--kind", choices=[*sorted(SLICE_SETS), "bq"], required=True)
    bu.add_argument("--memory", default="1500MB")
    bu.add_argument("--workdir", type=Path, required=True, help="where the build times are recorded")
    me = sub.add_parser("measure")
    me.add_argument("--database-url", required=True)
    me.add_argument("--workdir", type=Path, required=True)
    me.add_argument("--settings", default=",".join(SETTINGS))
    me.add_argument("--pairs", type=int, default=25, help="two-service queries besides the 15 single ones")
    me.add_argument("--reps", type=int, default=1, help="counted passes over the queries (after one warm-up)")
    me.add_argument("--tag", default="")
    args = ap.parse_args()
    if args.cmd == "load":
        return load_main(args.workdir, args.shared_buffers, args.memory)
    if args.cmd == "build":
        import orjson

        load_avg = [round(x, 2) for x in os.getloadavg()]
        built = asyncio.run(build_slices(args.database_url, args.memory, args.kind))
        kept = args.workdir / "pg_recall_slices_server.json"
        record = orjson.loads(kept.read_bytes()) if kept.exists() else {}
        record[f"{args.kind}_s"] = built
        record[f"{args.kind}_load_start"] = load_avg
        kept.write_bytes(orjson.dumps(record))
        return 0
    names = [s.strip() for s in args.settings.split(",") if s.strip()]
    for n in names:
        if n not in SETTINGS:
            raise SystemExit(f"unknown setting {n!r}: {', '.join(SETTINGS)}")
    texts = queries(args.pairs)
    load_start = [round(x, 2) for x in os.getloadavg()]
    result = asyncio.run(measure(args.database_url, args.workdir, names, texts, args.reps))
    out = {
        "bucket": BUCKET,
        "limit": LIMIT,
        "reps": args.reps,
        **result,
        "load_average_1_5_15": {"start": load_start, "end": [round(x, 2) for x in os.getloadavg()]},
    }
    kept = args.workdir / "pg_recall_slices_server.json"
    if kept.exists():
        import orjson

        out["builds"] = orjson.loads(kept.read_bytes())
        out["builds"].pop("url", None)
        out["builds"].pop("dir", None)
    for n in names:
        print(n, out["agreement_at_10"][n], out["recall_at_100"][n], out["latency_ms"][n])
    print("load", out["load_average_1_5_15"])
    name = "corpus_pg_recall_slices" + (f"_{args.tag}" if args.tag else "")
    print(f"wrote {write_results(name, out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
