"""Capacity: how many concurrent runs one replica (and three) carry before tokens wait.

At each level (``--levels``: 100, 200, 500, 1,000 concurrent runs) every run is started
with ``POST /v1/agent/runs`` (starts spread over ``--ramp-s``, shorter than a run, so
all of them overlap) and followed with ``GET stream_url`` to its ``message_complete``.
The model is a paced loopback fake in its own process — Ollama (``/api/chat`` NDJSON)
and Gemini (``:streamGenerateContent`` SSE), each answering ``--tokens`` (60) text
tokens ``--pause-ms`` (100) apart, every token stamped with the time it was produced
(see ``bench/_load.py``). Topologies: one replica on its SQLite file (the default),
and three replicas on one PostgreSQL (with pgvector, started from the ``pgserver``
wheel by ``tests/support/postgres.py``), runs spread over them round-robin and each
followed on the replica that executes it.

Reported per topology × provider × level:
- time to first token (POST sent → first ``content_chunk`` at the client), p50/p99; the
  fake's own pause before the first token (100 ms) is part of it;
- extra inter-token gap: the gap between consecutive ``content_chunk`` events at the
  client minus the fake's pause, p50/p99 (0 = tokens arrive at the model's pace);
- token delay (arrival - the stamp the fake wrote into the token), p50/p99;
- runs completed; model streams that waited for an outbound connection (the
  ``agentchat_pool_wait_seconds`` histogram of every replica's ``/metrics``: count, sum);
- server CPU (user + system, the server's whole process tree, over the level's window):
  seconds, milliseconds per run and microseconds per token a client received;
- group commit: the durable writer's transactions over the level
  (``agentchat_storage_write_batches_total``) and tokens per transaction;
- the client and fake processes' event-loop lag (they must not be what holds tokens
  back; the clients are ``--clients`` worker processes with raw asyncio sockets, one
  event loop each; the Ollama fake sends pre-encoded lines, one timer per stream).

Beside the one replica, in the same invocation and alternately level by level: the
**floor** (``bench/floor_proxy.py``: a bare proxy reading the same fake stream with the
same client library, ``httpx``, and re-emitting it as SSE with no durability — what the
stack itself costs) and, with ``--before PATH``, the same service from another checkout
(its own ``.venv``), e.g. a detached worktree of the commit before a change.
"One replica holds" is the largest level whose p99 time to first token stays under
``--ttft-target-s`` (1 s).

First, the **per-run start CPU** (``bench/_burst.py``; ``--burst N``, 300 by default, 0
skips it, ``--only-burst`` does nothing else): bursts of ``N`` runs against a fake that
answers one token, alternated between the variants, server CPU ÷ ``N`` — what a run
costs apart from its tokens (admission, history, tool selection with the default
offline embedder, prompt, checkpoints, first writes, the follower, the ending, the
conversation's title). With ``--py-spy`` one more burst per server is sampled and split
by phase (``bench/_pyspy.py``'s ``phases``).

Run from the repository root:  .venv/bin/python bench/capacity.py [--levels 100,200]
Writes bench/results/capacity.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from bench import _pyspy as pyspy  # noqa: E402
from bench._burst import start_cpu  # noqa: E402
from bench._common import (  # noqa: E402
    RESULTS,
    cpu_s,
    histogram_totals,
    raise_fd_limit,
    summary,
    tree_cpu_s,
    write_results,
)
from bench._fakes import Fakes  # noqa: E402
from bench._load import drive, run_loop, spread  # noqa: E402
from tests.fakes.paced_gemini import stamps  # noqa: E402
from tests.support.procs import PYTHON, AgentServer  # noqa: E402

PROVIDERS = ("ollama", "gemini")


def agent_env(fakes: Fakes, provider: str, **extra: str) -> dict[str, str]:
    """A replica that streams the paced fake's answer and does nothing else: no
    embedder, no sample KB, no mandatory tool flow, limits out of the way."""
    env = {
        "AGENT_EMBEDDER": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_MAX_RUNS_PER_USER": "1000000",
        "AGENT_REQUESTS_PER_MINUTE": "1000000",
        "AGENT_BACKEND_URL": "http://127.0.0.1:9",
        "AGENT_LOG_LEVEL": "WARNING",
    }
    if provider == "ollama":
        env.update(AGENT_LLM_PROVIDER="ollama", OLLAMA_HOST=fakes.ollama, OLLAMA_MODEL="paced-llama:latest")
    else:
        env.update(
            AGENT_LLM_PROVIDER="gemini",
            GEMINI_API_KEY="paced",
            GEMINI_BASE_URL=fakes.gemini,
            GEMINI_MODEL="gemini-2.5-flash",
        )
    env.update(extra)
    return env


def run_body(key: str) -> dict[str, Any]:
    return {"message": f"[run {key}] say sixty words", "context_type": "knowledge", "context": {}}


@contextlib.asynccontextmanager
async def replicas(workdir: Path, name: str, env: dict[str, str], count: int) -> AsyncIterator[list[AgentServer]]:
    """``count`` agent processes with ``env``, healthy; killed at the end."""
    servers = [AgentServer(workdir, env, name=f"{name}-{i}") for i in range(count)]
    try:
        for server in servers:
            server.start()
        await asyncio.gather(*(s.wait_healthy(180) for s in servers))
        yield servers
    finally:
        for server in servers:
            server.close()


@contextlib.asynccontextmanager
async def postgres() -> AsyncIterator[Callable[[], contextlib.AbstractContextManager[str]]]:
    """One PostgreSQL with pgvector for the run; yields ``database()`` (a fresh,
    migrated database per use)."""
    from tests.support.postgres import TestPostgres

    server = await asyncio.to_thread(TestPostgres().start)
    try:
        await asyncio.to_thread(server.prepare_template)
        yield server.database
    finally:
        await asyncio.to_thread(server.stop)


async def pool_waits(servers: list[AgentServer]) -> dict[str, dict[str, float]]:
    """``agentchat_pool_wait_seconds`` count and sum per pool, summed over ``servers``."""
    total: dict[str, dict[str, float]] = {}
    async with httpx.AsyncClient(timeout=10) as http:
        for server in servers:
            text = (await http.get(f"{server.base}/metrics")).text
            for pool, values in histogram_totals(text, "agentchat_pool_wait_seconds").items():
                slot = total.setdefault(pool, {"count": 0.0, "sum": 0.0})
                slot["count"] += values["count"]
                slot["sum"] += values["sum"]
    return total


async def write_batches(servers: list[AgentServer]) -> float:
    """``agentchat_storage_write_batches_total`` summed over ``servers`` (0 for a server
    without it: the floor, or a checkout from before the counter)."""
    total = 0.0
    async with httpx.AsyncClient(timeout=10) as http:
        for server in servers:
            with contextlib.suppress(httpx.HTTPError):
                for line in (await http.get(f"{server.base}/metrics")).text.splitlines():
                    if line.startswith("agentchat_storage_write_batches_total "):
                        total += float(line.rpartition(" ")[2])
    return total


def _minus(after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]) -> dict[str, Any]:
    out = {}
    for pool, v in after.items():
        b = before.get(pool, {"count": 0.0, "sum": 0.0})
        out[pool] = {"waits": int(v["count"] - b["count"]), "wait_s_total": round(v["sum"] - b["sum"], 2)}
    return out


def ending(run: dict[str, Any]) -> str:
    """How a run ended, as its client saw it: the final status and the last error code."""
    if run["outcome"] != "complete":
        return run["outcome"].split(":")[0]
    final = orjson.loads(run["frames"][-1][2])
    errors = [orjson.loads(f[2]).get("code") for f in run["frames"] if f[1] == "error"]
    return f"{final.get('status')}" + (f" ({errors[-1]})" if errors else "")


def judge(runs: list[dict[str, Any]], pause_s: float, tokens: int) -> dict[str, Any]:
    """Time to first token, extra inter-token gaps and token delays of one level."""
    ttft: list[float] = []
    gaps: list[float] = []
    delays: list[float] = []
    completed = 0
    received = 0
    for run in runs:
        chunks = [f for f in run["frames"] if f[1] == "content_chunk"]
        found = [(s, f[3]) for f in chunks for s in stamps(f[2])]
        received += len(found)
        completed += run["outcome"] == "complete" and len({i for (i, _), _ in found}) == tokens
        if chunks:
            ttft.append((chunks[0][3] - run["post_ns"]) / 1e9)
        for prev, cur in itertools.pairwise(chunks):
            if prev[4] == cur[4]:  # same connection
                gaps.append(max(0.0, (cur[3] - prev[3]) / 1e9 - pause_s))
        delays.extend((at - stamp) / 1e9 for (_, stamp), at in found)
    problems = [f"{r['key']}: {r['outcome']}" for r in runs if r["outcome"] != "complete"]
    return {
        "runs": len(runs),
        "completed": completed,
        "tokens_received": received,
        "not_completed_sample": problems[:10],
        "ended": dict(Counter(ending(r) for r in runs)),
        "error_samples": sorted({f[2][:300] for r in runs for f in r["frames"] if f[1] == "error"})[:5],
        "ttft_s": summary(ttft),
        "extra_gap_ms": summary([g * 1000 for g in gaps]),
        "token_delay_ms": summary([d * 1000 for d in delays]),
    }


async def one_level(
    args: argparse.Namespace, workdir: Path, servers: list[AgentServer], fakes: Fakes, level: int, label: str
) -> dict[str, Any]:
    before = await pool_waits(servers)
    batches0 = await write_batches(servers)
    await fakes.stats()  # resets the fake's loop-lag window
    pids = [s.pid for s in servers if s.pid is not None]
    cpu0 = sum(tree_cpu_s(p) for p in pids)
    loop0 = sum(cpu_s(p, p) for p in pids)  # the main thread: the event loop
    keys = [f"{label}-{level}-{i}" for i in range(level)]
    specs = [
        {
            "key": key,
            "at_s": at,
            "protocol": "agent",
            "post": servers[i % len(servers)].base,
            "follow": [servers[i % len(servers)].base],
            "body": run_body(key),
            "drop_after": None,
        }
        for i, (key, at) in enumerate(zip(keys, spread(level, args.ramp_s), strict=True))
    ]
    spy = None
    if args.py_spy and label.endswith("-ours"):
        # From the first start (drive's t0 is 2 s ahead) through the last run's last token.
        seconds = 2 + args.ramp_s + args.tokens * args.pause_ms / 1000 + 1
        spy = await pyspy.record(pids[0], seconds, RESULTS / f"{args.name}_pyspy_{level}.txt")
    result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
    if spy is not None:
        await spy.wait()
    elapsed = (time.monotonic_ns() - result["t0_ns"]) / 1e9
    server_cpu = sum(tree_cpu_s(p) for p in pids) - cpu0
    loop_cpu = sum(cpu_s(p, p) for p in pids) - loop0
    figures = judge(result["runs"], args.pause_ms / 1000, args.tokens)
    fake_stats = await fakes.stats()
    batches = await write_batches(servers) - batches0
    figures.update(
        level=level,
        elapsed_s=round(elapsed, 1),
        pool_waits=_minus(await pool_waits(servers), before),
        # Group commit at work: the writer's transactions over the level, and tokens per
        # transaction (None where the server has no such counter).
        write_batches=int(batches) if batches else None,
        tokens_per_write_batch=round(figures["tokens_received"] / batches, 1) if batches else None,
        server_cpu_s=round(server_cpu, 2),
        # Over the level's whole window (idle ticks included), per run started and per
        # token received by a client.
        server_cpu_ms_per_run=round(server_cpu * 1000 / max(1, level), 2),
        server_cpu_us_per_token=round(server_cpu * 1e6 / max(1, figures["tokens_received"]), 1),
        # Of which the main thread (the event loop); the rest is worker threads (SQLite's).
        server_loop_cpu_s=round(loop_cpu, 2),
        client_loop_lag_ms=[c["loop_lag_ms"] for c in result["clients"]],
        client_cpu_s=[c["cpu_s"] for c in result["clients"]],
        fake_loop_lag_ms=fake_stats["loop_lag_ms"],
        load_avg_1m=round(os.getloadavg()[0], 2),
    )
    return figures


def variant_server(
    kind: str, workdir: Path, env: dict[str, str], fakes: Fakes, label: str, before: Path | None
) -> AgentServer:
    """One server under test: ``ours`` (this checkout), ``before`` (the checkout at
    ``--before``, with its own virtualenv, on its own SQLite file) or ``floor``
    (``bench/floor_proxy.py`` in front of the Ollama fake)."""
    server = AgentServer(workdir, env, name=f"{label}-{kind}")
    if kind == "before":
        assert before is not None
        server.argv = [str(before / ".venv" / "bin" / "agentchat"), *server.argv[3:]]
    elif kind == "floor":
        server.argv = [
            PYTHON,
            str(ROOT / "bench" / "floor_proxy.py"),
            "--port",
            str(server.port),
            "--upstream",
            fakes.ollama,
        ]
    return server


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes:
        if args.replicas_one:
            for provider in args.providers:
                out.setdefault("1 replica, SQLite", {})[provider] = await one_replica(args, workdir, fakes, provider)
        if args.replicas > 1:
            async with postgres() as database:
                for provider in args.providers:
                    topology = f"{args.replicas} replicas, PostgreSQL"
                    with database() as url:
                        extra = {
                            "AGENT_DATABASE_URL": url,
                            "AGENT_SECRET_KEY": "bench-replicas-share-this-key-01",
                        }  # app/keyring.py
                        if args.llm_max_connections:
                            extra["AGENT_LLM_MAX_CONNECTIONS"] = str(args.llm_max_connections)
                        label = f"{args.replicas}x-{provider}"
                        env = agent_env(fakes, provider, **extra)
                        async with replicas(workdir, label, env, args.replicas) as servers:
                            await warm_up(workdir, servers, label)
                            rows = []
                            for level in args.levels:
                                row = await one_level(args, workdir, servers, fakes, level, label)
                                row["variant"] = "ours"
                                rows.append(row)
                                print_row(topology, provider, row)
                        out.setdefault(topology, {})[provider] = rows
    return out


async def one_replica(args: argparse.Namespace, workdir: Path, fakes: Fakes, provider: str) -> list[dict[str, Any]]:
    """Every level against each variant (``ours``, ``before`` with ``--before``, and the
    ``floor`` with Ollama), all started up front and run alternately, level by level (the
    order reversed every other level), so a busy moment of the machine does not fall
    on one side only."""
    kinds = ["ours"] + (["before"] if args.before else []) + (["floor"] if args.floor and provider == "ollama" else [])
    servers: dict[str, AgentServer] = {}
    try:
        for kind in kinds:
            extra = {"AGENT_DB_PATH": str(workdir / f"{provider}-{kind}.sqlite3")}
            if args.llm_max_connections:
                extra["AGENT_LLM_MAX_CONNECTIONS"] = str(args.llm_max_connections)
            servers[kind] = variant_server(
                kind, workdir, agent_env(fakes, provider, **extra), fakes, f"1x-{provider}", args.before
            )
            servers[kind].start()
        await asyncio.gather(*(s.wait_healthy(180) for s in servers.values()))
        for kind, server in servers.items():
            await warm_up(workdir, [server], f"1x-{provider}-{kind}")
        rows = []
        for n, level in enumerate(args.levels):
            for kind in kinds if n % 2 == 0 else kinds[::-1]:
                row = await one_level(args, workdir, [servers[kind]], fakes, level, f"1x-{provider}-{kind}")
                row["variant"] = kind
                rows.append(row)
                print_row("1 replica, SQLite", provider, row)
        return rows
    finally:
        for server in servers.values():
            server.close()


async def warm_up(workdir: Path, servers: list[AgentServer], label: str) -> None:
    """A few runs on every replica first: the first ones pay for imports, prepared
    statements and the model client's first connections."""
    specs = [
        {
            "key": f"{label}-warm-{i}",
            "at_s": i * 0.1,
            "protocol": "agent",
            "post": server.base,
            "follow": [server.base],
            "body": run_body(f"{label}-warm-{i}"),
            "drop_after": None,
        }
        for i, server in enumerate(servers * 3)
    ]
    await drive(specs, workdir, workers=1, timeout_s=120, name=f"{label}-warm")


