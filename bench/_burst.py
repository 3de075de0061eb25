"""Per-run start CPU (issue 23): what one run costs the server apart from its tokens.

A burst of ``N`` runs (started over ``--ramp-s``) against a model fake that answers
**one** token, so the per-token cost is negligible and what is left is the per-run
work: the request's parse, auth and rate limit, admission and the run / conversation /
message inserts, the history load, tool selection (the default offline embedder,
``hashing``: the query embedded and the catalog ranked), the prompt build, the
checkpoints and first writes, the follower's stream and the run's ending. The figure is
the server's process-tree CPU over the burst ÷ ``N``; bursts alternate between the
variants (``ours``, ``before``, the bare-proxy ``floor``) for ``rounds`` rounds.

With ``--burst-title`` one more variant, ``ours+title``: the same server as ``ours``,
its runs' bodies carrying a ``title`` (issue 23), so the conversation is named in the
admission and no title model call is made — the figure beside ``ours`` is what a client
that names its conversations saves per run.

With ``--py-spy`` one more burst per server variant (ours, before) is sampled and its
main-thread samples are split by phase (``bench/_pyspy.py``'s ``PHASES``): the per-run
CPU figure then comes with "of which admission x ms, tool selection y ms, ...".
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from bench import _pyspy as pyspy
from bench._common import RESULTS, cpu_s, summary, tree_cpu_s
from bench._fakes import Fakes
from bench._load import drive, spread
from tests.support.procs import AgentServer

#: The burst's runs ask in the workflow context: the largest catalog to rank.
CONTEXT = "workflow"


#: The variant whose runs name their conversation (``--burst-title``), on ``ours``'s server.
TITLED = "ours+title"


def burst_body(key: str, *, title: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": f"[run {key}] build a workflow that mails ops when an order ships",
        "context_type": CONTEXT,
        "context": {},
    }
    if title:
        body["title"] = f"Order shipped mail {key}"
    return body


async def one_burst(
    args: argparse.Namespace,
    workdir: Path,
    server: AgentServer,
    label: str,
    n: int,
    *,
    profile: Path | None = None,
    title: bool = False,
) -> dict[str, Any]:
    """``n`` one-token runs on ``server``; CPU per run (and, with ``profile``, a py-spy
    recording of the burst split by phase)."""
    pid = server.pid
    assert pid is not None
    cpu0, loop0 = tree_cpu_s(pid), cpu_s(pid, pid)
    keys = [f"{label}-{i}" for i in range(n)]
    specs = [
        {
            "key": key,
            "at_s": at,
            "protocol": "agent",
            "post": server.base,
            "follow": [server.base],
            "body": burst_body(key, title=title),
            "drop_after": None,
        }
        for key, at in zip(keys, spread(n, args.ramp_s), strict=True)
    ]
    spy = None
    if profile is not None:
        # Stopped once the burst has settled (below), not after a window guessed ahead.
        spy = await pyspy.record(pid, 600, profile)
    t0 = time.monotonic_ns()
    result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
    # Until the server is idle again: the last runs' endings may still be being written.
    await _settle(pid)
    if spy is not None:
        await pyspy.stop(spy)
    cpu, loop = tree_cpu_s(pid) - cpu0, cpu_s(pid, pid) - loop0
    runs = result["runs"]
    first = [
        (next(f[3] for f in r["frames"] if f[1] == "content_chunk") - r["post_ns"]) / 1e9
        for r in runs
        if any(f[1] == "content_chunk" for f in r["frames"])
    ]
    row: dict[str, Any] = {
        "runs": n,
        "completed": sum(r["outcome"] == "complete" for r in runs),
        "server_cpu_s": round(cpu, 3),
        "start_cpu_ms_per_run": round(cpu * 1000 / n, 2),
        "loop_cpu_ms_per_run": round(loop * 1000 / n, 2),
        "ttft_s": summary(first),
        "elapsed_s": round((time.monotonic_ns() - t0) / 1e9, 1),
    }
    if profile is not None and profile.exists():
        row["phases_ms_per_run"] = {
            phase: round(share * loop * 1000 / n, 2) for phase, share in pyspy.phases(profile).items()
        }
        row["profile"] = str(profile)
    return row


async def _settle(pid: int, quiet_s: float = 0.5, limit_s: float = 30.0) -> None:
    """Until the process used (almost) no CPU for ``quiet_s``: the burst's work is done."""
    deadline = time.monotonic() + limit_s
    last = tree_cpu_s(pid)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s)
        now = tree_cpu_s(pid)
        if now - last < 0.02:
            return
        last = now


