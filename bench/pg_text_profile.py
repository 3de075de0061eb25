"""Where a PostgreSQL full-text search spends its time (issue 24 item 1), on a database
``bench/corpus.py`` loaded and kept (its ``pg`` side run against a server that stays up,
e.g. ``AGENT_TEST_DATABASE_URL``).

The bench's own query set runs as ``bench/corpus.py`` runs it (``KnowledgeBase.search``,
top 10, text / hybrid / filtered text / filtered hybrid), every statement the storage
room sends timed and labelled by what it is (postings read, exact re-score, exhaustive
rank, match count, document frequencies, statistics, vectors, hydration). Per query:
its latency, the CPU the server's processes spent on it (``psutil``, summed over the
postmaster's children: steadier than wall time on a shared machine) and the CPU this
process spent (``time.process_time``: the search's own Python and numpy work, which
runs here, not on the server).

``--baseline REV`` alternates, query by query, between today's ``TextRanker`` and the
one of git revision REV (its ``storage/postgres/kb_text.py`` and ``kb_postings.py``;
or ``--baseline FILE``, a copy of an older single-file ``kb_text.py``) on the same
database, so both sides see the same load; ``--explain`` prints ``EXPLAIN (ANALYZE, BUFFERS)`` of the
slowest statement of each label.

Run from the repository root:
  .venv/bin/python bench/pg_text_profile.py --pg-url URL --workdir DIR [--baseline REV|FILE] [--rounds N]
  [--out corpus_pg_text_<name>]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import types
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as the service and bench/corpus.py run

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench._common import summary, write_results  # noqa: E402
from bench.corpus import LookupEmbedder, query_set  # noqa: E402

KINDS: dict[str, dict[str, Any]] = {
    "search_text": {"mode": "text"},
    "search_hybrid": {"mode": "hybrid"},
    "filtered_text": {"mode": "text", "filtered": True},
    "filtered_hybrid": {"mode": "hybrid", "filtered": True},
}

#: A statement's label: the first pattern found in its text.
LABELS = (
    ("kb_postings k WHERE k.lexeme = q.lex", "postings"),
    ("n.n * %(row_cost)s", "postings_scoped"),
    ("c.id = ANY(%(ids)s::bigint[])", "rescore_ids"),
    ("ts_delete", "rank_exhaustive"),
    ("SELECT count(*) FROM kb_chunks c WHERE", "count_matches"),
    ("FROM kb_lexeme", "df"),
    ("SELECT count(*) FROM kb_chunks WHERE tsv", "df"),
    ("kb_postings WHERE lexeme", "df"),
    ("to_tsvector", "lexemes"),
    ("avg(ntok)", "totals"),
    ("sum(chunk_count)", "bucket_chunks"),
    ("<=>", "vectors"),
    ("embedding", "vectors"),
)


def label(sql: str) -> str:
    for needle, name in LABELS:
        if needle in sql:
            return name
    return "other"


def load_ranker(baseline: str) -> type:
    """The ``TextRanker`` of ``baseline``: a file (an older ``kb_text.py`` that holds the
    whole text side, as before the postings read had its own module) or a git revision
    (its ``kb_text.py``, with its ``kb_postings.py`` when it has one: loaded under the
    real name while its ``kb_text`` is, so the baseline does not run today's)."""
    path = Path(baseline)
    if path.is_file():
        return _load("kb_text_baseline", path.read_text()).TextRanker  # type: ignore[no-any-return]

    def show(name: str) -> str | None:
        found = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{baseline}:storage/postgres/{name}"],
            capture_output=True,
            text=True,
            check=False,
        )
        return found.stdout if found.returncode == 0 else None

    text = show("kb_text.py")
    if text is None:
        raise SystemExit(f"--baseline {baseline}: neither a file nor a revision with storage/postgres/kb_text.py")
    postings = show("kb_postings.py")
    real = "storage.postgres.kb_postings"
    today = sys.modules.get(real)
    try:
        if postings is not None:
            sys.modules[real] = _load("kb_postings_baseline", postings)
        return _load("kb_text_baseline", text).TextRanker  # type: ignore[no-any-return]
    finally:
        if today is not None:
            sys.modules[real] = today


