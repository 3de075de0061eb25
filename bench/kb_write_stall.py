"""What a knowledge-base write does to live streams on SQLite's one writer.

On the default SQLite every live run's events are committed by the one writer connection
before a client is shown them, and a knowledge-base write is one transaction on that same
writer: while it runs, no run event commits, so every live stream's next token waits.

One ``agentchat serve`` per variant (this checkout; with ``--before PATH`` and each
``--tree LABEL=PATH`` another tree, e.g. a worktree of the commit before a change, run
with this virtualenv), default configuration on a fresh SQLite file except the embedder
(``--embedder``, ``none`` by default: the write, not the embedding, is what is
measured), the paced Ollama fake of ``bench/_fakes.py`` (every token stamped with the
time it was produced). Per scenario, ``--runs`` runs stream at once; ``--ingest-after-s``
into them one ingest is posted (``POST /v1/kb/documents``):

- ``none``: nothing (the baseline);
- ``docs``: ``--docs`` documents of ``--doc-kb`` KiB each (a big document set: batches
  of 256 documents);
- ``bigdoc``: one document of ``--big-mb`` MiB (one write holding all its chunks);
- ``cli``: ``agentchat ingest`` of a folder of ``--docs`` such files, in its own process
  on the same file (it takes SQLite's lock, not this server's writer: the server's
  writer waits in SQLite's busy handler and its retries; the command leaves it gaps,
  ``storage.sqlite.group_gap``); the folder is written before the streams start;
- ``clialone``: the same command on a file no server has open (no streams): its
  chunks/s, which the gaps must not lower.

Reported per variant x scenario: the ingest's duration and chunks (for the command, its
own report's chunks and seconds, and so chunks/s), and over the tokens a
client received while the ingest ran (``during``) and before it (``before``): the largest
token delay (arrival minus the fake's stamp) and the largest extra inter-token gap (gap
minus the fake's pause), with p99 - so "the largest inter-token gap the runs see".
Variants alternate scenario by scenario (the order reversed each round) so load drifts
hit them all.

Run from the repository root:
  .venv/bin/python bench/kb_write_stall.py --before /tmp/wt-before [--scenarios none,docs,bigdoc]
Writes bench/results/<--name>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import re
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

from bench._common import pct, write_results  # noqa: E402
from bench._fakes import Fakes  # noqa: E402
from bench._load import one_run  # noqa: E402
from tests.fakes.paced_gemini import stamps  # noqa: E402
from tests.support.procs import PYTHON, AgentServer  # noqa: E402

#: Runs ``app.cli`` from the tree named by the first argument (ahead of this checkout's
#: editable install), as ``agentchat`` would.
_BOOT = (
    "import runpy, sys; tree = sys.argv.pop(1); sys.path.insert(0, tree); sys.argv[0] = 'agentchat'; "
    "import app; assert app.__file__.startswith(tree), app.__file__; "
    "runpy.run_module('app.cli', run_name='__main__', alter_sys=True)"
)


def words(n: int, rng: random.Random) -> str:
    """``n`` words of a 20k-word vocabulary (varied terms, as FTS5 meets in real text)."""
    return " ".join(f"w{rng.randrange(20_000)}" for _ in range(n))


def payload(scenario: str, args: argparse.Namespace, tag: str) -> dict[str, Any] | None:
    rng = random.Random(7)
    if scenario == "docs":
        per = args.doc_kb * 1024 // 7
        return {"documents": [{"id": f"{tag}-d{i}", "title": f"doc {i}", "text": words(per, rng)}
                              for i in range(args.docs)]}
    if scenario == "bigdoc":
        text = words(int(args.big_mb * 1024 * 1024 / 7), rng)
        return {"documents": [{"id": f"{tag}-big", "title": "big", "text": text}]}
    return None


def env_for(fakes: Fakes, args: argparse.Namespace) -> dict[str, str]:
    return {
        "AGENT_LLM_PROVIDER": "ollama",
        "OLLAMA_HOST": fakes.ollama,
        "OLLAMA_MODEL": "paced-llama:latest",
        "AGENT_EMBEDDER": args.embedder,
        "AGENT_ADMIN_OPEN": "true",
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_MAX_RUNS_PER_USER": "1000000",
        "AGENT_REQUESTS_PER_MINUTE": "1000000",
        "AGENT_BACKEND_URL": "http://127.0.0.1:9",
        "AGENT_LOG_LEVEL": "WARNING",
    }


def judge(runs: list[dict[str, Any]], pause_s: float, window: tuple[int, int], warm_ns: int) -> dict[str, Any]:
    """Token delays and extra gaps of the tokens that arrived inside ``window`` (ns)
    and of those before it (after ``warm_ns``)."""
    lo, hi = window
    out: dict[str, Any] = {}
    for name, keep in (("before", lambda at: warm_ns <= at < lo), ("during", lambda at: lo <= at <= hi)):
        delays: list[float] = []
        gaps: list[float] = []
        for run in runs:
            chunks = [f for f in run["frames"] if f[1] == "content_chunk"]
            for f in chunks:
                if keep(f[3]):
                    delays.extend((f[3] - s) / 1e6 for _, s in stamps(f[2]))
            for prev, cur in itertools.pairwise(chunks):
                if prev[4] == cur[4] and keep(cur[3]):
                    gaps.append(max(0.0, (cur[3] - prev[3]) / 1e6 - pause_s * 1000))
        out[name] = {
            "tokens": len(delays),
            "delay_ms_max": round(max(delays), 1) if delays else None,
            "delay_ms_p99": round(pct(delays, 99), 1) if delays else None,
            "delay_ms_p50": round(pct(delays, 50), 1) if delays else None,
            "extra_gap_ms_max": round(max(gaps), 1) if gaps else None,
            "extra_gap_ms_p99": round(pct(gaps, 99), 1) if gaps else None,
        }
    out["completed"] = sum(r["outcome"] == "complete" for r in runs)
    out["errors"] = sorted({f[2][:200] for r in runs for f in r["frames"] if f[1] == "error"})[:3]
    return out


def cli_folder(server: AgentServer, args: argparse.Namespace, tag: str) -> Path:
    """The ``--docs`` files ``cli_ingest`` reads. Written before the streams start, off
    the event loop: written inside the measured window, on the loop that reads the
    streams, they held every token's arrival for the seconds they took (up to 15-20 s at
    load 10 for 3,000 files) - most of what this scenario reported before."""
    folder = server.db_path.parent / f"files-{tag}"
    folder.mkdir()
    rng = random.Random(7)
    for i in range(args.docs):
        (folder / f"d{i}.txt").write_text(words(args.doc_kb * 1024 // 7, rng))
    return folder


async def cli_ingest(server: AgentServer, folder: Path) -> dict[str, Any]:
    """``agentchat ingest`` of ``folder`` from the server's tree, on its database."""
    argv = list(server.argv)
    cut = argv.index("serve")
    env = {**server.env, "AGENT_LOG_LEVEL": "WARNING"}
    proc = await asyncio.create_subprocess_exec(
        *argv[:cut], "ingest", "--quiet", str(folder), env=env, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 600)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = out.decode(errors="replace")
    report: dict[str, Any] = {"status": proc.returncode, "output": text[-300:]}
    # The command's own report: "..., 15000 chunks (9.2 s)" - its ingest alone, without
    # the process's start.
    if (found := re.search(r"(\d+) chunks \(([\d.]+) s\)", text)) is not None:
        chunks, seconds = int(found[1]), float(found[2])
        report.update(chunks=chunks, cli_s=seconds, chunks_per_s=round(chunks / seconds) if seconds else None)
    return report


