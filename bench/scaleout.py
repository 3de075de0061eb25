"""Scale-out: 1,000 resumable runs over 1, 2 and 3 replicas on one PostgreSQL, followed
from a replica other than the one executing them; then hand-over after SIGKILL.

**Spread.** Each configuration gets ``--runs`` (1,000) runs, started at an even pace
over ``--ramp-s`` seconds: run *i* is created (``POST /v1/agent/runs``) on replica
``i mod n`` and followed (``GET stream_url``) on replica ``i+1 mod n`` — with one
replica, the same one. Every follower drops its connection after 3–9 events, stays
away up to 0.3 s and resumes with ``Last-Event-ID`` (on the same follower replica).
The model is the paced Ollama fake in its own process (``--tokens`` 60, ``--pause-ms``
100 apart), each token stamped with the time the fake produced it, so
*added delay* = arrival at the follower - stamp (tokens received live only: not the
ones replayed after the resume). The single-process SQLite configuration (the
default deployment) runs first, in the same invocation, as the baseline.
After the runs, each run's stored log is replayed from 0 on its follower replica and
compared with what the client saw: events lost (in the log, never received),
duplicated (received twice), mismatched (same id, other content), and whether every
log holds ids 1..N, the 60 tokens once each and exactly one ``message_complete``, last.

**Hand-over.** Three replicas with ``AGENT_RUN_LEASE_S`` = ``--lease-s`` (10, the
default; ``--short-lease-s`` adds a second series). ``--kills`` rounds: ``--handover-runs``
runs spread round-robin (followers on the next replica, failing over to the third
when theirs dies), then SIGKILL of one replica (a different one each round)
``--kill-after-s`` after the last start, mid-run. Reported: from the kill to the first
``run_resumed`` a follower received, per kill and per interrupted run (p50/p99; the
target is ≤ the lease), and the same loss/duplicate checks. The killed replica is
started again before the next round. A run the killed replica had admitted but not
started yet moves without a ``run_resumed`` event, so the time from the kill to the first
token the new owner streamed (the fake's stamp is after the kill) is reported beside it,
and so are the runs that ended ``run_interrupted`` instead of being carried on.

Run from the repository root:  .venv/bin/python bench/scaleout.py [--runs 1000]
Writes bench/results/scaleout.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import cpu_s, raise_fd_limit, summary, write_results  # noqa: E402
from bench._fakes import Fakes  # noqa: E402
from bench._load import drive, run_loop, spread, sse  # noqa: E402
from bench.capacity import _minus, agent_env, pool_waits, postgres, replicas, run_body, warm_up  # noqa: E402
from tests.fakes.paced_gemini import stamps  # noqa: E402
from tests.support.procs import AgentServer  # noqa: E402

TARGETS = {"events_lost": 0, "events_duplicated": 0, "runs_not_completed": 0}
#: PostgreSQL replicas need a key the database does not hold (app/keyring.py).
BENCH_SECRET_KEY = "bench-replicas-share-this-key-01"


def specs_for(servers: list[AgentServer], runs: int, ramp_s: float, label: str, seed: int) -> list[dict[str, Any]]:
    """Run ``i`` created on replica ``i mod n``, followed on the next one (then the rest)."""
    n, rng = len(servers), random.Random(seed)
    out = []
    for i, at in enumerate(spread(runs, ramp_s, seed)):
        key = f"{label}-{i}"
        follow = [servers[(i + k) % n].base for k in range(1, n + 1)]
        out.append({"key": key, "at_s": at, "protocol": "agent", "post": servers[i % n].base, "follow": follow,
                    "body": run_body(key), "drop_after": rng.randint(3, 9), "away_s": rng.random() * 0.3})
    return out


async def replay_all(runs: list[dict[str, Any]], bases: Callable[[dict[str, Any]], list[str]]) -> None:
    """Each run's stored log, read from 0 (``run['stored']``; ``None`` if no replica answered)."""
    gate = asyncio.Semaphore(64)

    async def one(run: dict[str, Any]) -> None:
        run["stored"] = None
        if "stream_path" not in run:
            return
        async with gate:
            for base in bases(run):
                frames: list[list[Any]] = []
                try:
                    async with contextlib.aclosing(sse(base + run["stream_path"], {"Last-Event-ID": "0"})) as s:
                        async for status, frame in s:
                            if frame is None and status != 200:
                                break
                            if frame is not None and frame[1] != "heartbeat":
                                frames.append(list(frame))
                                if frame[1] == "message_complete":
                                    run["stored"] = frames
                                    return
                except OSError:
                    continue

    await asyncio.gather(*(one(r) for r in runs))