def _load(name: str, source: str) -> Any:
    """``source`` run as module ``name`` (registered: dataclasses look their module up)."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


class ServerCpu:
    """CPU seconds of every process of the server (postmaster and backends)."""

    def __init__(self, url: str) -> None:
        import psutil
        import psycopg

        # The backend's parent is looked up while the backend lives: once the connection
        # closes, its process is gone.
        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
            assert row is not None
            root = psutil.Process(int(row[0])).parent()
        assert root is not None
        self.root = root

    def seconds(self) -> float:
        import psutil

        total = 0.0
        for p in [self.root, *self.root.children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-url", required=True)
    ap.add_argument("--workdir", type=Path, required=True, help="bench/corpus.py's --workdir (queries.npy)")
    ap.add_argument("--baseline", help="an older kb_text.py, or a git revision, to alternate with")
    ap.add_argument("--rounds", type=int, default=1, help="passes over the 60 queries")
    ap.add_argument("--explain", action="store_true")
    ap.add_argument("--out", help="results name: bench/results/<name>.json")
    args = ap.parse_args()

    from knowledge.kb import KBConfig, KnowledgeBase
    from storage.postgres import open_postgres_storage
    from storage.postgres.database import PostgresDatabase

    storage = await open_postgres_storage(args.pg_url)
    db = storage.db
    index = storage.kb_index
    sides: dict[str, Any] = {"today": index._text}
    if args.baseline:
        sides["baseline"] = load_ranker(args.baseline)(db)
    kb = await KnowledgeBase.create(
        index, LookupEmbedder({}, np.zeros((1, 384), np.float32)), config=KBConfig(), on_close=storage.close
    )
    cpu = ServerCpu(args.pg_url)

    current: list[list[tuple[str, float, str, Any]]] = []

    def timed(name: str) -> Callable[..., Awaitable[Any]]:
        original = getattr(PostgresDatabase, name)

        async def wrapper(self: Any, sql: str, params: Any = ()) -> Any:
            t0 = time.perf_counter()
            try:
                return await original(self, sql, params)
            finally:
                if current:
                    current[-1].append((label(sql), (time.perf_counter() - t0) * 1000, sql, params))

        return wrapper

    PostgresDatabase.fetchall = timed("fetchall")  # type: ignore[method-assign,assignment]
    PostgresDatabase.fetchone = timed("fetchone")  # type: ignore[method-assign,assignment]

    queries = query_set()
    results: dict[str, dict[str, Any]] = {
        side: {k: {"ms": [], "server_cpu_ms": [], "client_cpu_ms": [], "statements": {}} for k in KINDS}
        for side in sides
    }
    slowest: dict[tuple[str, str], tuple[float, str, Any]] = {}

    async def one(side: str, kind: str, q: dict[str, Any]) -> None:
        spec = KINDS[kind]
        index._text = sides[side]
        kw: dict[str, Any] = {"filters": q["kb_filter"]} if spec.get("filtered") else {}
        current.append([])
        c0, p0, t0 = cpu.seconds(), time.process_time(), time.perf_counter()
        await kb.search(q["text"], bucket=q["bucket"], top_k=10, context_chars=400, mode=spec["mode"], **kw)
        ms = (time.perf_counter() - t0) * 1000
        client = (time.process_time() - p0) * 1000
        server = (cpu.seconds() - c0) * 1000
        stmts = current.pop()
        out = results[side][kind]
        out["ms"].append(ms)
        out["server_cpu_ms"].append(server)
        out["client_cpu_ms"].append(client)
        per: dict[str, float] = {}
        for name, took, sql, params in stmts:
            per[name] = per.get(name, 0.0) + took
            key = (side, name)
            if took > slowest.get(key, (0.0, "", None))[0]:
                slowest[key] = (took, sql, params)
        for name in {s[0] for s in stmts} | set(out["statements"]):
            out["statements"].setdefault(name, []).append(per.get(name, 0.0))

    # Warm-up: every side sees each kind once before anything counts.
    for side in sides:
        for kind in KINDS:
            for q in queries[:5]:
                await one(side, kind, q)
    for side in sides:
        for kind in KINDS:
            results[side][kind] = {"ms": [], "server_cpu_ms": [], "client_cpu_ms": [], "statements": {}}
    slowest.clear()

    names = list(sides)
    for r in range(args.rounds):
        for i, q in enumerate(queries):
            for kind in KINDS:
                order = names if (i + r) % 2 == 0 else names[::-1]
                for side in order:
                    await one(side, kind, q)

    report: dict[str, Any] = {}
    for side in sides:
        report[side] = {}
        for kind in KINDS:
            out = results[side][kind]
            report[side][kind] = {
                "latency_ms": summary(out["ms"]),
                "server_cpu_ms": summary(out["server_cpu_ms"]),
                "client_cpu_ms": summary(out["client_cpu_ms"]),
                "statement_ms": {n: summary(v) for n, v in sorted(out["statements"].items())},
            }
            lat = report[side][kind]["latency_ms"]
            cpu_s = report[side][kind]["server_cpu_ms"]
            cpu_c = report[side][kind]["client_cpu_ms"]
            print(
                f"{side:9s} {kind:16s} p50 {lat['p50']:7.1f} p95 {lat['p95']:7.1f} ms | server cpu mean "
                f"{cpu_s['mean']:6.1f} p95 {cpu_s['p95']:6.1f} ms | this process's cpu mean {cpu_c['mean']:6.1f} ms",
                flush=True,
            )
            for n, s in report[side][kind]["statement_ms"].items():
                print(f"{'':28s}{n:16s} p50 {s['p50']:7.1f} p95 {s['p95']:7.1f}", flush=True)
    if args.explain:
        for (side, name), (took, sql, params) in sorted(slowest.items()):
            if name in ("vectors", "other", "lexemes") or took < 5:
                continue
            async with db.reading() as conn:
                cur = await conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)  # type: ignore[arg-type]
                plan = "\n".join(str(r[0]) for r in await cur.fetchall())
            print(f"\n=== {side} {name}: {took:.1f} ms when timed\n{plan}", flush=True)
    await kb.aclose()
    if args.out:
        load = os.getloadavg()
        write_results(args.out, {"load_average": [round(x, 2) for x in load], "rounds": args.rounds, **report})
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
