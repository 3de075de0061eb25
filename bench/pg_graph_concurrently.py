"""A bucket's HNSW graph built plainly against CONCURRENTLY (issue 24 follow-up): what a
small knowledge-base write waits while the graph builds, and what the concurrent build
costs (it scans the table twice and waits for older transactions between its phases).

Setup: the product's schema (a migrated database of the tests' pgserver), one bucket of
the first N vectors of a prepared ``bench/corpus.py`` corpus loaded through the
product's bulk load (``--docs-chunks`` chunks a document), no graph. Then, alternated,
``--rounds`` times:

* ``plain``: the graph built as before this change — ``kb_graphs.ensure_graph`` in a
  transaction of its own (``CREATE INDEX``, the build's memory, no statement timeout),
  as the repair after open and a threshold-crossing write did;
* ``concurrently``: the product's builder (``kb_graph_builds.GraphUpkeep``: an
  autocommit connection, the DDL lock, ``CREATE INDEX CONCURRENTLY``).

Each build runs twice a round: quiet (build time and the server's CPU alone), and with a
paced writer — one product write (``write_documents``: one document of ``--write-chunks``
chunks into the same bucket) every ``--write-every`` seconds until the build ends — the
write's latency and outcome (the pool's ``lock_timeout`` and retries are the product's
defaults, so a write held past them fails as a request would, with 503).

Run:  .venv/bin/python bench/pg_graph_concurrently.py --corpus /work/corpus100k_q --vectors 50000 --rounds 2
Writes bench/results/pg_graph_concurrently.json (``--out`` to name it otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

from bench._common import summary, write_results  # noqa: E402
from bench.ingest_ab import postmaster_pid, server_tree_cpu_s  # noqa: E402
from knowledge.buckets import typed_values  # noqa: E402
from storage.kb_records import KBChunkWrite, KBDocumentWrite  # noqa: E402
from storage.postgres import PostgresStorage, open_postgres_storage  # noqa: E402
from storage.postgres.kb_graph_builds import GraphUpkeep  # noqa: E402
from storage.postgres.kb_graphs import ensure_graph, graph_name  # noqa: E402

BUCKET = "contracts"
#: The product's threshold: the bench's builder builds the bucket's graph past it.
THRESHOLD = 10_000


def _doc(doc_id: str, vectors: np.ndarray) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id, title=doc_id, source=f"{doc_id}.md", url=None, content_hash=doc_id, metadata={}, chars=40,
        chunks=[KBChunkWrite(i, "", f"clause {i} of contract {doc_id}: payment terms") for i in range(len(vectors))],
        vectors=np.asarray(vectors, dtype=np.float32), embed_model="bench", embed_dim=int(vectors.shape[1]), typed=(),
    )  # fmt: skip


async def load(storage: PostgresStorage, vectors: np.ndarray, n: int, per_doc: int) -> float:
    kb = storage.kb_index
    kb.exact_scope_vectors = 10**9  # no graph at the load's end: the rounds build it
    await kb.create_bucket(BUCKET, {}, typed_row=typed_values)
    t0 = time.perf_counter()
    async with kb.bulk_load():
        batch: list[KBDocumentWrite] = []
        for start in range(0, n, per_doc):
            batch.append(_doc(f"d{start}", vectors[start : min(n, start + per_doc)]))
            if len(batch) == 50:
                await kb.write_documents(BUCKET, {}, batch)
                batch = []
        if batch:
            await kb.write_documents(BUCKET, {}, batch)
    return time.perf_counter() - t0


async def drop_graph(url: str, dim: int) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'DROP INDEX IF EXISTS "{graph_name(dim, BUCKET)}"')  # type: ignore[arg-type]
        await conn.execute("VACUUM ANALYZE kb_chunks")


async def build_plain(url: str, dim: int) -> None:
    async with (
        await psycopg.AsyncConnection.connect(url, application_name="bench-plain-build") as conn,
        conn.transaction(),
    ):
        assert await ensure_graph(conn, dim, BUCKET, bulk_build=True)


async def build_concurrently(builder: GraphUpkeep, dim: int) -> None:
    assert await builder.request(dim, BUCKET)


async def writer(
    storage: PostgresStorage, vectors: np.ndarray, tag: str, every: float, chunks: int, done: asyncio.Event,
    limit: int | None = None,
) -> list[dict[str, Any]]:  # fmt: skip
    """One small product write every ``every`` s until ``done`` (or ``limit`` writes);
    each write's latency and outcome."""
    out: list[dict[str, Any]] = []
    rng = np.random.default_rng(abs(hash(tag)) % 2**32)
    i = 0
    while not done.is_set() and (limit is None or i < limit):
        picks = vectors[rng.integers(0, len(vectors), size=chunks)]
        t0 = time.perf_counter()
        try:
            await storage.kb_index.write_documents(BUCKET, {}, [_doc(f"w-{tag}-{i}", np.asarray(picks))])
            outcome = "ok"
        except Exception as exc:  # what a request would answer 503 for
            outcome = type(exc).__name__
        out.append({"latency_s": round(time.perf_counter() - t0, 4), "outcome": outcome})
        i += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), every)
    return out