def _constant(value: list[str], _run: dict[str, Any]) -> list[str]:
    return value


def check(run: dict[str, Any], tokens: int) -> dict[str, int]:
    """Lost / duplicated / mismatched events of one client against the stored log, and
    whether the log itself is whole (ids 1..N, each token once, one terminal event, last)."""
    got = [(f[0], f[1], f[2]) for f in run["frames"]]
    ids = [g[0] for g in got]
    stored = run.get("stored") or []
    by_id = {s[0]: (s[1], s[2]) for s in stored}
    seen = set(ids)
    # A run resumed after a crash streams its interrupted model turn again: the tokens of
    # the last turn (after the last ``message_start``) must be the whole script, once.
    last_turn = max((k for k, s in enumerate(stored) if s[1] == "message_start"), default=-1)
    indices = [i for s in stored[last_turn + 1 :] if s[1] == "content_chunk" for i, _ in stamps(s[2])]
    whole = (
        [s[0] for s in stored] == [str(i) for i in range(1, len(stored) + 1)]
        and sorted(indices) == list(range(tokens))
        and [s[1] for s in stored].count("message_complete") == 1
        and bool(stored) and stored[-1][1] == "message_complete"
    )
    return {
        "lost": sum(1 for s in stored if s[0] not in seen) if stored else 0,
        "duplicated": len(ids) - len(seen),
        "mismatched": sum(1 for g in got if g[0] in by_id and by_id[g[0]] != (g[1], g[2])),
        "log_broken": int(not whole),
        "completed": int(run["outcome"] == "complete" and whole),
    }


def live_delays_ms(run: dict[str, Any]) -> list[float]:
    """Arrival - stamp of the tokens a connection received live (produced after it connected)."""
    out: list[float] = []
    for f in run["frames"]:
        if f[1] != "content_chunk":
            continue
        connected = run["connects"][f[4]][1]
        out.extend((f[3] - stamp) / 1e6 for _, stamp in stamps(f[2]) if stamp >= connected)
    return out


def interrupted(run: dict[str, Any]) -> bool:
    """The run ended ``failed`` with ``run_interrupted``: given up on, not resumed."""
    errors = [f[2] for f in run["frames"] if f[1] == "error"]
    return bool(errors) and "run_interrupted" in errors[-1]


