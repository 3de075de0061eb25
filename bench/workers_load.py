"""One process against ``agentchat serve --workers 2``, and the event-loop lag that says
a replica is full (issue 23 items 3 and 4).

Each topology is started in turn (alternating, ``--rounds`` times) on the default SQLite
file with the paced Ollama fake of ``bench/capacity.py`` (``--tokens`` tokens
``--pause-ms`` apart), and driven at each ``--levels`` of concurrent runs with the same
raw-socket clients. While a level runs, every worker's ``/readyz`` ``load`` is read
every 0.5 s (fresh connections, so the kernel spreads them over the workers): the
event-loop lag each worker reports is set beside the latency the clients measured, and
that pairing is what ``AGENT_MAX_LOOP_LAG_MS`` is chosen from — refusal must start
where first tokens and inter-token gaps go past their targets, not before.
Refusal is off during the measurement (``AGENT_MAX_LOOP_LAG_MS=0``).

Server CPU is the parent and every worker (psutil, children included).

Run from the repository root:  .venv/bin/python bench/workers_load.py [--levels 100,300]
Writes bench/results/workers_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402

from bench._common import raise_fd_limit, summary, write_results  # noqa: E402
from bench._fakes import Fakes  # noqa: E402
from bench._load import drive, spread  # noqa: E402
from bench.capacity import agent_env, judge, replicas, run_body, warm_up  # noqa: E402
from tests.support.procs import AgentServer  # noqa: E402


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its live children."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            t = proc.cpu_times()
            total += t.user + t.system
    return total


async def sample_load(base: str, stop: asyncio.Event, out: dict[str, list[float]]) -> None:
    """Every 0.5 s, each worker's reported loop lag (by replica id), until ``stop``."""
    while not stop.is_set():
        for _ in range(4):  # fresh connections: the kernel spreads them over the workers
            with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
                async with httpx.AsyncClient(timeout=5) as http:
                    load = (await http.get(f"{base}/readyz")).json()["load"]
                out.setdefault(load["replica"], []).append(float(load["loop_lag_ms"]))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def one_level(
    args: argparse.Namespace, workdir: Path, server: AgentServer, level: int, label: str
) -> dict[str, Any]:
    assert server.pid is not None
    cpu0 = tree_cpu_s(server.pid)
    keys = [f"{label}-{level}-{i}" for i in range(level)]
    specs = [
        {
            "key": key,
            "at_s": at,
            "protocol": "agent",
            "post": server.base,
            "follow": [server.base],
            "body": run_body(key),
            "drop_after": None,
        }
        for key, at in zip(keys, spread(level, args.ramp_s), strict=True)
    ]
    stop, lags = asyncio.Event(), {}
    sampler = asyncio.create_task(sample_load(server.base, stop, lags))
    try:
        result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
    finally:
        stop.set()
        await sampler
    figures = judge(result["runs"], args.pause_ms / 1000, args.tokens)
    figures.update(
        level=level,
        server_cpu_s=round(tree_cpu_s(server.pid) - cpu0, 1),
        loop_lag_ms={replica[-8:]: summary(values) for replica, values in lags.items()},
        load_avg_1m=round(os.getloadavg()[0], 2),
    )
    return figures


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": []}
    async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes:
        for r in range(args.rounds):
            for workers in args.workers:
                label = f"r{r}-w{workers}"
                env = agent_env(
                    fakes,
                    "ollama",
                    AGENT_DB_PATH=str(workdir / f"{label}.sqlite3"),
                    AGENT_WORKERS=str(workers),
                    AGENT_MAX_LOOP_LAG_MS="0",
                )
                async with replicas(workdir, label, env, 1) as servers:
                    await warm_up(workdir, servers * workers, label)
                    for level in args.levels:
                        row = await one_level(args, workdir, servers[0], level, label)
                        row.update(round=r, workers=workers)
                        out["rounds"].append(row)
                        print_row(row)
    return out


def print_row(row: dict[str, Any]) -> None:
    lags = " ".join(f"{s['p50']:.0f}/{s['p99']:.0f}" for s in row["loop_lag_ms"].values())
    print(
        f"w={row['workers']} r={row['round']} {row['level']:>5} {row['completed']:>5}/{row['runs']:<5} "
        f"ttft p50/p99 {row['ttft_s']['p50']:.2f}/{row['ttft_s']['p99']:.2f} s  "
        f"gap p50/p99 {row['extra_gap_ms']['p50']:.1f}/{row['extra_gap_ms']['p99']:.1f} ms  "
        f"cpu {row['server_cpu_s']:.1f} s  loop lag p50/p99 per worker {lags} ms  load {row['load_avg_1m']}",
        flush=True,
    )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[100, 200, 300])
    p.add_argument("--workers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    p.add_argument("--ramp-s", type=float, default=1.0)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--run-timeout-s", type=float, default=180.0)
    p.add_argument("--name", default="workers_load")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="workers-load-"))
    started = time.time()
    try:
        results = asyncio.run(bench(args, workdir))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["args"] = vars(args)
    results["took_s"] = round(time.time() - started, 1)
    write_results(args.name, results)


if __name__ == "__main__":
    main()
