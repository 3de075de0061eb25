"""The filtered searches' tail at 1M chunks on SQLite (issue 24 item 3), query by query.

``bench/corpus.py`` reports a p50 / p95 per mode; a p95 far above its p50 means some
queries are much slower than others, and which ones (which filter, how large a scope,
which path ran) is what this bench says. It opens a knowledge base that ``bench/corpus.py``
left (``--workdir DIR`` leaves ``DIR/kb.sqlite3``; work on a copy: ``bench/corpus.py``
deletes the database of its workdir before its next load), ingests nothing, and runs
``bench/corpus.py``'s 60 queries in its three filtered modes (``KnowledgeBase.search``
with ``filters=q["kb_filter"]``, ``top_k=10``, ``context_chars=400``).

Per query and mode: wall time, the process's CPU time (``time.process_time``: every
thread, so the reader threads' SQLite work and the executor's vector scan count too;
steadier than wall time on a shared machine), the time spent in each stage the search
awaits (scope ids, term choice, BM25 ranking, vector scan, hydration, cosines; the text
and vector sides overlap in a hybrid search), and the scope: how many documents the
filter keeps, how many rows of the in-memory matrix they span and which scan that
makes (``gather`` of the scope's rows, or ``span``: every row of the span scored and
masked; ``knowledge.vectors.VectorIndex.scan``).

Several source trees (``--code``, e.g. a worktree of the commit before a change and
``.``) are measured in one run: one child process per tree opens the database once with
that tree's code first on ``sys.path`` (the 1M vectors take a minute to load), then the
parent asks each child for a phase (every query of every mode, once) in turn, ABAB...
with the order swapped every other round, recording the load average per phase. Hit
lists (chunk id and score to 6 decimals, in order) are compared with the first tree's
and can be written to / compared with a file (``--tops-out`` / ``--tops-compare``).

Run:  .venv/bin/python bench/corpus_filtered_tail.py --db /work/sq1m/kb.sqlite3 \
          --code /work/wt-before --code . --phases 4 --out corpus_1m_filtered_tail
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
KINDS = {"filtered_text": "text", "filtered_semantic": "semantic", "filtered_hybrid": "hybrid"}
#: Stages timed inside a search: (owner, method) — owner "index" is the KB index,
#: "dense" the dense side.
STAGES = [
    ("index", "scoped_doc_ids"),
    ("index", "scoped_chunk_ids"),
    ("index", "selective_terms"),
    ("index", "text_candidates"),
    ("index", "hydrate"),
    ("index", "count_documents"),
    ("dense", "nearest"),
    ("dense", "cosines"),
]


# --------------------------------------------------------------------------- child


def _child(code: Path, db: Path, kinds: list[str]) -> None:
    """Open the KB with ``code``'s modules, then answer ``phase`` lines on stdin."""
    sys.path.insert(0, str(code))
    import numpy as np

    from app.cli.kb_file import open_kb_file
    from bench.corpus import LookupEmbedder, query_set
    from knowledge.kb import KBConfig

    async def go() -> None:
        embedder = LookupEmbedder({}, np.zeros((1, 384), np.float32))  # queries are projected, not looked up
        t0 = time.perf_counter()
        kb = await open_kb_file(db, embedder, config=KBConfig(batch_documents=2000))
        opened_s = time.perf_counter() - t0
        index, dense = kb.index, kb._vectors
        stage_ms: dict[str, float] = {}

        def timed(owner: Any, name: str) -> None:
            inner = getattr(owner, name, None)
            if inner is None:
                return

            async def wrapper(*a: Any, **kw: Any) -> Any:
                s = time.perf_counter()
                try:
                    return await inner(*a, **kw)
                finally:
                    stage_ms[name] = stage_ms.get(name, 0.0) + (time.perf_counter() - s) * 1000

            setattr(owner, name, wrapper)

        for owner_name, method in STAGES:
            timed(index if owner_name == "index" else dense, method)

        queries = query_set()
        # The scope of each query, outside any timing: documents kept, and the matrix
        # rows they span (what decides gather or span in the vector scan).
        scopes: list[dict[str, Any]] = []
        from knowledge.filters import compile_filters, parse_filters
        from storage.kb_records import KBScope

        matrix = getattr(dense, "matrix", None)
        for q in queries:
            schema = await kb.bucket_schema(q["bucket"])
            scope = KBScope(q["bucket"], compile_filters(parse_filters(q["kb_filter"]), schema, bucket=q["bucket"]))
            ids = await index.scoped_doc_ids(scope)
            info: dict[str, Any] = {"scope_docs": len(ids)}
            if matrix is not None:
                snap = matrix.snapshot()
                mask = matrix.doc_mask(snap, ids) & snap.alive[: snap.n]
                count = int(mask.sum())
                if count:
                    first = int(np.argmax(mask))
                    end = snap.n - int(np.argmax(mask[::-1]))
                    span = end - first
                    info.update(
                        scope_rows=count,
                        span_rows=span,
                        scan="span" if span <= 2 * count or count >= snap.n // 6 else "gather",
                    )
            scopes.append(info)
        for q in queries[:5]:  # warm-up, as bench/corpus.py
            await kb.search(q["text"], bucket=q["bucket"], mode="semantic")
            await kb.search(q["text"], bucket=q["bucket"], mode="text")
        print(orjson.dumps({"ready": True, "open_s": round(opened_s, 1), "scopes": scopes}).decode(), flush=True)

        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line or line.strip() != "phase":
                break
            records: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
            for i, q in enumerate(queries):
                for kind in kinds:
                    stage_ms.clear()
                    w0, c0 = time.perf_counter(), time.process_time()
                    res = await kb.search(
                        q["text"],
                        bucket=q["bucket"],
                        top_k=10,
                        context_chars=400,
                        mode=KINDS[kind],  # type: ignore[arg-type]
                        filters=q["kb_filter"],
                    )
                    wall = (time.perf_counter() - w0) * 1000
                    cpu = (time.process_time() - c0) * 1000
                    records[kind].append(
                        {
                            "i": i,
                            "wall_ms": round(wall, 2),
                            "cpu_ms": round(cpu, 2),
                            "stages_ms": {k: round(v, 2) for k, v in stage_ms.items()},
                            "total": res.total_matches,
                            "top": [[h.chunk_id, round(h.score, 6)] for h in res.hits],
                        }
                    )
            print(orjson.dumps({"records": records}).decode(), flush=True)
        await kb.aclose()

    asyncio.run(go())


