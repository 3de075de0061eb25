"""Background jobs of ``agentchat serve --workers 2`` on PostgreSQL: this checkout
against another (``--base``, e.g. a detached worktree of main before the PostgreSQL
leader), alternated in one run (issue 23 item 3).

Per pass and side: a fresh database, two workers, the extractive provider, the retention
pass every ``--interval-s`` (``AGENT_RETENTION_INTERVAL_S``), nothing else running.
Measured over ``--window-s``:

- retention passes per second, and how many workers ran any: each worker's own figures,
  read through a connection pinned to it (``/metrics``; on a side whose scrape is merged
  — ``agentchat_metrics_workers`` present — from the worker's own socket in the
  supervisor's runtime directory instead, which serves that worker's exposition alone);
- the database connections by ``application_name`` (``pg_stat_activity``);
- where the side has a leader (``/readyz`` ``workers.background_jobs``): SIGKILL of the
  leading worker, then the time until the surviving worker says ``here``.

Run from the repository root:
    .venv/bin/python bench/workers_pg_jobs.py --base /path/to/worktree [--passes 2]
Writes bench/results/workers_pg_jobs.json (``--name`` to change).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._common import write_results  # noqa: E402
from tests.support.postgres import TestPostgres  # noqa: E402
from tests.support.procs import child_env, free_port  # noqa: E402
from tests.test_workers import Pinned, pinned_clients  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", type=Path, required=True, help="the other checkout (run with this interpreter)")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--window-s", type=float, default=6.0)
    p.add_argument("--interval-s", type=float, default=0.25)
    p.add_argument("--name", default="workers_pg_jobs")
    return p.parse_args()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def passes(values: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return sum(v for (name, _), v in values.items() if name == "agentchat_retention_passes_total")


async def own_figures(pin: Pinned) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The worker's own exposition, not a merged one."""
    answer = await pin.http.get(f"{pin.base}/metrics")
    pin.check(answer)
    values = samples(answer.text)
    if ("agentchat_metrics_workers", ()) not in values:
        return values
    directory = workers_dir(pin.pid)
    for sock in directory.glob(f"{pin.pid}-*.metrics"):
        reader, writer = await asyncio.open_unix_connection(str(sock))
        data = await reader.read()
        writer.close()
        return samples(data.partition(b"\n")[2].decode())
    raise RuntimeError(f"no socket of worker {pin.pid} in {directory}")


def workers_dir(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return Path(next(v.split(b"=", 1)[1] for v in environ if v.startswith(b"AGENT_WORKERS_DIR=")).decode())


def connections(pg: TestPostgres, database: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(pg.url("postgres"), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT application_name, count(*) FROM pg_stat_activity WHERE datname = %s GROUP BY 1 ORDER BY 1",
            (database,),
        ).fetchall()
    return {str(name): int(n) for name, n in rows}


async def leader_of(pins: dict[str, list[Pinned]]) -> tuple[Pinned, Pinned] | None:
    """(leading worker, the other), or ``None`` when this side elects no leader."""
    where = {}
    for replica, (pin, *_) in pins.items():
        answer = await pin.http.get(f"{pin.base}/readyz")
        pin.check(answer)
        where[replica] = (answer.json().get("workers") or {}).get("background_jobs")
    if "here" not in where.values():
        return None
    (lead,) = [pins[r][0] for r, w in where.items() if w == "here"]
    (other,) = [pins[r][0] for r, w in where.items() if w != "here"]
    return lead, other


async def one_side(args: argparse.Namespace, pg: TestPostgres, root: Path, label: str) -> dict[str, Any]:
    database = pg.new_database()
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix=f"pgjobs-{label}-"))
    env = child_env(
        {
            "AGENT_DATABASE_URL": pg.url(database),
            "AGENT_SECRET_KEY": "workers-share-this-key-0123456789",
            "AGENT_DB_PATH": str(workdir / "agent.sqlite3"),
            "AGENT_WORKERS": "2",
            "AGENT_LLM_PROVIDER": "extractive",
            "AGENT_EMBEDDER": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_RETENTION_INTERVAL_S": str(args.interval_s),
        }
    )
    argv = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend"]
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    row: dict[str, Any] = {"side": label, "root": str(root)}
    try:
        async with httpx.AsyncClient(timeout=2) as http:
            for _ in range(1200):
                try:
                    if (await http.get(f"{base}/healthz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.05)
        async with pinned_clients(base, 1) as pins:
            workers = [p for (p, *_) in pins.values()]
            await asyncio.sleep(1.0)  # past the start-up pass of each side (under uvicorn's 5 s keep-alive)
            before = [passes(await own_figures(p)) for p in workers]
            started = time.monotonic()
            while time.monotonic() - started < args.window_s:  # keeps the pinned connections alive
                await asyncio.sleep(1.0)
                for pin in workers:
                    pin.check(await pin.http.get(f"{pin.base}/healthz"))
            after = [passes(await own_figures(p)) for p in workers]
            elapsed = time.monotonic() - started
            per_worker = [a - b for a, b in zip(after, before, strict=True)]
            row.update(
                retention_passes_per_s=round(sum(per_worker) / elapsed, 2),
                workers_running_retention=sum(1 for n in per_worker if n > 0),
                connections=connections(pg, database),
                load_avg_1m=round(os.getloadavg()[0], 2),
            )
            pair = await leader_of(pins)
            if pair is not None:
                lead, other = pair
                os.kill(lead.pid, signal.SIGKILL)
                killed = time.monotonic()
                while True:
                    answer = await other.http.get(f"{other.base}/readyz")
                    other.check(answer)
                    if answer.json()["workers"]["background_jobs"] == "here":
                        break
                    assert time.monotonic() - killed < 60, "no take-over within 60 s"
                    await asyncio.sleep(0.02)
                row["leader_takeover_s"] = round(time.monotonic() - killed, 3)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        pg.drop_database(database)
    return row


def main() -> None:
    args = parse_args()
    pg = TestPostgres().start()
    rows = []
    try:
        pg.prepare_template()
        for p in range(args.passes):
            for label, root in (("base", args.base.resolve()), ("this", ROOT)):
                row = {"pass": p, **asyncio.run(one_side(args, pg, root, label))}
                rows.append(row)
                print(row, flush=True)
    finally:
        pg.stop()
    write_results(args.name, {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})


if __name__ == "__main__":
    main()
