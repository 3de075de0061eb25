"""Side by side with LangGraph's Agent Server: the same 1,000 resumable runs of 60 paced
tokens against ``langgraph dev`` (``langgraph-api`` on its in-memory runtime) and
against ours (one replica, SQLite, the default deployment), one after the other on the
same machine, in one invocation.

- **Theirs**: ``langgraph dev --no-reload`` serving ``bench/langgraph_peer/graph.py``, one
  node that writes ``--tokens`` (60) tokens ``--pause-ms`` (100) apart to the ``custom``
  stream mode, each stamped with the time it was produced. A run is ``POST /threads``,
  ``POST /threads/{id}/runs`` (a background run, ``stream_resumable: true``,
  ``on_disconnect: continue``), then ``GET /threads/{id}/runs/{run}/stream`` from the
  start (``Last-Event-ID: 0``). ``--n-jobs-per-worker`` is raised to ``--runs`` so
  their default of 10 concurrent runs per worker does not queue the runs.
- **Ours**: ``agentchat serve`` with the paced Ollama fake in its own process, which
  streams the same 60 stamped tokens (``bench/_load.py``). A run is
  ``POST /v1/agent/runs`` then ``GET stream_url``.

Both get the same client (``--clients`` worker processes, raw asyncio sockets, one
event loop each): runs started at an even pace over ``--ramp-s``; each follower drops
its connection after 3–9 events, stays away up to 0.3 s and resumes with
``Last-Event-ID``. Reported for each server:
- runs/s sustained: runs completed / (last completion - first start);
- token-to-client delay (arrival - stamp, tokens received live), p50/p99; time to
  first token and the extra gap between tokens, p50/p99;
- every token of every run received exactly once (lost / duplicated), runs completed;
- RSS per run: the server's RSS (with its children) before the runs, at its peak and
  after them, divided by the runs; server CPU seconds.
Ours does more per token than their graph: a model HTTP stream to parse and every event
written to SQLite; their in-memory runtime keeps runs and streams in the process.

Run from the repository root:  .venv/bin/python bench/langgraph_peer.py [--runs 1000]
Writes bench/results/langgraph_peer.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench import _pyspy as pyspy  # noqa: E402
from bench._common import RESULTS, cpu_s, raise_fd_limit, summary, tree_rss_kb, write_results  # noqa: E402
from bench._fakes import Fakes  # noqa: E402
from bench._load import drive, run_loop, spread  # noqa: E402
from bench.capacity import agent_env, replicas, run_body  # noqa: E402
from tests.fakes.paced_gemini import stamps  # noqa: E402
from tests.support.procs import ManagedProcess, child_env  # noqa: E402
from tests.support.server import free_port  # noqa: E402

GRAPH_DIR = ROOT / "bench" / "langgraph_peer"


class Server:
    """What the measurement needs of either server: where, which process."""

    def __init__(self, name: str, base: str, proc: ManagedProcess, protocol: str) -> None:
        self.name, self.base, self.proc, self.protocol = name, base, proc, protocol


def langgraph_binary() -> Path:
    """``langgraph`` from its own virtualenv (``make bench`` creates ``.venv-langgraph``:
    langgraph-api's pins clash with our dev tools'), else ``$LANGGRAPH_BIN``, else beside
    this interpreter."""
    here = Path(__file__).resolve().parent.parent / ".venv-langgraph" / "bin" / "langgraph"
    for candidate in (os.environ.get("LANGGRAPH_BIN"), here, Path(sys.executable).parent / "langgraph"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    raise SystemExit("langgraph is not installed: run `make bench` (it creates .venv-langgraph)")


@contextlib.asynccontextmanager
async def langgraph_server(args: argparse.Namespace, workdir: Path) -> AsyncIterator[Server]:
    port = free_port()
    binary = langgraph_binary()
    # The in-memory runtime pickles its threads and runs into ``.langgraph_api/`` beside
    # langgraph.json when it stops, and loads them at the next start: run from a fresh copy
    # (in the working directory) so every measurement starts empty and the repository
    # stays clean. langgraph.json names the graph relative to the working directory.
    graph_dir = workdir / "langgraph_peer"
    shutil.copytree(GRAPH_DIR, graph_dir, ignore=shutil.ignore_patterns(".langgraph_api", "__pycache__"))
    argv = ["/bin/sh", "-c", 'cd "$0" && exec "$@"', str(graph_dir),
            str(binary), "dev", "--no-reload", "--no-browser", "--host", "127.0.0.1", "--port", str(port),
            "--n-jobs-per-worker", str(max(10, args.runs)), "--config", str(graph_dir / "langgraph.json"),
            "--server-log-level", "WARNING"]
    env = child_env({
        "PEER_TOKENS": str(args.tokens),
        "PEER_PAUSE_S": str(args.pause_ms / 1000),
        "LANGSMITH_TRACING": "false",
        "LANGCHAIN_TRACING_V2": "false",
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
    })
    env.pop("LANGSMITH_API_KEY", None)
    proc = ManagedProcess("langgraph", argv, env, workdir / "langgraph.log")
    proc.start()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        async with httpx.AsyncClient(timeout=2) as http:
            while True:
                if not proc.running:
                    raise RuntimeError(f"langgraph dev exited with {proc.returncode}:\n{proc.tail()}")
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(f"{base}/ok")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"langgraph dev did not answer /ok:\n{proc.tail()}")
                await asyncio.sleep(0.2)
        yield Server("LangGraph Agent Server (langgraph dev, in-memory)", base, proc, "langgraph")
    finally:
        proc.close()


def specs_for(server: Server, runs: int, ramp_s: float, label: str, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i, at in enumerate(spread(runs, ramp_s, seed)):
        key = f"{label}-{i}"
        body = run_body(key) if server.protocol == "agent" else {"question": key}
        out.append({"key": key, "at_s": at, "protocol": server.protocol, "post": server.base,
                    "follow": [server.base], "body": body, "drop_after": rng.randint(3, 9),
                    "away_s": rng.random() * 0.3})
    return out


def judge(runs: list[dict[str, Any]], tokens: int, pause_s: float) -> dict[str, Any]:
    delays: list[float] = []
    ttft: list[float] = []
    gaps: list[float] = []
    ends: list[int] = []
    lost = duplicated = completed = 0
    for run in runs:
        chunks = [f for f in run["frames"] if f[1] in ("content_chunk", "custom")]
        found = [(i, stamp, f) for f in chunks for i, stamp in stamps(f[2])]
        indices = [i for i, _, _ in found]
        lost += len(set(range(tokens)) - set(indices))
        duplicated += len(indices) - len(set(indices))
        ok = run["outcome"] == "complete" and set(indices) == set(range(tokens))  # duplicates counted apart
        completed += ok
        if ok:
            ends.append(run["frames"][-1][3])
        if chunks:
            ttft.append((chunks[0][3] - run["post_ns"]) / 1e9)
        for _, stamp, f in found:
            if stamp >= run["connects"][f[4]][1]:  # produced while this connection was open
                delays.append((f[3] - stamp) / 1e6)
        for prev, cur in itertools.pairwise(chunks):
            if prev[4] == cur[4]:
                gaps.append(max(0.0, (cur[3] - prev[3]) / 1e6 - pause_s * 1000))
    first = min((r["post_ns"] for r in runs), default=0)
    span_s = (max(ends) - first) / 1e9 if ends else float("nan")
    return {
        "runs": len(runs),
        "runs_completed": completed,
        "not_completed_sample": [f"{r['key']}: {r['outcome']}" for r in runs if r["outcome"] != "complete"][:10],
        "tokens_lost": lost,
        "tokens_duplicated": duplicated,
        "runs_per_s_sustained": round(completed / span_s, 1) if ends else 0.0,
        "first_start_to_last_completion_s": round(span_s, 1),
        "token_delay_ms": summary(delays),
        "ttft_s": summary(ttft),
        "extra_gap_ms": summary(gaps),
    }


async def measure(args: argparse.Namespace, workdir: Path, server: Server, label: str) -> dict[str, Any]:
    pid = server.proc.pid
    assert pid is not None
    warm = specs_for(server, 5, 0.5, f"{label}-warm", seed=1)
    await drive(warm, workdir, workers=1, timeout_s=120, name=f"{label}-warm")
    await asyncio.sleep(1.0)
    rss_before = tree_rss_kb(pid)
    peak = [rss_before]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], tree_rss_kb(pid))
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    cpu0 = cpu_s(pid)
    specs = specs_for(server, args.runs, args.ramp_s, label, seed=11)
    spy = None
    if args.py_spy and label == "ours":
        span_s = args.ramp_s + args.tokens * args.pause_ms / 1000  # the level's busy part
        spy = await pyspy.record(pid, span_s, RESULTS / f"{args.name}_pyspy_ours.txt")
    result = await drive(specs, workdir, workers=args.clients, timeout_s=args.run_timeout_s, name=label)
    cpu = cpu_s(pid) - cpu0
    if spy is not None:
        await spy.wait()
    sampler.cancel()
    await asyncio.sleep(2.0)
    rss_after = tree_rss_kb(pid)
    figures = judge(result["runs"], args.tokens, args.pause_ms / 1000)
    figures.update(
        server=server.name,
        server_cpu_s=round(cpu, 1),
        server_rss_kb={"before": rss_before, "peak": peak[0], "after": rss_after},
        rss_kb_per_run_peak=round((peak[0] - rss_before) / args.runs, 1),
        rss_kb_per_run_retained=round((rss_after - rss_before) / args.runs, 1),
        client_loop_lag_ms=[c["loop_lag_ms"] for c in result["clients"]],
        client_cpu_s=[c["cpu_s"] for c in result["clients"]],
        load_avg_1m=round(os.getloadavg()[0], 2),
    )
    return figures


async def bench(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes:
        env = agent_env(fakes, "ollama", AGENT_DB_PATH=str(workdir / "ours.sqlite3"))
        async with replicas(workdir, "ours", env, 1) as (agent,):
            ours = Server("agentchat (1 replica, SQLite)", agent.base, agent, "agent")
            out["ours"] = await measure(args, workdir, ours, "ours")
            print_row("ours", out["ours"])
    async with langgraph_server(args, workdir) as theirs:
        out["langgraph"] = await measure(args, workdir, theirs, "langgraph")
        print_row("langgraph", out["langgraph"])
    return out


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float | None]:
    def div(a: float, b: float) -> float | None:
        return round(a / b, 2) if b else None

    return {
        "runs_per_s_ours_over_theirs": div(ours["runs_per_s_sustained"], theirs["runs_per_s_sustained"]),
        "token_delay_p99_theirs_over_ours": div(theirs["token_delay_ms"]["p99"], ours["token_delay_ms"]["p99"]),
        "ttft_p99_theirs_over_ours": div(theirs["ttft_s"]["p99"], ours["ttft_s"]["p99"]),
        "rss_per_run_peak_theirs_over_ours": div(theirs["rss_kb_per_run_peak"], ours["rss_kb_per_run_peak"]),
        "cpu_theirs_over_ours": div(theirs["server_cpu_s"], ours["server_cpu_s"]),
    }


def print_row(name: str, r: dict[str, Any]) -> None:
    print(
        f"{name:<10} {r['runs']:>5} {r['runs_completed']:>9} {r['tokens_lost']:>5} {r['tokens_duplicated']:>5} "
        f"{r['runs_per_s_sustained']:>7.1f} {r['token_delay_ms']['p50']:>9.1f} {r['token_delay_ms']['p99']:>9.1f} "
        f"{r['ttft_s']['p50']:>8.2f} {r['ttft_s']['p99']:>8.2f} {r['extra_gap_ms']['p99']:>8.1f} "
        f"{r['rss_kb_per_run_peak']:>9.1f} {r['rss_kb_per_run_retained']:>9.1f} {r['server_cpu_s']:>7.1f} "
        f"{r['load_avg_1m']:>5.1f}",
        flush=True,
    )


HEADER = (
    f"{'server':<10} {'runs':>5} {'completed':>9} {'lost':>5} {'dup':>5} {'runs/s':>7} {'delay p50':>9} "
    f"{'delay p99':>9} {'ttft p50':>8} {'ttft p99':>8} {'gap p99':>8} {'KB/run pk':>9} {'KB/run kept':>9} "
    f"{'cpu s':>7} {'load':>5}\n{'':<10} {'':>5} {'':>9} {'':>5} {'':>5} {'':>7} {'ms':>9} {'ms':>9} {'s':>8} {'s':>8} "
    f"{'ms':>8}"
)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=1000)
    p.add_argument("--ramp-s", type=float, default=10.0,
                   help="spread the starts over this many seconds (10 s: 100 runs/s offered)")
    p.add_argument("--tokens", type=int, default=60)
    p.add_argument("--pause-ms", type=float, default=100.0)
    p.add_argument("--clients", type=int, default=2, help="client worker processes")
    p.add_argument("--run-timeout-s", type=float, default=600.0)
    p.add_argument("--name", default="langgraph_peer", help="results file name (bench/results/<name>.json)")
    p.add_argument("--keep", action="store_true", help="keep the working directory (logs, databases)")
    p.add_argument("--py-spy", action="store_true",
                   help="sample our server with py-spy while its runs go (bench/results/<name>_pyspy_ours.txt; "
                   "summary: python bench/_pyspy.py FILE)")
    return p.parse_args()


async def main(args: argparse.Namespace) -> None:
    raise_fd_limit()
    workdir = Path(tempfile.mkdtemp(prefix="bench-langgraph-"))
    print(HEADER, flush=True)
    try:
        result = await bench(args, workdir)
    except BaseException:
        print(f"langgraph_peer: failed; logs kept in {workdir}", file=sys.stderr)
        raise
    quoted = ratios(result["ours"], result["langgraph"])
    payload = {
        "model": {"tokens": args.tokens, "pause_ms": args.pause_ms},
        "runs": args.runs,
        "ramp_s": args.ramp_s,
        "clients": f"{args.clients} worker processes, raw asyncio sockets (bench/_load.py)",
        "langgraph_versions": _versions(),
        **result,
        "ratios": quoted,
    }
    path = write_results(args.name, payload)
    print(f"ratios: {quoted}\nresults: {path}")
    if args.keep:
        print(f"logs: {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("langgraph-cli", "langgraph-api", "langgraph-runtime-inmem", "langgraph"):
        with contextlib.suppress(PackageNotFoundError):
            out[name] = version(name)
    return out


if __name__ == "__main__":
    run_loop(main(parse_args()))
