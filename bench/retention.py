"""Retention (issue 25 item 6): database size and replay time of finished runs before and
after their event logs are compacted, on SQLite and PostgreSQL.

Each run is what a knowledge answer stores: ``run_started``, ``tool_selection``, two
turns with a tool call, ``--tokens`` ``content_chunk`` events (one per streamed token),
``response`` and ``message_complete``. The runs are written once into database A, which
is copied to B (SQLite: the file; PostgreSQL: ``CREATE DATABASE … TEMPLATE``); B is
compacted with the same pass the server runs (``app.retention.retention_pass``). Then:

* size: bytes after ``VACUUM`` (SQLite: the file; PostgreSQL: ``run_events`` + ``runs`` after
  ``VACUUM FULL`` of both databases), per 1,000 runs;
* replay: ``RunStore.events_after(run, 0)`` — what every replay of a finished run reads —
  for ``--sample`` runs, A and B alternately (the order flips each time), p50/p95;
* correctness: every sampled replay of B has the same text and the same other events as A's.

    .venv/bin/python bench/retention.py                       # 10,000 runs on both engines
    .venv/bin/python bench/retention.py --runs 2000 --pg-runs 1000 --engines sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import orjson  # noqa: E402

from app.retention import RetentionPolicy, retention_pass  # noqa: E402
from bench._common import summary, write_results  # noqa: E402
from storage.records import RunEvent  # noqa: E402

WORDS = (
    "the service keeps every token of every run in its event log so a replay "
    "yields the same answer later retention folds them into one event per stretch"
).split()
FINISHED_AT = time.time() - 90 * 86_400.0  # long ago: every run is due


def run_events(run_id: str, conversation_id: str, tokens: int, rng: random.Random) -> list[tuple[int, str, str]]:
    def dumps(value: Any) -> str:
        return orjson.dumps(value).decode()

    out: list[tuple[str, str]] = [
        ("run_started", dumps({"run_id": run_id, "conversation_id": conversation_id})),
        (
            "tool_selection",
            dumps(
                {
                    "context_type": "knowledge",
                    "core": ["knowledge_base_search"],
                    "rag": [{"name": "generate_response", "score": 0.5}],
                    "fallback": False,
                    "tools": ["knowledge_base_search", "generate_response"],
                }
            ),
        ),
        ("message_start", dumps({"turn": 1})),
        ("tool_call_start", dumps({"tool_use_id": "t1", "name": "knowledge_base_search"})),
        (
            "tool_call_result",
            dumps(
                {
                    "tool_use_id": "t1",
                    "name": "knowledge_base_search",
                    "is_error": False,
                    "duration_ms": 12,
                    "summary": "5 passages",
                }
            ),
        ),
        ("message_start", dumps({"turn": 2})),
    ]
    text = [rng.choice(WORDS) + " " for _ in range(tokens)]
    out += [("content_chunk", dumps({"chunk": t})) for t in text]
    out += [
        (
            "response",
            dumps(
                {
                    "answer": "".join(text),
                    "sources": [],
                    "confidence_score": 0.8,
                    "used_internal_kb": True,
                    "used_external_kb": False,
                }
            ),
        ),
        (
            "message_complete",
            dumps(
                {
                    "status": "completed",
                    "run_id": run_id,
                    "conversation_id": conversation_id,
                    "turns": 2,
                    "usage": {"input_tokens": 900, "output_tokens": tokens},
                }
            ),
        ),
    ]
    return [(i + 1, name, data) for i, (name, data) in enumerate(out)]


async def load(storage: Any, runs: int, tokens: int, batch: int = 200) -> list[str]:
    """``runs`` finished runs (one conversation each, one user), written in batches."""
    rng = random.Random(25)
    ids: list[str] = []
    sql = storage.runs.sql
    for start in range(0, runs, batch):
        convs, rows, events = [], [], []
        for i in range(start, min(start + batch, runs)):
            run_id, conv = f"run_{i:06d}", f"conv_{i:06d}"
            ids.append(run_id)
            convs.append(("bench", conv))
            rows.append((run_id, conv, "bench", "knowledge", "completed", FINISHED_AT, FINISHED_AT))
            events += [(run_id, seq, name, data) for seq, name, data in run_events(run_id, conv, tokens, rng)]

        async def write(
            tx: Any, convs: Sequence[Any] = convs, rows: Sequence[Any] = rows, events: Sequence[Any] = events
        ) -> None:
            await tx.executemany("INSERT INTO conversations(user_id, id) VALUES (?, ?)", convs)
            await tx.executemany(
                "INSERT INTO runs(id, conversation_id, user_id, context_type, status, created_at, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            await tx.executemany("INSERT INTO run_events(run_id, seq, event, data) VALUES (?, ?, ?, ?)", events)

        await sql.transact(write)
    return ids


def replay_text(events: list[RunEvent]) -> tuple[str, list[tuple[str, str]]]:
    text = "".join(orjson.loads(e.data)["chunk"] for e in events if e.event == "content_chunk")
    return text, [(e.event, e.data) for e in events if e.event != "content_chunk"]


async def replay(a: Any, b: Any, sample: list[str]) -> dict[str, Any]:
    """Each sampled run replayed from A and from B, alternately (the first store flips)."""
    times: dict[str, list[float]] = {"before": [], "after": []}
    rows: dict[str, list[int]] = {"before": [], "after": []}
    for i, run_id in enumerate(sample):
        order = [("before", a), ("after", b)] if i % 2 == 0 else [("after", b), ("before", a)]
        got: dict[str, list[RunEvent]] = {}
        for label, storage in order:
            t0 = time.perf_counter()
            got[label] = await storage.runs.events_after(run_id, 0)
            times[label].append((time.perf_counter() - t0) * 1000)
            rows[label].append(len(got[label]))
        if replay_text(got["before"]) != replay_text(got["after"]):
            raise AssertionError(f"{run_id}: the compacted replay differs")
    return {
        label: {"ms": summary(times[label]), "events_per_replay": sum(rows[label]) / len(rows[label])}
        for label in times
    }


async def compact(storage: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    done = await retention_pass(storage.retention, storage.history, RetentionPolicy(run_events_days=30, batch=200))
    return {
        "seconds": round(time.perf_counter() - t0, 2),
        "runs": done.runs_compacted,
        "events_removed": done.events_removed,
    }


# --- SQLite ---------------------------------------------------------------------------


async def sqlite_case(runs: int, tokens: int, sample_n: int, workdir: Path) -> dict[str, Any]:
    from storage.open import open_storage

    path_a, path_b = workdir / "before.sqlite3", workdir / "after.sqlite3"
    a = await open_storage(path_a)
    t0 = time.perf_counter()
    ids = await load(a, runs, tokens)
    load_s = time.perf_counter() - t0
    await a.db.flush()
    await a.close()
    shutil.copy(path_a, path_b)
    b = await open_storage(path_b)
    try:
        compaction = await compact(b)
    finally:
        await b.close()
    # Both files VACUUMed (freed pages and half-empty ones given back), then measured.
    sizes = {
        "before": await asyncio.to_thread(vacuumed_bytes, path_a),
        "after": await asyncio.to_thread(vacuumed_bytes, path_b),
    }
    a, b = await open_storage(path_a), await open_storage(path_b)
    try:
        sample = random.Random(1).sample(ids, min(sample_n, len(ids)))
        replays = await replay(a, b, sample)
    finally:
        await a.close()
        await b.close()
    return result("sqlite", runs, tokens, load_s, compaction, sizes, replays)


def vacuumed_bytes(path: Path) -> int:
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


# --- PostgreSQL -------------------------------------------------------------------------


async def postgres_case(runs: int, tokens: int, sample_n: int) -> dict[str, Any]:
    import psycopg

    from storage.postgres import open_postgres_storage
    from tests.support.postgres import TestPostgres

    server = await asyncio.to_thread(TestPostgres().start)
    try:
        await asyncio.to_thread(server.prepare_template)
        with server.database() as url_a:
            a = await open_postgres_storage(url_a)
            t0 = time.perf_counter()
            ids = await load(a, runs, tokens)
            load_s = time.perf_counter() - t0
            await a.close()
            name_a = url_a.rsplit("/", 1)[1].split("?")[0]
            url_b = url_a.replace(f"/{name_a}", f"/{name_a}_after")
            admin = url_a.replace(f"/{name_a}", "/postgres")
            async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
                await conn.execute(f'CREATE DATABASE "{name_a}_after" TEMPLATE "{name_a}"')
            try:
                a, b = await open_postgres_storage(url_a), await open_postgres_storage(url_b)
                try:
                    compaction = await compact(b)
                    sizes = {"before": await pg_bytes(url_a), "after": await pg_bytes(url_b)}
                    sample = random.Random(1).sample(ids, min(sample_n, len(ids)))
                    replays = await replay(a, b, sample)
                finally:
                    await a.close()
                    await b.close()
            finally:
                async with await psycopg.AsyncConnection.connect(admin, autocommit=True) as conn:
                    await conn.execute(f'DROP DATABASE IF EXISTS "{name_a}_after" WITH (FORCE)')
    finally:
        await asyncio.to_thread(server.stop)
    return result("postgres", runs, tokens, load_s, compaction, sizes, replays)


async def pg_bytes(url: str) -> int:
    """``run_events`` and ``runs`` with their indexes and TOAST, after ``VACUUM FULL``."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("VACUUM FULL run_events")
        await conn.execute("VACUUM FULL runs")
        cur = await conn.execute("SELECT pg_total_relation_size('run_events') + pg_total_relation_size('runs')")
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


