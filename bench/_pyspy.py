"""py-spy around a benchmark level: sample a server while the load runs, then say where its
time went (``python bench/_pyspy.py FILE`` prints the summary of a recorded file).

``record`` starts ``py-spy record --gil`` (raw collapsed stacks of the thread holding the
GIL: busy samples only, not a loop waiting in epoll) on a process for a fixed
duration; ``top`` reads such a file and ranks, over all samples of the main thread,
the functions by self time and the files by inclusive time (a file counted once per
sample, however deep it recurs), so "where does a token's CPU go" is one table.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path


async def record(pid: int, seconds: float, out: Path, rate: int = 100) -> asyncio.subprocess.Process | None:
    """``py-spy record`` of ``pid`` for ``seconds`` into ``out``; None when py-spy is absent."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy not installed (pip install py-spy); no profile", file=sys.stderr)
        return None
    return await asyncio.create_subprocess_exec(
        exe,
        "record",
        "--gil",
        "-d",
        str(max(1, round(seconds))),
        "-r",
        str(rate),
        "-p",
        str(pid),
        "-f",
        "raw",
        "-o",
        str(out),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def stop(spy: asyncio.subprocess.Process, grace_s: float = 30.0) -> None:
    """End a recording now (SIGINT: py-spy writes what it sampled so far), bounded: a
    window sized in advance ended before a burst's last runs on a loaded machine (the
    title calls after each run, the endings), so the split missed them."""
    if spy.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            spy.send_signal(signal.SIGINT)
    try:
        await asyncio.wait_for(spy.wait(), grace_s)
    except TimeoutError:
        spy.kill()
        await spy.wait()


#: Leaves where a worker thread waits for work (py-spy counts them unless told otherwise).
IDLE_LEAVES = ("_connection_worker_thread (aiosqlite/core.py:59)", "_worker (concurrent/futures/thread.py:81)")


def top(path: Path, n: int = 25) -> dict[str, list[tuple[str, float]]]:
    """Self time per function and inclusive time per file of the main thread (the event
    loop), as shares of its samples; worker threads' busy samples are counted apart."""
    self_time: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    total = threads = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        if "(threading.py" in frames[0]:
            threads += 0 if frames[-1] in IDLE_LEAVES else count
            continue
        total += count
        self_time[frames[-1]] += count
        files = set()
        for frame in frames:
            # "function (path/file.py:line)"
            where = frame.rpartition("(")[2].split(":")[0]
            files.add(_short(where))
        for f in files:
            by_file[f] += count
    total = max(total, 1)
    return {
        "self": [(k, round(v / total, 4)) for k, v in self_time.most_common(n)],
        "inclusive_by_file": [(k, round(v / total, 4)) for k, v in by_file.most_common(n)],
        "samples": [("main thread", float(total)), ("worker threads, busy", float(threads))],
    }


def _short(path: str) -> str:
    for marker in ("site-packages/", "python3.11/", "/work/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


#: The phases of a run, for ``phases``. A main-thread sample belongs to the phase of its
#: innermost frame that a ``STEPS`` marker matches (so a log call made while selecting
#: tools is logging, the model stream inside the agent loop is the model stream); a
#: sample no step matches goes to the first ``REST`` phase one of its frames matches
#: (the store's calls made by a step count as that step's). A marker is part of a file's
#: path, or ``function@path part``.
STEPS: list[tuple[str, tuple[str, ...]]] = [
    ("logging", ("logging/__init__.py", "app/ops/logs.py", "structlog/", "pythonjsonlogger/")),
    (
        "admission (request, auth, limits, inserts)",
        (
            "app/server/http.py",
            "app/server/auth.py",
            "app/server/limits.py",
            "app/server/chat_request.py",
            "app/server/body_structs.py",
            "submit@app/runs/manager.py",
            "_submit@app/runs/manager.py",
            "jwt/",
        ),
    ),
    ("history load, plan", ("app/agent/prepare.py", "app/agent/planner.py", "app/agent/budget.py")),
    ("tool selection", ("app/agent/selector.py", "toolindex/", "app/agent/find_tools.py")),
    ("prompt build", ("prompts/", "app/agent/prompting.py")),
    ("model stream", ("llm/", "httpx/", "httpcore/", "h11/", "anyio/", "app/ops/load.py")),
    ("follow / SSE", ("app/runs/follow.py", "app/server/sse_response.py")),
]
#: Phases decided by any frame of a sample, before ``STEPS``: the conversation's title is
#: a task of its own (``Titler._title``), so its model call, its store write and its
#: cleaning all count as the title (``run_then_title`` wraps the whole agent run, so a
#: marker on app/history.py as a step took the run's own samples for the title).
WHOLE: list[tuple[str, tuple[str, ...]]] = [
    ("conversation title", ("_title@app/history.py",)),
]
REST: list[tuple[str, tuple[str, ...]]] = [
    ("run log / durable writer", ("app/runs/", "storage/", "aiosqlite/", "app/agent/", "events/")),
    ("HTTP server, middleware", ("uvicorn/", "starlette/", "httptools/", "app/cli/", "app/server/", "app/ops/")),
]
#: Compatibility name: every phase in order.
PHASES = [*WHOLE, *STEPS, *REST]


def phases(path: Path) -> dict[str, float]:
    """Shares of the main thread's samples per phase (``STEPS``, ``REST``; "event loop,
    other" for samples no frame of ours or the stack's matches: the loop itself, GC
    pauses charged to the loop)."""
    counts: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or "(threading.py" in stack.split(";", 1)[0]:
            continue
        count = int(count_text)
        total += count
        counts[_phase(stack)] += count
    total = max(total, 1)
    return {name: round(counts[name] / total, 4) for name, _ in [*PHASES, ("event loop, other", ())] if counts[name]}


def _matches(marker: str, function: str, where: str) -> bool:
    name, _, part = marker.rpartition("@")
    return part in where and (not name or function == name or function.endswith("." + name))


def _phase(stack: str) -> str:
    frames = []
    for frame in stack.split(";"):  # "function (path/file.py:line)", outermost first
        function, _, where = frame.partition(" (")
        frames.append((function, where))
    for name, markers in WHOLE:
        if any(_matches(m, f, w) for m in markers for f, w in frames):
            return name
    for function, where in reversed(frames):
        for name, markers in STEPS:
            if any(_matches(m, function, where) for m in markers):
                return name
    for name, markers in REST:
        if any(_matches(m, f, w) for m in markers for f, w in frames):
            return name
    return "event loop, other"


if __name__ == "__main__":
    path = Path(sys.argv[1])
    summary = top(path, int(sys.argv[2]) if len(sys.argv) > 2 else 25)
    for section, rows in summary.items():
        print(f"== {section}")
        for name, share in rows:
            print(f"{share * 100 if share <= 1 else share:8.1f}  {name}")
    print("== phases (main thread)")
    for name, share in phases(path).items():
        print(f"{share * 100:8.1f}  {name}")
