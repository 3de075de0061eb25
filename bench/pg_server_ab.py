"""Two PostgreSQL servers holding the same knowledge base, searched alternately query by
query: what a server setting (``shared_buffers`` above all) does to the bench's searches.

Why: a setting that needs a restart cannot be alternated on one server, and two runs one
after the other meet different loads on this shared machine. Copy a database
``bench/corpus.py`` loaded and kept (stop its server, copy the data directory, start one
server on each copy with its own settings), then run this: both sides see the same load,
and the same queries in alternating order (``bench/pg_text_profile.py``'s scheme). Every
kind of search ``bench/corpus.py`` times, through ``KnowledgeBase.search``.

Run from the repository root:
  .venv/bin/python bench/pg_server_ab.py --a URL --b URL [--names a,b] [--rounds N] [--out NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the service and bench/corpus.py run

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import DIM, LookupEmbedder, query_set  # noqa: E402

KINDS: dict[str, dict[str, Any]] = {
    "search_text": {"mode": "text"},
    "search_semantic": {"mode": "semantic"},
    "search_hybrid": {"mode": "hybrid"},
    "filtered_text": {"mode": "text", "filtered": True},
    "filtered_semantic": {"mode": "semantic", "filtered": True},
    "filtered_hybrid": {"mode": "hybrid", "filtered": True},
}


async def _server_settings(url: str) -> dict[str, str]:
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cur = await conn.execute(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings "
            "WHERE name IN ('shared_buffers', 'work_mem', 'effective_cache_size', 'server_version')"
        )
        return {str(k): str(v) for k, v in await cur.fetchall()}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="the first server's URL of the loaded database")
    ap.add_argument("--b", required=True, help="the second server's URL of the same database's copy")
    ap.add_argument("--names", default="a,b", help="what to call the two sides in the report")
    ap.add_argument("--rounds", type=int, default=1, help="passes over the 60 queries")
    ap.add_argument("--out", help="results name: bench/results/<name>.json")
    args = ap.parse_args()

    from knowledge.kb import KBConfig, KnowledgeBase
    from storage.postgres import open_postgres_storage

    names = [n.strip() for n in args.names.split(",")]
    if len(names) != 2:
        raise SystemExit("--names takes two names")
    kbs: dict[str, Any] = {}
    settings: dict[str, dict[str, str]] = {}
    for name, url in zip(names, (args.a, args.b), strict=True):
        storage = await open_postgres_storage(url)
        embedder = LookupEmbedder({}, np.zeros((1, DIM), np.float32))  # queries are projected, not looked up
        kbs[name] = await KnowledgeBase.create(storage.kb_index, embedder, config=KBConfig(), on_close=storage.close)
        settings[name] = await _server_settings(url)
    queries = query_set()
    times: dict[str, dict[str, list[float]]] = {n: {k: [] for k in KINDS} for n in names}

    async def one(name: str, kind: str, q: dict[str, Any]) -> float:
        spec = KINDS[kind]
        kw: dict[str, Any] = {"filters": q["kb_filter"]} if spec.get("filtered") else {}
        t0 = time.perf_counter()
        await kbs[name].search(q["text"], bucket=q["bucket"], top_k=10, context_chars=400, mode=spec["mode"], **kw)
        return (time.perf_counter() - t0) * 1000

    # Warm-up: each side sees every query of every kind once (both caches as warm as a
    # serving process's after its first minutes), then the timed rounds.
    for q in queries:
        for kind in KINDS:
            for name in names:
                await one(name, kind, q)
    load_start = [round(x, 2) for x in os.getloadavg()]
    for r in range(args.rounds):
        for i, q in enumerate(queries):
            for kind in KINDS:
                order = names if (i + r) % 2 == 0 else names[::-1]
                for name in order:
                    times[name][kind].append(await one(name, kind, q))
    load_end = [round(x, 2) for x in os.getloadavg()]
    report: dict[str, Any] = {}
    for name in names:
        report[name] = {"server": settings[name], **{k: summary(v) for k, v in times[name].items()}}
        for kind in KINDS:
            s = report[name][kind]
            print(f"{name:10s} {kind:18s} p50 {s['p50']:7.1f} p95 {s['p95']:7.1f} ms", flush=True)
    print(f"load {load_start} -> {load_end}", flush=True)
    for kb in kbs.values():
        await kb.aclose()
    if args.out:
        load = {"start": load_start, "end": load_end}
        write_results(args.out, {"load_average": load, "rounds": args.rounds, **report})
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
