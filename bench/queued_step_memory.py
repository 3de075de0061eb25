"""Memory a live run's step holds while it waits in the store's writer queue.

Why this and not only the peak RSS of ``sse_overhead.py``: past a few hundred streams on
one worker the event loop emits steps faster than the one SQLite writer commits them, so
the peak holds thousands of queued steps (the tail of the run's events, its statements,
and what is told when they commit). That peak is what each stream costs, but it moves
with how much CPU the loop and the writer thread get, so on a shared machine it varies
by ±30 % between runs of the same code. This measures the per-step part exactly:
``--runs`` live runs (real ``Run`` objects, leased as the manager leases them, on a real
SQLite store) each queue ``--steps`` one-event steps within one turn of the event loop,
before any commit can be seen; tracemalloc's difference divided by the steps is the
bytes one queued step holds (its future included).

``--root`` measures another checkout's code (a detached ``git worktree``; checkouts from
before the re-rooming, with their module paths, too), so a before/after is::

    .venv/bin/python bench/queued_step_memory.py --root /tmp/before --no-write
    .venv/bin/python bench/queued_step_memory.py

Writes bench/results/queued_step_memory.json (``--no-write``: print only).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import write_results


async def measure(runs: int, steps: int) -> dict[str, Any]:
    try:
        from app.runs.run import Run
    except ImportError:  # a checkout from before the re-rooming
        from app.runs import Run  # type: ignore[no-redef,attr-defined]
    from events import ContentChunk
    from storage.records import NewRun
    from storage.sqlite import open_sqlite_storage

    storage = await open_sqlite_storage(Path(tempfile.mkdtemp(prefix="agentchat-bench-")) / "q.sqlite3")
    try:
        live = []
        for i in range(runs):
            fields: dict[str, Any] = {
                "id": f"run_{i}",
                "conversation_id": f"conv_{i}",
                "user_id": "bench",
                "context_type": "knowledge",
                "input": b"{}",
                "lease_owner": "bench",
                "lease_s": 30.0,
            }
            await storage.runs.create(NewRun(**fields))
            run = Run(
                id=f"run_{i}", conversation_id=f"conv_{i}", user_id="bench", context_type="knowledge", log=storage.runs
            )
            run.lease_owner, run.lease_s = "bench", 30.0
            live.append(run)
        # The events exist before the first snapshot: only what queueing adds is counted.
        events = [[ContentChunk(chunk=f"token{j} ") for j in range(steps)] for _ in range(runs)]
        futures: list[asyncio.Future[None]] = []
        gc.collect()
        tracemalloc.start(1)
        before = tracemalloc.take_snapshot()
        for j in range(steps):  # no await: the writer's commits cannot be seen yet
            for run, evs in zip(live, events, strict=True):
                futures.append(run.emit_step([evs[j]]))
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        stats = after.compare_to(before, "lineno")
        queued = runs * steps
        held = sum(s.size_diff for s in stats) - sys.getsizeof(futures)
        await asyncio.gather(*futures)
        assert all(run.durable == steps for run in live), "every queued step is stored"
        top = [
            {
                "where": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
                "bytes_per_step": round(s.size_diff / queued, 1),
            }
            for s in stats[:8]
        ]
        return {
            "code": str(Path(sys.modules[Run.__module__].__file__ or "").parent),
            "runs": runs,
            "steps_per_run": steps,
            "bytes_per_queued_step": round(held / queued, 1),
            "largest": top,
        }
    finally:
        await storage.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--root", help="measure this checkout's code instead of this one's")
    args = ap.parse_args()
    if args.root:
        sys.path.insert(0, str(Path(args.root).resolve()))
    out = asyncio.run(measure(args.runs, args.steps))
    print(f"{out['bytes_per_queued_step']} bytes per queued step ({args.runs} runs x {args.steps} steps)")
    for row in out["largest"]:
        print(f"  {row['bytes_per_step']:>8} B  {row['where']}")
    if not args.no_write:
        print(f"wrote {write_results('queued_step_memory', out)}")


if __name__ == "__main__":
    main()