def totals(runs: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    checks = [check(r, tokens) for r in runs]
    out = {k: sum(c[k] for c in checks) for k in ("lost", "duplicated", "mismatched", "log_broken", "completed")}
    return {
        "runs": len(runs),
        "runs_completed": out["completed"],
        "runs_not_completed": len(runs) - out["completed"],
        "runs_ended_run_interrupted": sum(1 for r in runs if interrupted(r)),
        "not_completed_sample": [f"{r['key']}: {r['outcome']}" for r, c in zip(runs, checks, strict=True)
                                 if not c["completed"]][:10],
        "events_received": sum(len(r["frames"]) for r in runs),
        "events_lost": out["lost"],
        "events_duplicated": out["duplicated"],
        "events_mismatched": out["mismatched"],
        "stored_logs_not_whole": out["log_broken"],
        "runs_not_replayed": sum(1 for r in runs if not r.get("stored")),
    }


async def spread_config(
    args: argparse.Namespace, workdir: Path, fakes: Fakes, label: str, count: int, extra: dict[str, str]
) -> dict[str, Any]:
    env = agent_env(fakes, "ollama", AGENT_HEARTBEAT_S="5", **extra)
    async with replicas(workdir, label, env, count) as servers:
        await warm_up(workdir, servers, label)
        pids = [s.pid for s in servers if s.pid is not None]
        cpu0, before = sum(cpu_s(p) for p in pids), await pool_waits(servers)
        specs = specs_for(servers, args.runs, args.ramp_s, label, seed=11)
        result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
        elapsed = (time.monotonic_ns() - result["t0_ns"]) / 1e9
        cpu = sum(cpu_s(p) for p in pids) - cpu0
        waits = _minus(await pool_waits(servers), before)
        runs = result["runs"]
        follow = {s["key"]: s["follow"] for s in specs}
        await replay_all(runs, lambda r: follow[r["key"]])
    delays = [d for r in runs for d in live_delays_ms(r)]
    return {
        "replicas": count,
        **totals(runs, args.tokens),
        "added_delay_ms": summary(delays),
        "elapsed_s": round(elapsed, 1),
        "runs_per_s": round(len(runs) / elapsed, 1),
        "server_cpu_s": round(cpu, 1),
        "pool_waits": waits,
        "client_loop_lag_ms": [c["loop_lag_ms"] for c in result["clients"]],
        "client_cpu_s": [c["cpu_s"] for c in result["clients"]],
        "fake_loop_lag_ms": (await fakes.stats())["loop_lag_ms"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


async def handover_series(
    args: argparse.Namespace, workdir: Path, fakes: Fakes, database: str, lease_s: float
) -> dict[str, Any]:
    label = f"lease{lease_s:g}"
    env = agent_env(fakes, "ollama", AGENT_DATABASE_URL=database, AGENT_SECRET_KEY=BENCH_SECRET_KEY,
                    AGENT_RUN_LEASE_S=str(lease_s),
                    AGENT_HEARTBEAT_S="1", AGENT_LOG_LEVEL="INFO")  # INFO: the "took over runs" lines
    rounds: list[dict[str, Any]] = []
    all_runs: list[dict[str, Any]] = []
    per_run: list[float] = []
    per_run_token: list[float] = []
    async with replicas(workdir, label, env, 3) as servers:
        await warm_up(workdir, servers, label)
        for k in range(args.kills):
            victim = servers[k % 3]
            specs = specs_for(servers, args.handover_runs, 1.0, f"{label}-k{k}", seed=100 + k)
            for spec in specs:
                spec["drop_after"] = None  # the kill is the interruption here
            t0_ns = time.monotonic_ns() + 2_000_000_000
            killed: list[int] = []

            async def kill(victim: AgentServer = victim, t0_ns: int = t0_ns, out: list[int] = killed) -> None:
                await asyncio.sleep((t0_ns - time.monotonic_ns()) / 1e9 + 1.0 + args.kill_after_s)
                victim.send(signal.SIGKILL)
                out.append(time.monotonic_ns())
                await victim.wait_exit(30)

            killer = asyncio.create_task(kill())
            result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s + 3 * lease_s,
                                 name=f"{label}-k{k}", t0_ns=t0_ns)
            await killer
            runs = result["runs"]
            live = [s for s in servers if s is not victim]
            await replay_all(runs, functools.partial(_constant, [s.base for s in live]))
            kill_ns = killed[0]
            posted = {s["key"]: s["post"] for s in specs}
            on_victim = [r for r in runs if posted[r["key"]] == victim.base]
            unfinished = [
                r for r in on_victim if not any(f[1] == "message_complete" and f[3] < kill_ns for f in r["frames"])
            ]
            resumed, moved = [], []
            for run in unfinished:
                first = next((f[3] for f in run["frames"] if f[1] == "run_resumed" and f[3] >= kill_ns), None)
                if first is not None:
                    resumed.append((first - kill_ns) / 1e9)
                # A token the fake produced after the kill came from the replica that took the
                # run over (a run not started yet at the kill moves without a run_resumed).
                token = next((f[3] for f in run["frames"] if f[1] == "content_chunk"
                              and any(stamp > kill_ns for _, stamp in stamps(f[2]))), None)
                if token is not None:
                    moved.append((token - kill_ns) / 1e9)
            per_run.extend(resumed)
            per_run_token.extend(moved)
            all_runs.extend(runs)
            rounds.append({
                "killed": victim.name,
                "runs_on_killed_replica": len(on_victim),
                "unfinished_at_kill": len(unfinished),
                "run_resumed_seen": len(resumed),
                "kill_to_first_run_resumed_s": round(min(resumed), 2) if resumed else None,
                "runs_streaming_again": len(moved),
                "kill_to_first_token_after_takeover_s": round(min(moved), 2) if moved else None,
                "ended_run_interrupted": sum(1 for r in unfinished if interrupted(r)),
                "took_over": [line[-200:] for s in live for line in s.grep("took over runs")][-4:],
            })
            print(f"  lease {lease_s:g} s, kill {k + 1}/{args.kills} ({victim.name}): of {len(unfinished)} unfinished "
                  f"runs {len(resumed)} announced run_resumed (first after {rounds[-1]['kill_to_first_run_resumed_s']}"
                  f" s), {len(moved)} streamed again (first token after "
                  f"{rounds[-1]['kill_to_first_token_after_takeover_s']} s), "
                  f"{rounds[-1]['ended_run_interrupted']} ended run_interrupted", flush=True)
            await victim.restart(180)
    firsts = [r["kill_to_first_run_resumed_s"] for r in rounds if r["kill_to_first_run_resumed_s"] is not None]
    tokens = [r["kill_to_first_token_after_takeover_s"] for r in rounds
              if r["kill_to_first_token_after_takeover_s"] is not None]
    return {
        "lease_s": lease_s,
        "kills": args.kills,
        "runs_per_round": args.handover_runs,
        "kill_to_first_run_resumed_s": summary(firsts),
        "kill_to_run_resumed_per_run_s": summary(per_run),
        "kill_to_first_token_after_takeover_s": summary(tokens),
        "kill_to_first_token_after_takeover_per_run_s": summary(per_run_token),
        "within_lease": bool(firsts) and max(firsts) <= lease_s,
        "rounds": rounds,
        **totals(all_runs, args.tokens),
    }


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    spread_rows: dict[str, Any] = {}
    handover: list[dict[str, Any]] = []
    async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes, postgres() as database:
        configs = [("1 process, SQLite", 1, None)] + [(f"{n} replica(s), PostgreSQL", n, n) for n in args.replicas]
        for name, count, pg in configs:
            with contextlib.ExitStack() as db:
                extra = {"AGENT_DATABASE_URL": db.enter_context(database()),
                         "AGENT_SECRET_KEY": BENCH_SECRET_KEY} if pg else {
                    "AGENT_DB_PATH": str(workdir / "single.sqlite3")}
                row = await spread_config(args, workdir, fakes, f"{'pg' if pg else 'sqlite'}{count}", count, extra)
            spread_rows[name] = row
            print_spread(name, row, spread_rows)
        for lease in [args.lease_s] + ([args.short_lease_s] if args.short_lease_s else []):
            if args.kills:
                with database() as url:
                    handover.append(await handover_series(args, workdir, fakes, url, lease))
                print_handover(handover[-1])
    return {"spread": spread_rows, "handover": handover}


def print_spread(name: str, row: dict[str, Any], rows: dict[str, Any]) -> None:
    base = rows.get("1 process, SQLite", row)["added_delay_ms"]
    d = row["added_delay_ms"]
    ratio = d["p99"] / base["p99"] if base["p99"] else float("nan")
    print(
        f"{name:<26} {row['runs']:>5} {row['runs_completed']:>9} {row['events_lost']:>5} "
        f"{row['events_duplicated']:>5} {row['events_mismatched']:>5} {d['p50']:>9.1f} {d['p99']:>9.1f} "
        f"{ratio:>9.2f}x {row['runs_per_s']:>7.1f} {row['server_cpu_s']:>7.1f} {row['load_avg_1m']:>5.1f}",
        flush=True,
    )


def print_handover(h: dict[str, Any]) -> None:
    first, per = h["kill_to_first_run_resumed_s"], h["kill_to_run_resumed_per_run_s"]
    token, token_per = h["kill_to_first_token_after_takeover_s"], h["kill_to_first_token_after_takeover_per_run_s"]
    print(
        f"hand-over, lease {h['lease_s']:g} s: {h['kills']} SIGKILLs; kill → first run_resumed p50 {first['p50']} s, "
        f"p99 {first['p99']} s (per run p50 {per['p50']} s, p99 {per['p99']} s; within the lease: "
        f"{h['within_lease']}); kill → first token from the new owner p50 "
        f"{token['p50']} s, p99 {token['p99']} s (per run p99 {token_per['p99']} s); "
        f"runs completed {h['runs_completed']}/{h['runs']} "
        f"(ended run_interrupted: {h['runs_ended_run_interrupted']}), lost {h['events_lost']}, "
        f"duplicated {h['events_duplicated']}, mismatched {h['events_mismatched']}",
        flush=True,
    )


HEADER = (
    f"{'configuration':<26} {'runs':>5} {'completed':>9} {'lost':>5} {'dup':>5} {'diff':>5} "
    f"{'delay p50':>9} {'delay p99':>9} {'p99 vs SQLite':>10} {'runs/s':>7} {'cpu s':>7} {'load':>5}\n"
    f"{'':<26} {'':>5} {'':>9} {'':>5} {'':>5} {'':>5} {'ms':>9} {'ms':>9}"
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--replicas", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3],
                   help="replica counts on PostgreSQL, comma-separated")
    p.add_argument("--ramp-s", type=float, default=100.0,
                   help="spread the starts over this many seconds (100 s: about 60 runs in flight)")
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    p.add_argument("--clients", type=int, default=2, help="client worker processes")
    p.add_argument("--kills", type=int, default=3, help="hand-over rounds (one SIGKILL each; 0: skip)")
    p.add_argument("--handover-runs", type=int, default=150, help="runs per hand-over round")
    p.add_argument("--kill-after-s", type=float, default=1.5, help="SIGKILL this long after a round's last start")
    p.add_argument("--lease-s", type=float, default=10.0, help="AGENT_RUN_LEASE_S of the hand-over series")
    p.add_argument("--short-lease-s", type=float, default=0.0, help="a second hand-over series with this lease")
    p.add_argument("--run-timeout-s", type=float, default=300.0)
    p.add_argument("--name", default="scaleout", help="results file name (bench/results/<name>.json)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, databases)")
    return p.parse_args()


async def main(args: argparse.Namespace) -> None:
    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="bench-scaleout-"))
    print(HEADER, flush=True)
    try:
        result = await bench(args, workdir)
    except BaseException:
        print(f"scaleout: failed; logs kept in {workdir}", file=sys.stderr)
        raise
    rows = list(result["spread"].values()) + result["handover"]
    met: dict[str, bool | None] = {k: all(r[k] == v for r in rows) for k, v in TARGETS.items()}
    met["handover_within_lease"] = all(h["within_lease"] for h in result["handover"]) if result["handover"] else None
    payload = {
        "model": {"tokens": args.tokens, "pause_ms": args.pause_ms, "provider": "ollama (paced fake)"},
        "runs": args.runs,
        "ramp_s": args.ramp_s,
        "clients": f"{args.clients} worker processes, raw asyncio sockets (bench/_load.py)",
        "postgres": "tests/support/postgres.py: pgserver wheel, PostgreSQL 16 + pgvector, fsync off",
        "targets": {**TARGETS, "handover_s": "<= AGENT_RUN_LEASE_S"},
        "meets_targets": met,
        **result,
    }
    path = write_results(args.name, payload)
    print(f"targets: {met}\nresults: {path}")
    if args.keep or not all(v is not False for v in met.values()):
        print(f"logs and databases: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    run_loop(main(parse_args()))