def holds(rows: list[dict[str, Any]], target_s: float) -> int | None:
    """The largest level whose p99 time to first token stayed under ``target_s``
    (and every run completed), counting up from the smallest level."""
    held = None
    for row in sorted((r for r in rows if r.get("variant", "ours") == "ours"), key=lambda r: r["level"]):
        if row["ttft_s"]["p99"] < target_s and row["completed"] == row["runs"]:
            held = row["level"]
        else:
            break
    return held


def print_row(topology: str, provider: str, row: dict[str, Any]) -> None:
    waits = row["pool_waits"].get('pool="llm"', {}).get("waits", 0)
    lag = max(c["p99"] for c in row["client_loop_lag_ms"])
    print(
        f"{topology:<24} {provider:<7} {row['variant']:<7} {row['level']:>6} {row['completed']:>6}/{row['runs']:<6} "
        f"{row['ttft_s']['p50']:>8.2f} {row['ttft_s']['p99']:>8.2f} {row['extra_gap_ms']['p50']:>8.1f} "
        f"{row['extra_gap_ms']['p99']:>9.1f} {row['token_delay_ms']['p99']:>10.1f} {waits:>6} "
        f"{row['server_cpu_s']:>7.1f} {row['server_cpu_ms_per_run']:>7.1f} {row['server_cpu_us_per_token']:>7.0f} "
        f"{lag:>8.1f} {row['fake_loop_lag_ms']['p99']:>8.1f} "
        f"{row['load_avg_1m']:>5.1f} {row.get('tokens_per_write_batch') or '-':>7}",
        flush=True,
    )


