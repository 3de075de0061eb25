"""Where did a token go? ``agentchat serve --workers 2`` under bench/workers_load.py's load,
with every run's stored log kept and set beside what its client received (issue 23
item 3).

bench/workers_load.py counts the stamped tokens a client received; a run that ended
``complete`` with fewer than ``--tokens`` distinct tokens says only that something is
missing. This runs the same load (the paced Ollama fake, raw-socket clients, one port
for the workers), keeps the SQLite file, and for every run compares three things:

- the ids and data the client received against the stored log (a follower that skipped
  or duplicated an event, or a client that miscounted, shows here);
- the tokens in the stored log (a log that lacks them was written that way: the
  followers only deliver it);
- the log's shape: ``run_resumed`` (a worker took the run over after its lease lapsed),
  of those the runs started again from their request (``checkpoint_seq`` 0: taken over
  before their first checkpoint), runs that ended ``run_interrupted``, and more than one
  ``message_complete`` (two workers executed the run at once).

``--root`` runs another checkout's server (e.g. a detached worktree of main) with this
interpreter, for a side-by-side pass.

Run from the repository root:
    .venv/bin/python bench/workers_log_audit.py --levels 300 --passes 3 [--root DIR]
Writes bench/results/workers_log_audit.json (``--name`` to change).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

STAMP = re.compile(r"(\d+)@(\d+);")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=[300])
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    p.add_argument("--ramp-s", type=float, default=1.0)
    p.add_argument("--clients", type=int, default=2)
    p.add_argument("--run-timeout-s", type=float, default=180.0)
    p.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose server runs (default: this one)",
    )
    p.add_argument(
        "--lease-s",
        type=float,
        default=None,
        help="AGENT_RUN_LEASE_S for the server (default: its own); a short lease makes lapses, and so "
        "take-overs between the workers, happen at a load this machine can make (issue 23's fencing)",
    )
    p.add_argument("--name", default="workers_log_audit")
    return p.parse_args()


async def drive_level(args: argparse.Namespace, workdir: Path, label: str, level: int) -> list[dict[str, Any]]:
    """One server (``--workers``) on its own file, ``level`` paced runs; the clients' runs."""
    from bench._fakes import Fakes
    from bench._load import drive, spread
    from bench.capacity import agent_env, replicas, run_body, warm_up

    async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes:
        env = agent_env(
            fakes,
            "ollama",
            AGENT_DB_PATH=str(workdir / f"{label}.sqlite3"),
            AGENT_WORKERS=str(args.workers),
            AGENT_MAX_LOOP_LAG_MS="0",
            **({} if args.lease_s is None else {"AGENT_RUN_LEASE_S": str(args.lease_s)}),
        )
        async with replicas(workdir, label, env, 1) as servers:
            await warm_up(workdir, servers * args.workers, label)
            base = servers[0].base
            specs = [
                {
                    "key": f"{label}-{i}",
                    "at_s": at,
                    "protocol": "agent",
                    "post": base,
                    "follow": [base],
                    "body": run_body(f"{label}-{i}"),
                    "drop_after": None,
                }
                for i, at in enumerate(spread(level, args.ramp_s))
            ]
            result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
    return list(result["runs"])