async def one(
    storage: PostgresStorage, builder: GraphUpkeep, postmaster: int, mode: str, dim: int, vectors: np.ndarray,
    *, with_writes: bool, tag: str, every: float, chunks: int,
) -> dict[str, Any]:  # fmt: skip
    url = storage.db.url
    await drop_graph(url, dim)
    done = asyncio.Event()
    writes: asyncio.Task[list[dict[str, Any]]] | None = None
    load0, cpu0, t0 = os.getloadavg()[0], server_tree_cpu_s(postmaster), time.perf_counter()
    if with_writes:
        writes = asyncio.create_task(writer(storage, vectors, tag, every, chunks, done))
    try:
        if mode == "plain":
            await build_plain(url, dim)
        else:
            await build_concurrently(builder, dim)
    finally:
        wall, cpu = time.perf_counter() - t0, server_tree_cpu_s(postmaster) - cpu0
        done.set()
    rows = await writes if writes is not None else []
    result: dict[str, Any] = {
        "mode": mode,
        "with_writes": with_writes,
        "build_wall_s": round(wall, 2),
        "server_cpu_s": round(cpu, 2),
        "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    if with_writes:
        ok = [r["latency_s"] for r in rows if r["outcome"] == "ok"]
        result["writes"] = {
            "count": len(rows),
            "ok": len(ok),
            "failed": sorted({r["outcome"] for r in rows if r["outcome"] != "ok"}),
            "latency_s_all": summary([r["latency_s"] for r in rows])
            | {"max": max((r["latency_s"] for r in rows), default=0)},
            "latency_s_ok": summary(ok) if ok else None,
            "sequence": rows,
        }
    return result


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.support.postgres import TestPostgres

    vectors = np.load(args.corpus / "vectors.npy", mmap_mode="r")
    n = min(args.vectors, len(vectors))
    dim = int(vectors.shape[1])
    data = np.asarray(vectors[:n], dtype=np.float32)
    server = TestPostgres().start()
    try:
        postmaster = postmaster_pid(server)
        server.prepare_template()
        with server.database() as url:
            storage = await open_postgres_storage(url)
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    settings: dict[str, str] = dict(
                        conn.execute(
                            "SELECT name, setting FROM pg_settings WHERE name IN ('max_parallel_maintenance_workers',"
                            " 'maintenance_work_mem', 'lock_timeout', 'server_version')"
                        ).fetchall()
                    )
                    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
                load_s = await load(storage, data, n, args.docs_chunks)
                print(f"loaded {n} vectors in {load_s:.1f} s", flush=True)
                builder = GraphUpkeep(storage.db, lambda: THRESHOLD)
                runs: list[dict[str, Any]] = []
                baseline = await writer_baseline(storage, data, args)
                print("baseline", baseline, flush=True)
                for r in range(args.rounds):
                    for with_writes in (False, True):
                        modes = ("plain", "concurrently") if r % 2 == 0 else ("concurrently", "plain")
                        for mode in modes:
                            res = await one(
                                storage, builder, postmaster, mode, dim, data, with_writes=with_writes,
                                tag=f"{r}{mode}{with_writes}", every=args.write_every, chunks=args.write_chunks,
                            )  # fmt: skip
                            res["round"] = r
                            runs.append(res)
                            brief = {k: v for k, v in res.items() if k != "writes"}
                            if "writes" in res:
                                brief["writes"] = {k: v for k, v in res["writes"].items() if k != "sequence"}
                            print(brief, flush=True)
                await builder.stop()
            finally:
                await storage.close()
    finally:
        server.stop()
    return {
        "vectors": n,
        "dim": dim,
        "bucket_chunks_per_document": args.docs_chunks,
        "load_s": round(load_s, 1),
        "pgvector": str(row[0]) if row else "?",
        "server": "pgserver wheel (tests/support/postgres.py)",
        "settings": settings,
        "write": {"chunks": args.write_chunks, "every_s": args.write_every},
        "writes_without_a_build": baseline,
        "runs": runs,
    }


async def writer_baseline(storage: PostgresStorage, data: np.ndarray, args: argparse.Namespace) -> dict[str, Any]:
    """The same paced writes with no build running (``--baseline-writes`` of them)."""
    done = asyncio.Event()
    rows = await writer(
        storage, data, "baseline", args.write_every, args.write_chunks, done, limit=args.baseline_writes
    )
    return summary([r["latency_s"] for r in rows]) | {
        "failed": sorted({r["outcome"] for r in rows if r["outcome"] != "ok"})
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True, help="a bench/corpus.py --workdir (vectors.npy)")
    ap.add_argument("--vectors", type=int, default=50_000)
    ap.add_argument("--docs-chunks", type=int, default=10, help="chunks per loaded document")
    ap.add_argument("--rounds", type=int, default=2, help="each mode this many times, alternated")
    ap.add_argument("--write-chunks", type=int, default=4)
    ap.add_argument("--write-every", type=float, default=0.5)
    ap.add_argument("--baseline-writes", type=int, default=20)
    ap.add_argument("--out", default="pg_graph_concurrently")
    args = ap.parse_args()
    result = asyncio.run(run(args))
    path = write_results(args.out, result)
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