HEADER = (
    f"{'topology':<24} {'model':<7} {'server':<7} {'runs':>6} {'completed':>13} {'ttft p50':>8} {'ttft p99':>8} "
    f"{'gap p50':>8} {'gap p99':>9} {'delay p99':>10} {'waits':>6} {'cpu s':>7} {'cpu/run':>7} {'cpu/tok':>7} "
    f"{'cli lag':>8} {'fake lag':>8} {'load':>5} {'tok/txn':>7}\n"
    f"{'':<24} {'':<7} {'':<7} {'':>6} {'':>13} {'s':>8} {'s':>8} {'ms':>8} {'ms':>9} {'ms':>10} {'':>6} {'':>7} "
    f"{'ms':>7} {'us':>7} {'p99 ms':>8} {'p99 ms':>8}"
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--levels",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[100, 200, 500, 1000],
        help="concurrent runs per level, comma-separated",
    )
    p.add_argument("--providers", type=lambda s: s.split(","), default=list(PROVIDERS), help="ollama,gemini")
    p.add_argument("--replicas", type=int, default=3, help="replicas of the PostgreSQL topology (1: skip it)")
    p.add_argument("--no-single", dest="replicas_one", action="store_false", help="skip the one-replica topology")
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    p.add_argument("--ramp-s", type=float, default=1.0, help="spread each level's starts over this many seconds")
    p.add_argument("--clients", type=int, default=2, help="client worker processes")
    p.add_argument(
        "--llm-max-connections",
        type=int,
        default=0,
        help="AGENT_LLM_MAX_CONNECTIONS of the replicas (0: the service's default)",
    )
    p.add_argument("--ttft-target-s", type=float, default=1.0)
    p.add_argument("--run-timeout-s", type=float, default=180.0, help="a run not ended by then counts as not completed")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        help="another checkout (with its own .venv) run alternately beside this one, e.g. a "
        "detached worktree of the commit before a change",
    )
    p.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the bare-proxy floor (bench/floor_proxy.py; Ollama only)",
    )
    p.add_argument(
        "--py-spy",
        action="store_true",
        help="sample our server with py-spy during each level (bench/results/<name>_pyspy_<level>.txt; "
        "summary: python bench/_pyspy.py FILE)",
    )
    p.add_argument(
        "--burst",
        type=int,
        default=300,
        help="runs per burst of the per-run start CPU figure (a one-token model; 0: skip it)",
    )
    p.add_argument("--burst-rounds", type=int, default=2, help="bursts per variant, alternated")
    p.add_argument("--only-burst", action="store_true", help="the per-run start CPU only, no levels")
    p.add_argument(
        "--burst-title",
        action="store_true",
        help="one more per-run start CPU variant, ours+title: the same server, each run's body "
        "naming its conversation (no title model call, issue 23)",
    )
    p.add_argument("--name", default="capacity", help="results file name (bench/results/<name>.json)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, databases)")
    return p.parse_args()