def audit(runs: list[dict[str, Any]], db: Path, tokens: int) -> dict[str, Any]:
    """Each run's client stream against its stored log (after the server stopped)."""
    con = sqlite3.connect(db)
    try:
        rows: dict[str, list[tuple[int, str, str]]] = {}
        # Each run's events: ``run_events``, and those not yet settled out of SQLite's
        # live log (``storage.stores.event_log``).
        for run_id, seq, event, data in con.execute(
            "SELECT run_id, seq, event, data FROM run_events UNION ALL "
            "SELECT l.run_id, l.seq, l.event, l.data FROM runs r CROSS JOIN run_log l "
            "ON l.run_id = r.id AND l.id >= r.log_from WHERE r.log_from IS NOT NULL ORDER BY 1, 2"
        ):
            rows.setdefault(str(run_id), []).append((int(seq), str(event), str(data)))
    finally:
        con.close()
    out: dict[str, Any] = {
        "runs": len(runs),
        "complete": 0,
        "short_complete": 0,
        "client_differs_from_log": 0,
        "log_short": 0,
        "taken_over": 0,
        "restarted_from_request": 0,
        "ended_run_interrupted": 0,
        "two_terminals": 0,
        "log_ended": 0,
        "outcomes": {},
        "samples": [],
        "incomplete_samples": [],
    }
    for run in runs:
        log = rows.get(str(run.get("run_id")), [])
        seen = [(int(f[0]), f[1], f[2]) for f in run["frames"] if f[0] is not None]
        client_tokens = {int(i) for f in run["frames"] if f[1] == "content_chunk" for i, _ in STAMP.findall(f[2])}
        log_tokens = {int(i) for _, e, d in log if e == "content_chunk" for i, _ in STAMP.findall(d)}
        complete = run["outcome"] == "complete"
        outcome = str(run["outcome"]).split(":")[0]
        out["outcomes"][outcome] = out["outcomes"].get(outcome, 0) + 1
        out["log_ended"] += any(e == "message_complete" for _, e, _ in log)
        if not complete and len(out["incomplete_samples"]) < 5:
            out["incomplete_samples"].append(
                {
                    "run_id": run.get("run_id"),
                    "outcome": str(run["outcome"])[:200],
                    "client_ids": [
                        s for s, _, _ in [(int(f[0]), f[1], f[2]) for f in run["frames"] if f[0] is not None]
                    ][-5:],
                    "log_tail": [f"{s}:{e}" for s, e, _ in log[-5:]],
                    "log_len": len(log),
                }
            )
        out["complete"] += complete
        short = complete and len(client_tokens) < tokens
        out["short_complete"] += short
        differs = complete and seen != log
        out["client_differs_from_log"] += differs
        out["log_short"] += complete and len(log_tokens) < tokens
        out["taken_over"] += any(e == "run_resumed" for _, e, _ in log)
        out["two_terminals"] += sum(e == "message_complete" for _, e, _ in log) > 1
        out["restarted_from_request"] += any(
            e == "run_resumed" and orjson.loads(d).get("checkpoint_seq") == 0 for _, e, d in log
        )
        out["ended_run_interrupted"] += any(
            e == "error" and orjson.loads(d).get("code") == "run_interrupted" for _, e, d in log
        )
        if (short or differs) and len(out["samples"]) < 5:
            out["samples"].append(
                {
                    "run_id": run.get("run_id"),
                    "client_missing_tokens": sorted(set(range(tokens)) - client_tokens),
                    "log_missing_tokens": sorted(set(range(tokens)) - log_tokens),
                    "client_ids_equal_log_seqs": [s for s, _, _ in seen] == [s for s, _, _ in log],
                    "log": [
                        f"{s}:{e}" if e != "content_chunk" else f"{s}:" + ",".join(i for i, _ in STAMP.findall(d))
                        for s, e, d in log
                    ],
                }
            )
    return out


def main() -> None:
    args = parse_args()
    root = args.root.resolve()
    sys.path.insert(0, str(root))  # the server under test is started from this checkout
    from bench._common import raise_fd_limit, write_results

    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="workers-audit-"))
    rows = []
    try:
        for p in range(args.passes):
            for level in args.levels:
                label = f"p{p}-{level}"
                runs = asyncio.run(drive_level(args, workdir, label, level))
                row = {
                    "pass": p,
                    "level": level,
                    "root": str(root),
                    "load_avg_1m": round(os.getloadavg()[0], 2),
                    **audit(runs, workdir / f"{label}.sqlite3", args.tokens),
                }
                rows.append(row)
                print({k: v for k, v in row.items() if k not in ("samples", "incomplete_samples")}, flush=True)
                print(row["incomplete_samples"][:3], flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    write_results(args.name, {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows})


if __name__ == "__main__":
    main()