# --------------------------------------------------------------------------- parent


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo), 2)


def _describe(q: dict[str, Any]) -> str:
    return f"{q['bucket']} {orjson.dumps(q['kb_filter']).decode()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, required=True, help="a KB file bench/corpus.py built (a copy of it)")
    ap.add_argument("--code", type=Path, action="append", help="source trees to measure (default: this one)")
    ap.add_argument("--phases", type=int, default=2, help="rounds; each tree runs every query once a round")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--slow", type=int, default=5, help="how many of the slowest queries per mode to name")
    ap.add_argument("--tops-out", type=Path, help="write the first tree's hit lists here")
    ap.add_argument("--tops-compare", type=Path, help="compare every tree's hit lists with this file's")
    ap.add_argument("--out", default="corpus_1m_filtered_tail")
    ap.add_argument(
        "--pyspy",
        type=Path,
        help="py-spy (--native, raw) of the first tree's child over its phases into "
        "this file; py-spy from PATH, or --pyspy-bin",
    )
    ap.add_argument("--pyspy-bin", default="py-spy")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.child:
        _child(args.code[0].resolve(), args.db, kinds)
        return 0

    sys.path.insert(0, str(ROOT))
    from bench._common import write_results
    from bench.corpus import query_set

    queries = query_set()
    trees = [t.resolve() for t in (args.code or [ROOT])]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the service and bench/corpus.py run
    children: dict[Path, subprocess.Popen[str]] = {}
    spy: subprocess.Popen[bytes] | None = None
    ready: dict[Path, dict[str, Any]] = {}
    try:
        for tree in trees:  # one at a time: two 1M loads at once would measure each other
            proc = subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--code",
                    str(tree),
                    "--db",
                    str(args.db),
                    "--kinds",
                    ",".join(kinds),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                raise SystemExit(f"the child for {tree} ended before it was ready (exit {proc.wait(60)})")
            children[tree] = proc
            ready[tree] = orjson.loads(line)
            print(f"{tree}: opened in {ready[tree]['open_s']} s", flush=True)
        scopes = ready[trees[0]]["scopes"]

        if args.pyspy:
            spy = subprocess.Popen(
                [
                    args.pyspy_bin,
                    "record",
                    "--native",
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "-o",
                    str(args.pyspy),
                    "-p",
                    str(children[trees[0]].pid),
                ]
            )
            time.sleep(2)  # py-spy attaches (a bench: no condition to wait on but its own start)
        phases: list[dict[str, Any]] = []
        for r in range(args.phases):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                proc = children[tree]
                assert proc.stdin is not None and proc.stdout is not None
                load0 = [round(x, 2) for x in os.getloadavg()]
                proc.stdin.write("phase\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
                if not line:
                    raise SystemExit(f"the child for {tree} ended in phase {r} (exit {proc.wait(60)})")
                recs = orjson.loads(line)["records"]
                phases.append(
                    {
                        "tree": str(tree),
                        "round": r,
                        "load_before": load0,
                        "load_after": [round(x, 2) for x in os.getloadavg()],
                        "records": recs,
                    }
                )
                line_out = {
                    k: (
                        _pct([x["wall_ms"] for x in v], 50),
                        _pct([x["wall_ms"] for x in v], 95),
                        _pct([x["cpu_ms"] for x in v], 50),
                        _pct([x["cpu_ms"] for x in v], 95),
                    )
                    for k, v in recs.items()
                }
                print(f"round {r} {tree.name or tree}: load {load0[0]} wall/cpu p50,p95 {line_out}", flush=True)
        if spy is not None:
            spy.send_signal(2)
            spy.wait(120)
    finally:
        if spy is not None and spy.poll() is None:
            spy.kill()
            spy.wait(30)
        for proc in children.values():
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in children.values():
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)

    # Hit lists: every tree's against the first phase's (and a file's, if given).
    first = phases[0]["records"]
    reference = orjson.loads(args.tops_compare.read_bytes()) if args.tops_compare else None
    if args.tops_out:
        args.tops_out.write_bytes(orjson.dumps({k: [x["top"] for x in v] for k, v in first.items()}))
    for ph in phases:
        ph["identical_to_first_phase"] = {
            k: sum(a["top"] == b["top"] for a, b in zip(first[k], v, strict=True)) for k, v in ph["records"].items()
        }
        if reference is not None:
            ph["identical_to_reference"] = {
                k: sum(ref == x["top"] for ref, x in zip(reference[k], v, strict=True))
                for k, v in ph["records"].items()
                if k in reference
            }

    summary: dict[str, Any] = {}
    for tree in trees:
        mine = [ph for ph in phases if ph["tree"] == str(tree)]
        per_kind: dict[str, Any] = {}
        for kind in kinds:
            walls = [x["wall_ms"] for ph in mine for x in ph["records"][kind]]
            cpus = [x["cpu_ms"] for ph in mine for x in ph["records"][kind]]
            # per query: the median over the phases, so one phase's hiccup names no query
            by_q = [
                (
                    i,
                    statistics.median(ph["records"][kind][i]["wall_ms"] for ph in mine),
                    statistics.median(ph["records"][kind][i]["cpu_ms"] for ph in mine),
                )
                for i in range(len(queries))
            ]
            slow = sorted(by_q, key=lambda t: -t[2])[: args.slow]
            per_kind[kind] = {
                "wall_ms": {"p50": _pct(walls, 50), "p95": _pct(walls, 95), "max": max(walls)},
                "cpu_ms": {"p50": _pct(cpus, 50), "p95": _pct(cpus, 95), "max": max(cpus)},
                "by_bucket_cpu_ms_p50": {
                    b: _pct([c for i, _, c in by_q if queries[i]["bucket"] == b], 50)
                    for b in dict.fromkeys(q["bucket"] for q in queries)
                },
                "slowest_by_cpu": [
                    {
                        "query": i,
                        "filter": _describe(queries[i]),
                        "wall_ms": round(w, 1),
                        "cpu_ms": round(c, 1),
                        **scopes[i],
                        "stages_ms": mine[0]["records"][kind][i]["stages_ms"],
                        "total": mine[0]["records"][kind][i]["total"],
                    }
                    for i, w, c in slow
                ],
            }
        summary[str(tree)] = per_kind
    for tree, per_kind in summary.items():
        print(tree)
        for kind, s in per_kind.items():
            print(f"  {kind}: wall {s['wall_ms']}  cpu {s['cpu_ms']}  by bucket cpu p50 {s['by_bucket_cpu_ms_p50']}")
            for x in s["slowest_by_cpu"]:
                print(
                    f"    #{x['query']} {x['filter']}: cpu {x['cpu_ms']} wall {x['wall_ms']}"
                    f" scope {x.get('scope_docs')} span {x.get('span_rows')} {x.get('scan')} stages {x['stages_ms']}"
                )
    path = write_results(
        args.out,
        {
            "db": str(args.db),
            "trees": [str(t) for t in trees],
            "phases_per_tree": args.phases,
            "openblas_num_threads": env["OPENBLAS_NUM_THREADS"],
            "scopes": [
                {"query": i, "filter": _describe(q), **s} for i, (q, s) in enumerate(zip(queries, scopes, strict=True))
            ],
            "summary": summary,
            "phases": [{k: v for k, v in ph.items() if k != "records"} for ph in phases],
            "per_query": {
                ph["tree"] + f"#{ph['round']}": {
                    k: [{kk: vv for kk, vv in x.items() if kk != "top"} for x in v] for k, v in ph["records"].items()
                }
                for ph in phases
            },
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
