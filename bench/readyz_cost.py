"""What one ``/readyz`` probe costs the knowledge base at 100k and 1M chunks, on SQLite
and on PostgreSQL: the knowledge check's wall time, this process's CPU (SQLite's reader
threads included) and, on PostgreSQL, the server's CPU, per probe.

Why: a load balancer or Kubernetes probes every replica every few seconds; each probe
read the knowledge base's counts (``knowledge/kb_status.py``) by scanning
``kb_documents``, a reader thread or a pooled connection busy for nothing.

How: a database of each engine is loaded once with ``bench/corpus.py``'s synthetic corpus
through ``KnowledgeBase.ingest_documents`` (``--base`` documents, one chunk each, the
vectors from ``BowProjection``), measured; then its ``kb_documents`` rows are copied by
SQL (new ids, same rows) up to ``--chunks``' larger sizes and measured again. The probe's
counts read ``kb_documents`` only, so the copies cost it what ingested rows would;
``kb_chunks`` keeps the ingested chunks (the start's vector load stays small).
Every probe is ``KnowledgeComponent.readiness()`` as ``/readyz`` calls it, in a child
process per source tree (``--trees NAME=PATH ...``, alternated size by size on the very
same databases, ``--rounds`` times each), after ``--warmup`` probes; ``--modes``:
``steady`` probes of an unchanged knowledge base, ``after-write`` probes each right after
a write of it (one document ingested, outside the figures), back to back;
``after-write-paced`` the same, the background count a probe started ended (outside the
figures) before the next write, as when probes come seconds apart. A probe that answers with
older counts and counts in the background (``knowledge/kb_counts_memo.py``) is measured
as it answers; where the counts' cost went is in ``loop_process_cpu_ms_per_probe`` (the
whole loop, writes and background counts included), ``counts_read`` and
``settle_after_last_probe`` (until the counts of the last write are current).

Run from the repository root, under the bench lock:
  flock /tmp/s50/bench.lock .venv/bin/python bench/readyz_cost.py \
      --trees before=/tmp/wt-before after=. [--base 100000] [--chunks 100000 1000000]
Writes bench/results/readyz_cost.json (``--out`` names another).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _tree_first(tree: Path) -> None:
    """Product code from ``tree`` (a child measures that tree's probe)."""
    sys.path.insert(0, str(tree))


# --------------------------------------------------------------------------- loading


async def _open_kb(engine: str, where: str, embedder: Any = None) -> Any:
    """The KB of ``where`` with the corpus's embedder (``embedder``: one holding the
    loaded documents' vectors; else one that has none, enough for the probe)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    import numpy as np

    from bench.corpus import DIM, LookupEmbedder
    from knowledge.kb import KBConfig, KnowledgeBase

    if embedder is None:
        embedder = LookupEmbedder({}, np.zeros((1, DIM), np.float32))
    config = KBConfig(batch_documents=2000)
    if engine == "sqlite":
        from app.cli.kb_file import open_kb_file

        return await open_kb_file(Path(where), embedder, config=config)
    from storage.postgres import open_postgres_storage

    storage = await open_postgres_storage(where)
    return await KnowledgeBase.create(storage.kb_index, embedder, config=config, on_close=storage.close)


async def load(engine: str, where: str, n: int) -> float:
    """Ingest ``n`` documents of the synthetic corpus (one chunk each); seconds taken."""
    sys.path.insert(0, str(ROOT))
    from bench.corpus import SCHEMAS, BowProjection, LookupEmbedder, embedding_text, generate

    by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in SCHEMAS}
    texts: list[str] = []
    for bucket, doc_id, meta, title, text in generate(n):
        by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
        texts.append(embedding_text(title, text))
    # The vectors once, before the clock: the probe does not depend on them.
    embedder = LookupEmbedder({t: i for i, t in enumerate(texts)}, BowProjection().matrix(texts))
    kb = await _open_kb(engine, where, embedder)
    try:
        for bucket, fields in SCHEMAS.items():
            await kb.create_bucket(bucket, fields)
        started = time.perf_counter()
        async with kb.bulk_load():
            for bucket, items in by_bucket.items():
                for start in range(0, len(items), 10_000):
                    report = await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
                    assert not report.rejected, report.rejected[:3]
        return time.perf_counter() - started
    finally:
        await kb.aclose()


def grow(engine: str, where: str, n: int) -> int:
    """Copy ``kb_documents`` rows (the ingested ones, new ids) until it holds ``n``."""
    if engine == "sqlite":
        return _grow_sqlite(where, n)
    return _grow_postgres(where, n)


def _grow_sqlite(where: str, n: int) -> int:
    """``grow`` on a SQLite file (one function per engine: each has its own connection type)."""
    import sqlite3

    conn = sqlite3.connect(where)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(kb_documents)")]
    have = conn.execute("SELECT count(*) FROM kb_documents").fetchone()[0]
    base = conn.execute("SELECT count(*) FROM kb_documents WHERE id NOT LIKE '%~%'").fetchone()[0]
    for statement in _copies(cols, int(have), int(base), n):
        conn.execute(statement)
        conn.commit()
    conn.close()
    return max(int(have), n)


def _grow_postgres(where: str, n: int) -> int:
    """``grow`` on a PostgreSQL database."""
    import psycopg

    with psycopg.connect(where, autocommit=True) as conn:
        cols = [
            r[0]
            for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'kb_documents'"
                " ORDER BY ordinal_position"
            ).fetchall()
        ]
        row = conn.execute("SELECT count(*) FROM kb_documents").fetchone()
        have = int(row[0]) if row else 0
        row = conn.execute("SELECT count(*) FROM kb_documents WHERE id NOT LIKE '%~%'").fetchone()
        base = int(row[0]) if row else 0
        for statement in _copies(cols, have, base, n):
            conn.execute(statement)
        conn.execute("VACUUM ANALYZE kb_documents")
        return max(have, n)


def _copies(cols: list[str], have: int, base: int, n: int) -> Iterator[str]:
    """The INSERTs that copy the ``base`` ingested rows under new ids (``id~1``, ``id~2``,
    …) until the table, holding ``have``, holds ``n``: the same SQL on both engines."""
    rest = ", ".join(c for c in cols if c != "id")
    copy = 1
    while have < n:
        take = min(base, n - have)
        yield (
            f"INSERT INTO kb_documents(id, {rest}) SELECT id || '~{copy}', {rest}"
            f" FROM kb_documents WHERE id NOT LIKE '%~%' ORDER BY id LIMIT {take}"
        )
        have += take
        copy += 1


# --------------------------------------------------------------------------- the probe


def _server_cpu_s(pid: int) -> float:
    """CPU seconds of a PostgreSQL server: the postmaster and its live backends."""
    import psutil

    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


async def _settled(component: Any, out: dict[str, Any] | None = None) -> dict[str, Any]:
    """Probes (``out``: the last one's answer) until one answers with counts of the stored
    generation: at once on a tree that counts in the probe."""
    out = out if out is not None else await component.readiness()
    while not out.get("counted", {"current": True})["current"]:
        await asyncio.sleep(0.02)
        out = await component.readiness()
    return out


async def _count_ended(counted: Any) -> None:
    """Until no count runs in the background (nothing to wait for on a tree without)."""
    while counted is not None and getattr(counted, "counting", False):
        await asyncio.sleep(0.005)


async def measure(
    engine: str, where: str, probes: int, warmup: int, pg_pid: int, writes: bool, paced: bool = False
) -> dict[str, Any]:
    """``probes`` probes after ``warmup``; ``writes``: each probe right after a write of the
    knowledge base (one document ingested into a bucket of its own, outside the figures),
    as on a replica whose users attach files or whose operator ingests meanwhile.
    ``paced``: the background count a probe started ends before the next write, as when
    probes come seconds apart (back to back, one count serves many probes)."""
    from app.knowledge_component import KnowledgeComponent

    kb = await _open_kb(engine, where)
    try:
        component = KnowledgeComponent(kb, sample="ingested (bench)")
        if writes:
            await kb.create_bucket("readyz_writes", {})
        # PostgreSQL counts the unreadable vectors in the background after the start (a
        # scan of the chunks): over before the first probe, not inside the figures.
        while kb.status.unreadable_vectors is None:
            await asyncio.sleep(0.05)
        first = await component.readiness()
        for _ in range(warmup):
            await component.readiness()
        # A tree that counts in the background: from counts of the stored generation on,
        # as a replica is once its first count has ended (else the whole loop may run
        # beside that count).
        await _settled(component)
        walls: list[float] = []
        cpus: list[float] = []
        current = 0
        # The server's CPU summed probe by probe (its clock ticks are 10 ms: too coarse for
        # one probe, unbiased over many), the writes left out.
        server_s = 0.0
        counted = getattr(kb.status, "_counted", None)
        reads_before = getattr(counted, "reads", 0)
        loop_c0 = time.process_time()
        for i in range(probes):
            if writes:
                if paced:  # the count the last probe started ends before the next write
                    await _count_ended(counted)
                doc = {"id": f"w-{os.getpid()}-{i}", "title": "a write", "text": f"written before probe {i}"}
                await kb.ingest_documents([doc], bucket="readyz_writes")
            s0 = _server_cpu_s(pg_pid) if pg_pid else 0.0
            c0, w0 = time.process_time(), time.perf_counter()
            out = await component.readiness()
            w1, c1 = time.perf_counter(), time.process_time()
            server_s += _server_cpu_s(pg_pid) - s0 if pg_pid else 0.0
            walls.append((w1 - w0) * 1000)
            cpus.append((c1 - c0) * 1000)
            current += bool(out.get("counted", {"current": True})["current"])  # a tree before: always counted
        loop_cpu_ms = (time.process_time() - loop_c0) * 1000 / probes
        reads = getattr(counted, "reads", 0) - reads_before
        # A tree whose probes answer with older counts: until a probe finds them current
        # (the background count of the last write ended), so the last answer is the truth.
        settle_c0, settle_w0 = time.process_time(), time.perf_counter()
        out = await _settled(component, out)
        settle_ms = (time.perf_counter() - settle_w0) * 1000
        settle_cpu_ms = (time.process_time() - settle_c0) * 1000
        server_ms = server_s * 1000 / probes if pg_pid else None
        result: dict[str, Any] = {
            "probes": probes,
            "after_a_write": writes,
            "paced": paced,
            "wall_ms": {"median": round(statistics.median(walls), 2), "max": round(max(walls), 2)},
            "process_cpu_ms": {"median": round(statistics.median(cpus), 2), "mean": round(statistics.mean(cpus), 2)},
            "answer": {k: out.get(k) for k in ("ok", "documents", "chunks", "vectors", "pending_vectors")},
            "first_answer_documents": first.get("documents"),
            # Probes whose counts were of the stored generation, and the counts read over
            # the probes (one per probe before; in the background, never two at once, after).
            "current_answers": current,
            "counts_read": reads if counted is not None else None,
            # This process's CPU over the whole loop per probe: the writes, the probes and
            # the counts in the background (a reader thread's on SQLite) - where the counts'
            # cost went once it left the probe.
            "loop_process_cpu_ms_per_probe": round(loop_cpu_ms, 2),
            "settle_after_last_probe": {"wall_ms": round(settle_ms, 1), "process_cpu_ms": round(settle_cpu_ms, 1)},
        }
        if server_ms is not None:
            result["server_cpu_ms_per_probe"] = round(server_ms, 2)
        return result
    finally:
        await kb.aclose()


def child(
    tree: Path, engine: str, where: str, probes: int, warmup: int, pg_pid: int, writes: bool, paced: bool = False
) -> dict[str, Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", str(tree), "--engine", engine, "--where", where,
         "--probes", str(probes), "--warmup", str(warmup), "--pg-pid", str(pg_pid),
         *(["--writes"] if writes else []), *(["--paced"] if paced else [])],
        capture_output=True, text=True, env=env, check=False, cwd=str(tree),
    )  # fmt: skip
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1][:500]}
    import json

    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", nargs="+", default=[f"here={ROOT}"], help="NAME=PATH source trees to measure")
    ap.add_argument("--engines", nargs="+", default=["sqlite", "postgres"])
    ap.add_argument("--base", type=int, default=100_000, help="documents ingested (one chunk each)")
    ap.add_argument("--chunks", type=int, nargs="+", default=[100_000, 1_000_000], help="sizes measured")
    ap.add_argument("--probes", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="each tree measured this many times, alternated")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--out", default="readyz_cost")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    ap.add_argument("--where", help=argparse.SUPPRESS)
    ap.add_argument("--pg-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--writes", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--modes",
        nargs="+",
        default=["steady", "after-write"],
        choices=["steady", "after-write", "after-write-paced"],
        help="probes of an unchanged knowledge base, probes each right after a write, and the same with the"
        " background count a probe started ended before the next write (probes seconds apart)",
    )
    args = ap.parse_args()

    if args.child is not None:
        import json

        _tree_first(args.child.resolve())
        out = asyncio.run(
            measure(args.engine, args.where, args.probes, args.warmup, args.pg_pid, args.writes, args.paced)
        )
        print(json.dumps(out))
        return 0

    sys.path.insert(0, str(ROOT))
    from bench._common import write_results

    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.trees)}
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="agentchat-readyz-"))
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "benchmark": "readyz_cost",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "base_documents_ingested": args.base,
        "trees": {k: str(v) for k, v in trees.items()},
        "code": {k: _head(v) for k, v in trees.items()},
        "load_average": {"start": _load()},
        "engines": {},
    }
    server = None
    try:
        for engine in args.engines:
            pg_pid = 0
            if engine == "sqlite":
                where = str(workdir / "kb.sqlite3")
                for old in workdir.glob("kb.sqlite3*"):
                    old.unlink()
            else:
                from tests.support.postgres import TestPostgres

                server = TestPostgres(settings={"shared_buffers": "64MB"}).start()
                server.admin('CREATE DATABASE "readyz"')
                where = server.url("readyz")
                pg_pid = server._proc.pid if server._proc is not None else 0
            print(f"{engine}: ingesting {args.base:,} documents", flush=True)
            took = asyncio.run(load(engine, where, args.base))
            by_size: dict[str, Any] = {"ingest_seconds": round(took, 1)}
            for n in sorted(args.chunks):
                rows = grow(engine, where, n)
                size: dict[str, Any] = {"kb_documents_rows": rows, "load_average": _load()}
                for mode in args.modes:
                    for round_ in range(args.rounds):  # the trees alternated: A B A B ...
                        for name, tree in trees.items():
                            writes, paced = mode.startswith("after-write"), mode == "after-write-paced"
                            got = child(tree, engine, where, args.probes, args.warmup, pg_pid, writes, paced)
                            key = {"steady": name, "after-write": f"{name}, after a write"}.get(
                                mode, f"{name}, after a write, paced"
                            )
                            size.setdefault(key, []).append(got)
                            print(f"  {engine} {n:,} {key} (round {round_ + 1}): {got}", flush=True)
                by_size[str(n)] = size
            results["engines"][engine] = by_size
            if server is not None:
                server.stop()
                server = None
    finally:
        if server is not None:
            server.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    results["load_average"]["end"] = _load()
    print(write_results(args.out, results))
    return 0


def _load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _head(tree: Path) -> str:
    proc = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--", "knowledge", "storage", "app"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return proc.stdout.strip() + (" + uncommitted changes" if dirty else "")


if __name__ == "__main__":
    raise SystemExit(main())