async def main(args: argparse.Namespace) -> None:
    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="bench-capacity-"))
    load_before = os.getloadavg()  # the machine is shared: say how busy it was around the run
    try:
        start = await start_cpu(args, workdir, variant_server, agent_env) if args.burst else None
        print(HEADER, flush=True)
        results = {} if args.only_burst else await bench(args, workdir)
    except BaseException:
        print(f"capacity: failed; logs kept in {workdir}", file=sys.stderr)
        raise
    one = results.get("1 replica, SQLite", {})
    held = {provider: holds(rows, args.ttft_target_s) for provider, rows in one.items()}
    many = {
        topology: {p: holds(rows, args.ttft_target_s) for p, rows in by.items()} for topology, by in results.items()
    }
    payload = {
        "model": {"tokens": args.tokens, "pause_ms": args.pause_ms},
        "ramp_s": args.ramp_s,
        "clients": f"{args.clients} worker processes, raw asyncio sockets (bench/_load.py)",
        "llm_max_connections": args.llm_max_connections or "service default",
        "ttft_target_s": args.ttft_target_s,
        "servers": {
            "ours": str(ROOT),
            "before": str(args.before) if args.before else None,
            "floor": "bench/floor_proxy.py" if args.floor else None,
        },
        "load_avg_1_5_15": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in os.getloadavg()],
        },
        "per_run_start_cpu": start,
        "one_replica_holds": held,
        "holds_by_topology": many,
        "levels": results,
    }
    path = write_results(args.name, payload)
    print(f"one replica holds (p99 first token < {args.ttft_target_s} s, all completed): {held}")
    print(f"by topology: {many}")
    print(f"results: {path}")
    if args.keep:
        print(f"logs and databases: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_loop(main(parse_args()))
