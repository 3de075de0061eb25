"""Start-up cost of ``agentchat``: the process CPU (user + system, from ``/proc``) and the
wall time from exec to the first ``/readyz`` 200 of ``agentchat serve``, and to the exit
of ``agentchat --help`` and of one read-only command (``agentchat buckets``).

Why CPU: a replica restarted after a crash, every ``--workers`` child, ``make run`` and
the test suite (hundreds of real ``serve`` subprocesses on 2 cores) all pay the start; on
a shared machine the CPU moves far less with the load than the wall time does.

Cases (each run in a fresh process, the default configuration: no ``AGENT_*``,
``OLLAMA_*``, ``GEMINI_*``, ``OPENAI_*`` or ``PERPLEXITY_*`` variable, ``--no-backend`` as
the tests start it, nothing listening on Ollama's default port, bytecode cached):

- ``serve_existing``: ``agentchat serve`` on a database an earlier start of the same tree
  created (the restart after a crash);
- ``serve_fresh``: on a new, empty directory (every migration, the sample knowledge base);
- ``help``: ``agentchat --help``;
- ``buckets``: ``agentchat buckets`` on the existing database.

Several source trees are compared in one run, the runs of each case alternating between
them (A B A B ...), so the machine's load falls on both alike. A "before" tree:
``git worktree add --detach /work/wt-start <commit>`` (the child runs ``python -m
app.cli`` with the tree as its working directory and first on ``PYTHONPATH``; each run
checks that it imported that tree's ``app``).

Run:  .venv/bin/python bench/startup.py --runs 7 /work/wt-start .
Writes bench/results/startup_<label>.json (``--label``, default ``ab``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, write_results

_ISOLATED_PREFIXES = ("AGENT_", "OLLAMA_", "GEMINI_", "PERPLEXITY_", "OPENAI_")
READY_DEADLINE_S = 120.0
STOP_DEADLINE_S = 30.0
CASES = ("serve_existing", "serve_fresh", "help", "buckets")
TICK = os.sysconf("SC_CLK_TCK")


def child_env(tree: Path, db_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_ISOLATED_PREFIXES)}
    # Bytecode cached, as ``make test`` and an installed package have it: with
    # PYTHONDONTWRITEBYTECODE set (this machine's shells) every module without a current
    # .pyc is compiled from source at every start, which is not the start measured here.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update({"PYTHONPATH": str(tree), "AGENT_DB_PATH": str(db_dir / "agent.sqlite3"), "PYTHONUNBUFFERED": "1"})
    return env


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_tree(tree: Path) -> None:
    """The child of ``tree`` imports that tree's ``app`` (not the editable install's)."""
    out = subprocess.run(
        [sys.executable, "-c", "import app, sys; sys.stdout.write(app.__file__)"],
        cwd=tree, env=child_env(tree, tree), capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    if not Path(out).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"a child in {tree} imported {out}")


def serve_once(tree: Path, db_dir: Path, log_path: Path) -> dict[str, float]:
    """One ``agentchat serve`` from exec to its first ``/readyz`` 200, then SIGTERM."""
    port = free_port()
    argv = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend"]
    with log_path.open("ab") as log:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=tree, env=child_env(tree, db_dir), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = started + READY_DEADLINE_S
            with httpx.Client(timeout=2.0) as client:
                while True:
                    if proc.poll() is not None:
                        raise SystemExit(f"serve in {tree} exited with {proc.returncode}; see {log_path}")
                    try:
                        if client.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.perf_counter() > deadline:
                        raise SystemExit(f"serve in {tree} not ready within {READY_DEADLINE_S:g} s; see {log_path}")
                    time.sleep(0.02)
            wall = time.perf_counter() - started
            cpu = proc_cpu_s(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_DEADLINE_S)
    return {"cpu_s": cpu, "wall_s": wall}


def command_once(tree: Path, db_dir: Path, args: list[str]) -> dict[str, float]:
    """One ``agentchat ARGS`` to its exit: its CPU from ``wait4``'s resource usage."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=tree, env=child_env(tree, db_dir),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = started + READY_DEADLINE_S
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            raise SystemExit(f"agentchat {' '.join(args)} in {tree} did not end within {READY_DEADLINE_S:g} s")
        time.sleep(0.01)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        assert proc.stderr is not None
        raise SystemExit(f"agentchat {' '.join(args)} in {tree} exited {proc.returncode}: {proc.stderr.read()!r}")
    assert proc.stderr is not None
    proc.stderr.close()
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall}