async def start_cpu(args: argparse.Namespace, workdir: Path, variant_server: Any, agent_env: Any) -> dict[str, Any]:
    """The per-run start CPU of every variant, alternated burst by burst."""
    burst_dir = workdir / "burst"
    burst_dir.mkdir(exist_ok=True)
    n = args.burst
    async with Fakes(burst_dir, tokens=1, pause_ms=args.pause_ms) as fakes:
        kinds = ["ours"] + (["before"] if args.before else []) + (["floor"] if args.floor else [])
        servers: dict[str, AgentServer] = {}
        try:
            for kind in kinds:
                env = agent_env(
                    fakes, "ollama", AGENT_EMBEDDER="hashing", AGENT_DB_PATH=str(burst_dir / f"burst-{kind}.sqlite3")
                )
                servers[kind] = variant_server(kind, burst_dir, env, fakes, "burst", args.before)
                servers[kind].start()
            await asyncio.gather(*(s.wait_healthy(180) for s in servers.values()))
            for kind, server in servers.items():  # imports, prepared statements, first connections
                await one_burst(args, burst_dir, server, f"burst-{kind}-warm", 20)
            variants = kinds + ([TITLED] if getattr(args, "burst_title", False) else [])
            rows: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
            for r in range(args.burst_rounds):
                for kind in variants if r % 2 == 0 else variants[::-1]:
                    server = servers["ours" if kind == TITLED else kind]
                    label = f"burst-{kind.replace('+', '-')}-{r}"
                    row = await one_burst(args, burst_dir, server, label, n, title=kind == TITLED)
                    rows[kind].append(row)
                    print_burst(kind, row)
            profiles: dict[str, dict[str, Any]] = {}
            if args.py_spy:
                for kind in (k for k in kinds if k != "floor"):
                    path = RESULTS / f"{args.name}_pyspy_burst_{kind}.txt"
                    profiles[kind] = await one_burst(
                        args, burst_dir, servers[kind], f"burst-{kind}-spy", n, profile=path
                    )
                    print_burst(f"{kind}+spy", profiles[kind])
                    for phase, ms in profiles[kind]["phases_ms_per_run"].items():
                        print(f"    {phase:<28} {ms:7.2f} ms/run", flush=True)
        finally:
            for server in servers.values():
                server.close()
    return {
        "runs_per_burst": n,
        "model": "1 token (the per-token cost negligible)",
        "embedder": "hashing (the default configuration's offline choice)",
        "context_type": CONTEXT,
        "by_variant": {
            kind: {
                "start_cpu_ms_per_run_median": _median([r["start_cpu_ms_per_run"] for r in rows[kind]]),
                "bursts": rows[kind],
            }
            for kind in rows
        },
        "phases": profiles,
    }


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if ordered else 0.0


def print_burst(kind: str, row: dict[str, Any]) -> None:
    print(
        f"per-run start  {kind:<12} {row['completed']:>5}/{row['runs']:<5} cpu {row['server_cpu_s']:7.2f} s  "
        f"{row['start_cpu_ms_per_run']:6.2f} ms/run (loop {row['loop_cpu_ms_per_run']:6.2f})  "
        f"ttft p50 {row['ttft_s']['p50']:.2f} p99 {row['ttft_s']['p99']:.2f} s",
        flush=True,
    )
