"""Search A/B between source trees over one knowledge base built by ``bench/corpus.py``
(issue 24): the same KB file, ``bench/corpus.py``'s 60 queries in its six modes (text,
semantic, hybrid, each unfiltered and filtered; ``top_k=10``, ``context_chars=400``),
searched by each tree's own code in a child process that puts that tree first on
``sys.path``, in rounds alternating the order of the trees.

Per run: wall p50/p95 per mode, the process CPU per search (every thread: SQLite reads
in reader threads, vector scans in the executor), the load average around it, and
whether every hit list (chunk id, score to 6 decimals, snippet text) is the same as
the first tree's. On a shared machine the wall figures move with the load; the CPU
figures and the identical-lists check are the comparable ones.

The KB file: ``bench/corpus.py --chunks 100000 --skip-postgres --skip-chroma --workdir
DIR`` leaves ``DIR/kb.sqlite3``; copy it once per tree if the trees' migrations differ
(a child opens it with its own migrations) and give ``--kb`` once per tree, in the
trees' order: an index that a newer tree's migration adds would otherwise serve the
older tree's statements too.

Run:  .venv/bin/python bench/corpus_search_ab.py --kb DIR/kb.sqlite3 /work/wt-before .
Writes bench/results/corpus_sqlite_search_ab.json (``--out`` for another name).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import orjson

ROOT = Path(__file__).resolve().parent.parent
MODES = [
    ("search_text", "text", False),
    ("search_semantic", "semantic", False),
    ("search_hybrid", "hybrid", False),
    ("filtered_text", "text", True),
    ("filtered_semantic", "semantic", True),
    ("filtered_hybrid", "hybrid", True),
]


def child(tree: Path, kb_path: Path, repeats: int, modes: list[str]) -> dict[str, Any]:
    """One tree's searches (imports that tree's code)."""
    sys.path.insert(0, str(tree))
    import numpy as np

    from app.cli.kb_file import open_kb_file
    from bench.corpus import LookupEmbedder, query_set
    from knowledge.kb import KBConfig

    chosen = [m for m in MODES if m[0] in modes]

    async def go() -> dict[str, Any]:
        embedder = LookupEmbedder({}, np.zeros((1, 384), np.float32))  # queries are projected, not looked up
        kb = await open_kb_file(kb_path, embedder, config=KBConfig(batch_documents=2000))
        queries = query_set()
        for q in queries[:5]:
            await kb.search(q["text"], bucket=q["bucket"], mode="semantic")
            await kb.search(q["text"], bucket=q["bucket"], mode="text")
        wall: dict[str, list[float]] = {m[0]: [] for m in chosen}
        cpu: dict[str, list[float]] = {m[0]: [] for m in chosen}
        lists: dict[str, list[Any]] = {m[0]: [] for m in chosen}
        load0 = os.getloadavg()
        for r in range(repeats):
            for q in queries:
                for name, mode, filtered in chosen:
                    kw: dict[str, Any] = {"filters": q["kb_filter"]} if filtered else {}
                    t0, c0 = time.perf_counter(), time.process_time()
                    res = await kb.search(
                        q["text"], bucket=q["bucket"], top_k=10, context_chars=400, mode=cast(Any, mode), **kw
                    )
                    wall[name].append((time.perf_counter() - t0) * 1000)
                    cpu[name].append((time.process_time() - c0) * 1000)
                    if r == 0:
                        lists[name].append([(h.chunk_id, round(h.score, 6), h.text) for h in res.hits])
        await kb.aclose()
        return {
            "wall_ms_p50_p95": {
                k: [round(float(np.percentile(v, 50)), 1), round(float(np.percentile(v, 95)), 1)]
                for k, v in wall.items()
            },
            "process_cpu_ms_mean": {k: round(float(np.mean(v)), 2) for k, v in cpu.items()},
            "load_average_1_5_15": [[round(x, 2) for x in load0], [round(x, 2) for x in os.getloadavg()]],
            "_lists": lists,
        }

    return asyncio.run(go())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", type=Path, help="source trees, e.g. a worktree of the old commit and '.'")
    ap.add_argument(
        "--kb",
        type=Path,
        action="append",
        required=True,
        help="a KB file built by bench/corpus.py (its --workdir); once for all trees, or once per tree in order",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1, help="passes over the 60 queries per run")
    ap.add_argument("--modes", default=",".join(m[0] for m in MODES))
    ap.add_argument("--out", default="corpus_sqlite_search_ab")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if args.child:
        print(orjson.dumps(child(args.trees[0].resolve(), args.kb[0], args.repeats, modes)).decode())
        return 0
    if len(args.kb) not in (1, len(args.trees)):
        ap.error("give --kb once, or once per tree")
    sys.path.insert(0, str(ROOT))
    from bench._common import write_results

    trees = [t.resolve() for t in args.trees]
    kb_of = dict(zip(trees, args.kb * len(trees) if len(args.kb) == 1 else args.kb, strict=True))
    runs: list[dict[str, Any]] = []
    first_lists: dict[str, Any] | None = None
    for r in range(args.rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            cmd = [
                sys.executable,
                __file__,
                str(tree),
                "--child",
                "--kb",
                str(kb_of[tree]),
                "--repeats",
                str(args.repeats),
                "--modes",
                ",".join(modes),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=dict(os.environ))
            if out.returncode != 0:
                raise SystemExit(f"searches failed for {tree}:\n{out.stderr[-3000:]}")
            result = orjson.loads(out.stdout.strip().splitlines()[-1])
            lists = result.pop("_lists")
            if tree == trees[0] and first_lists is None:
                first_lists = lists
            result.update(tree=str(tree), round=r)
            runs.append(result)
            if first_lists is not None:
                result["identical_lists_to_first_tree"] = {
                    k: sum(a == b for a, b in zip(first_lists[k], lists[k], strict=True)) for k in lists
                }
            print({k: result[k] for k in ("tree", "round", "wall_ms_p50_p95", "process_cpu_ms_mean")}, flush=True)
    path = write_results(
        args.out,
        {
            "kb": [str(kb_of[t]) for t in trees],
            "queries_per_mode": 60 * args.repeats,
            "openblas_num_threads": os.environ.get("OPENBLAS_NUM_THREADS", "(default: one per core)"),
            "runs": runs,
        },
    )
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