def run_case(case: str, tree: Path, work: Path) -> dict[str, float]:
    existing = work / "existing"
    if case == "serve_existing":
        return serve_once(tree, existing, work / "serve.log")
    if case == "serve_fresh":
        fresh = Path(tempfile.mkdtemp(dir=work, prefix="fresh-"))
        try:
            return serve_once(tree, fresh, work / "serve.log")
        finally:
            shutil.rmtree(fresh, ignore_errors=True)
    if case == "help":
        return command_once(tree, existing, ["--help"])
    return command_once(tree, existing, ["buckets"])


def stats(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[ROOT], help="source trees (default: this one)")
    parser.add_argument("--runs", type=int, default=5, help="runs of each case in each tree")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--label", default="ab", help="bench/results/startup_<label>.json")
    opts = parser.parse_args()
    cases = [c for c in opts.cases.split(",") if c]
    if unknown := set(cases) - set(CASES):
        parser.error(f"unknown cases: {sorted(unknown)}")
    trees = [t.resolve() for t in opts.trees]
    with socket.socket() as probe:  # "no Ollama reachable" must hold for the default host
        if probe.connect_ex(("127.0.0.1", 11434)) == 0:
            raise SystemExit("something listens on 127.0.0.1:11434 (Ollama's default): the auto probe would find it")
    for tree in trees:
        check_tree(tree)
    base = Path(tempfile.mkdtemp(prefix="agentchat-startup-"))
    results: dict[str, dict[str, list[dict[str, float]]]] = {str(t): {c: [] for c in cases} for t in trees}
    loads: list[float] = [os.getloadavg()[0]]
    try:
        works = {}
        for i, tree in enumerate(trees):
            works[tree] = base / f"tree{i}"
            (works[tree] / "existing").mkdir(parents=True)
            serve_once(tree, works[tree] / "existing", works[tree] / "serve.log")  # creates the existing file
        for case in cases:
            for r in range(opts.runs):
                for tree in trees if r % 2 == 0 else list(reversed(trees)):
                    one = run_case(case, tree, works[tree])
                    one["load1"] = os.getloadavg()[0]
                    results[str(tree)][case].append(one)
                    print(f"{case:15s} {tree.name:12s} cpu {one['cpu_s']:.2f} s  wall {one['wall_s']:.2f} s  "
                          f"load {one['load1']:.1f}", flush=True)
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(base, ignore_errors=True)

    def commit(tree: Path) -> str:
        out = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + ("+changes" if dirty else "")

    summary = {
        str(t): {
            "commit": commit(t),
            **{c: {"cpu_s": stats([x["cpu_s"] for x in runs]), "wall_s": stats([x["wall_s"] for x in runs])}
               for c, runs in results[str(t)].items()},
        }
        for t in trees
    }
    path = write_results(f"startup_{opts.label}", {
        "command": " ".join(sys.argv),
        "runs": opts.runs,
        "load1": {"min": min(loads + [x["load1"] for r in results.values() for c in r.values() for x in c]),
                  "max": max(loads + [x["load1"] for r in results.values() for c in r.values() for x in c])},
        "summary": summary,
        "runs_raw": results,
    })
    for t, s in summary.items():
        print(t, s["commit"])
        for c in cases:
            print(f"  {c:15s} cpu median {s[c]['cpu_s']['median']:.2f} min {s[c]['cpu_s']['min']:.2f}   "
                  f"wall median {s[c]['wall_s']['median']:.2f} min {s[c]['wall_s']['min']:.2f}")
    print("wrote", path)


if __name__ == "__main__":
    main()