def result(
    engine: str,
    runs: int,
    tokens: int,
    load_s: float,
    compaction: dict[str, Any],
    sizes: dict[str, int],
    replays: dict[str, Any],
) -> dict[str, Any]:
    per_k = {k: round(v / runs * 1000 / 1e6, 2) for k, v in sizes.items()}
    out = {
        "engine": engine,
        "runs": runs,
        "tokens_per_run": tokens,
        "load_s": round(load_s, 1),
        "compaction": compaction,
        "bytes": sizes,
        "mb_per_1000_runs": per_k,
        "size_ratio_after_before": round(sizes["after"] / sizes["before"], 3),
        "replay": replays,
        "replay_p50_ratio_after_before": round(replays["after"]["ms"]["p50"] / replays["before"]["ms"]["p50"], 3),
    }
    print(
        f"{engine}: {runs} runs x {tokens} tokens; compaction {compaction['seconds']} s "
        f"({compaction['events_removed']} events removed); MB per 1,000 runs {per_k['before']} -> "
        f"{per_k['after']} (x{out['size_ratio_after_before']}); replay p50 "
        f"{replays['before']['ms']['p50']:.2f} -> {replays['after']['ms']['p50']:.2f} ms, p95 "
        f"{replays['before']['ms']['p95']:.2f} -> {replays['after']['ms']['p95']:.2f} ms "
        f"({replays['before']['events_per_replay']:.0f} -> {replays['after']['events_per_replay']:.0f} events)"
    )
    return out


async def main_async(args: argparse.Namespace) -> int:
    import os

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
        if "sqlite" in engines:
            results.append(await sqlite_case(args.runs, args.tokens, args.sample, Path(tmp)))
        if "postgres" in engines:
            results.append(await postgres_case(args.pg_runs, args.tokens, args.sample))
    load = os.getloadavg()
    path = write_results("retention", {"load_average": [round(x, 2) for x in load], "results": results})
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; wrote {path}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000, help="finished runs on SQLite (10,000)")
    parser.add_argument("--pg-runs", type=int, default=10_000, help="finished runs on PostgreSQL (10,000)")
    parser.add_argument("--tokens", type=int, default=120, help="content_chunk events per run (120)")
    parser.add_argument("--sample", type=int, default=400, help="runs replayed from each database (400)")
    parser.add_argument("--engines", default="sqlite,postgres", help="sqlite, postgres or both (default)")
    return asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
