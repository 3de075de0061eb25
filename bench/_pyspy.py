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
import shutil
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
        exe, "record", "--gil", "-d", str(max(1, round(seconds))), "-r", str(rate), "-p", str(pid), "-f", "raw",
        "-o", str(out), stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )


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


if __name__ == "__main__":
    summary = top(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25)
    for section, rows in summary.items():
        print(f"== {section}")
        for name, share in rows:
            print(f"{share * 100 if share <= 1 else share:8.1f}  {name}")