async def cli_alone(
    label: str, tree: Path, workdir: Path, fakes: Fakes, args: argparse.Namespace, round_: int
) -> dict[str, Any]:
    """``clialone``: ``agentchat ingest`` with no server on the file (a serve made the
    file and stopped): what the command's gaps must not slow."""
    where = workdir / f"{label}-clialone-{round_}"
    where.mkdir()
    server = AgentServer(where, env_for(fakes, args), name=f"{label}-clialone")
    if tree.resolve() != ROOT:
        server.argv = [PYTHON, "-c", _BOOT, str(tree.resolve()), *server.argv[3:]]
    server.start()
    try:
        await server.wait_ready(300)
    finally:
        server.close()
    folder = await asyncio.to_thread(cli_folder, server, args, f"{label}{round_}")
    load0 = os.getloadavg()[0]
    started = time.monotonic()
    report = await cli_ingest(server, folder)
    empty = {"delay_ms_max": None, "delay_ms_p99": None, "extra_gap_ms_max": None}
    return {
        "scenario": "clialone", "variant": label, "round": round_, "ingest": report, "during": empty,
        "before": empty, "completed": 0, "ingest_s": round(time.monotonic() - started, 2),
        "load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }


async def scenario_once(
    server: AgentServer, scenario: str, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    body = payload(scenario, args, tag)
    folder = await asyncio.to_thread(cli_folder, server, args, tag) if scenario == "cli" else None
    t0 = time.monotonic_ns()
    specs = [
        {"key": f"{tag}-{i}", "at_s": i * 0.05, "protocol": "agent", "post": server.base, "follow": [server.base],
         "body": {"message": f"[run {tag}-{i}] say words", "context_type": "knowledge", "context": {}},
         "drop_after": None}
        for i in range(args.runs)
    ]
    timeout = args.tokens * args.pause_ms / 1000 + 120
    limits = httpx.Limits(max_connections=args.runs + 10)
    load0 = os.getloadavg()[0]
    async with httpx.AsyncClient(timeout=httpx.Timeout(600, connect=10), limits=limits) as http:
        runs = asyncio.gather(*(one_run(http, s, t0, timeout) for s in specs))
        runs_task = asyncio.ensure_future(runs)
        await asyncio.sleep(args.ingest_after_s)
        started = time.monotonic_ns()
        report: dict[str, Any] = {}
        if folder is not None:
            report = await cli_ingest(server, folder)
        elif body is not None:
            response = await http.post(f"{server.base}/v1/kb/documents", json=body)
            report = {"status": response.status_code, **{k: response.json().get(k) for k in ("added", "chunks")}}
        ended = time.monotonic_ns()
        if scenario == "none":
            ended = started + int(args.none_window_s * 1e9)
        results = await runs_task
    figures = judge(results, args.pause_ms / 1000, (started, ended), t0 + int(1.5e9))
    figures.update(
        scenario=scenario,
        ingest_s=round((ended - started) / 1e9, 2),
        ingest=report,
        load_1m=[round(load0, 2), round(os.getloadavg()[0], 2)],
    )
    return figures


async def variant_run(
    label: str, tree: Path, workdir: Path, fakes: Fakes, args: argparse.Namespace, scenario: str, round_: int
) -> dict[str, Any]:
    where = workdir / f"{label}-{scenario}-{round_}"
    where.mkdir()
    server = AgentServer(where, env_for(fakes, args), name=f"{label}-{scenario}")
    if args.workers > 1:
        server.argv += ["--workers", str(args.workers)]
    if tree.resolve() != ROOT:
        server.argv = [PYTHON, "-c", _BOOT, str(tree.resolve()), *server.argv[3:]]
    server.start()
    try:
        await server.wait_ready(300)
        figures = await scenario_once(server, scenario, args, f"{label}{round_}")
    finally:
        server.close()
    figures["variant"] = label
    figures["round"] = round_
    return figures


def show(row: dict[str, Any]) -> None:
    d, b = row["during"], row["before"]
    print(
        f"{row['variant']:>8} {row['scenario']:>6} r{row['round']} ingest {row['ingest_s']:6.2f}s "
        f"{row['ingest'].get('chunks')!s:>6} chunks {row['ingest'].get('chunks_per_s')!s:>5}/s"
        f" | during: delay max {d['delay_ms_max']} p99 {d['delay_ms_p99']}"
        f" gap max {d['extra_gap_ms_max']} | before: delay max {b['delay_ms_max']} gap max {b['extra_gap_ms_max']}"
        f" | done {row['completed']}/{args_runs} load {row['load_1m']}",
        flush=True,
    )


args_runs = 0


async def main(args: argparse.Namespace) -> None:
    global args_runs
    args_runs = args.runs
    variants = [("ours", ROOT)] + ([("before", Path(args.before))] if args.before else [])
    for spec in args.tree:
        label, _, where = spec.partition("=")
        variants.append((label, Path(where)))
    workdir = Path(tempfile.mkdtemp(prefix="kb-stall-"))
    rows: list[dict[str, Any]] = []
    try:
        async with Fakes(workdir, tokens=args.tokens, pause_ms=args.pause_ms) as fakes:
            for round_ in range(args.rounds):
                for scenario in args.scenarios.split(","):
                    order = variants if round_ % 2 == 0 else list(reversed(variants))
                    for label, tree in order:
                        if scenario == "clialone":
                            row = await cli_alone(label, tree, workdir, fakes, args, round_)
                        else:
                            row = await variant_run(label, tree, workdir, fakes, args, scenario, round_)
                        show(row)
                        rows.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    path = write_results(args.name, {"args": vars(args), "rows": rows})
    print(f"wrote {path}")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", help="another tree to compare (run with this virtualenv)")
    p.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", help="more trees to compare")
    p.add_argument("--scenarios", default="none,docs,bigdoc")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--tokens", type=int, default=1500)
    p.add_argument("--pause-ms", type=float, default=20.0)
    p.add_argument("--ingest-after-s", type=float, default=4.0)
    p.add_argument("--none-window-s", type=float, default=10.0)
    p.add_argument("--docs", type=int, default=2000)
    p.add_argument("--doc-kb", type=int, default=4)
    p.add_argument("--big-mb", type=float, default=4.0)
    p.add_argument("--embedder", default="none")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--workers", type=int, default=1, help="serve --workers N (the ingest lands on one of them)")
    p.add_argument("--name", default="kb_write_stall")
    return p.parse_args()


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
