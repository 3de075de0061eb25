"""What the run store's writes cost per streamed token, through the service's own store
(issue 23): ``open_sqlite_storage``, admissions, one ``RunWrite`` per token through the
ordered writer's group commit, endings — no HTTP, no model, so the figure is the
storage path alone, and the same script runs against another checkout's code.

``--runs`` runs live at once (each ended after ``--tokens`` tokens and replaced by a new
one), ``--rate`` tokens per second in all (3,000: 300 runs each streaming a token every
100 ms, as ``bench/capacity.py``'s paced model does), for ``--seconds``. It prints the
process's CPU per token (user and system) and how much of it the main thread (the
event loop: building steps, the writer's callbacks) spent; the rest is SQLite's writer
thread. ``bench/sqlite_token_rows.py`` replays the same pattern on a bare connection.

Run:  .venv/bin/python bench/run_store_tokens.py [--runs 300 --rate 3000 --seconds 6]
      (another checkout: <checkout>/.venv/bin/python bench/run_store_tokens.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import tempfile
import time
import uuid
from pathlib import Path

from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import open_sqlite_storage


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def measure(path: Path, runs: int, tokens: int, rate: float, seconds: float) -> dict[str, object]:
    storage = await open_sqlite_storage(path)
    store = storage.runs
    try:

        async def admit() -> str:
            run_id = f"run_{uuid.uuid4().hex}"
            await store.create(NewRun(run_id, run_id, "bench", "knowledge", b'{"message":"hi"}', "enqueue"))
            return run_id

        live = [await admit() for _ in range(runs)]
        seqs = dict.fromkeys(live, 0)
        await storage.db.flush()
        tick = 0.01
        per_tick = max(1, round(rate * tick))
        total = round(rate * seconds)
        user0, sys0 = cpu()
        main0 = time.thread_time()
        started = time.monotonic()
        written = ended = 0
        slot = 0
        while written < total:
            for _ in range(per_tick):
                run_id = live[slot]
                seqs[run_id] += 1
                seq = seqs[run_id]
                event = RunEvent(seq, "content_chunk", f'{{"chunk":"token {seq} "}}')
                if seq < tokens:
                    store.write(RunWrite(run_id, run_id, "bench", events=[event]))
                else:  # the last step: the ending, then a new run in its place
                    done = RunEvent(seq + 1, "message_complete", '{"status":"completed"}')
                    store.write(
                        RunWrite(run_id, run_id, "bench", events=[event, done], status="completed", finished=True)
                    )
                    live[slot] = await admit()
                    seqs[live[slot]] = 0
                    ended += 1
                written += 1
                slot = (slot + 1) % runs
            next_at = started + (written / rate)
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        await storage.db.flush()
        user1, sys1 = cpu()
        main = time.thread_time() - main0
        wall = time.monotonic() - started
        batches = storage.db.stats.batches
    finally:
        await storage.close()
    spent = user1 - user0 + sys1 - sys0
    return {
        "runs": runs,
        "tokens": written,
        "runs_ended": ended,
        "write_batches": batches,
        "cpu_us_per_token": round(spent / written * 1e6, 1),
        "user_us_per_token": round((user1 - user0) / written * 1e6, 1),
        "sys_us_per_token": round((sys1 - sys0) / written * 1e6, 1),
        "main_thread_us_per_token": round(main / written * 1e6, 1),
        "other_threads_us_per_token": round((spent - main) / written * 1e6, 1),
        "wall_s": round(wall, 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "checkout": str(Path(__import__("storage").__file__).resolve().parent.parent),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--tokens", type=int, default=60, help="tokens of a run before it ends")
    p.add_argument("--rate", type=float, default=3000.0, help="tokens per second in all")
    p.add_argument("--seconds", type=float, default=6.0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(measure(Path(tmp) / "agent.db", args.runs, args.tokens, args.rate, args.seconds))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
