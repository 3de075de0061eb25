"""What one streamed token's durable row costs SQLite (issue 23), apart from the service.

At 300 concurrent paced runs the server's threads other than the event loop — SQLite's
writer — spend about as much CPU as the gap between the service and the bare-proxy
floor (``bench/capacity.py``: total minus loop CPU). This replays that write pattern on
a bare ``sqlite3`` connection with the service's settings (WAL, ``synchronous=NORMAL``)
and the ``run_events`` table (``WITHOUT ROWID``, keyed by run and seq): ``--runs``
concurrent runs, each group commit one multi-row ``INSERT`` of ``--rows`` tokens from
as many different runs (what ``storage/sqlite/thread_calls.commit_sync`` sends; the
capacity runs measured 35-40 tokens per transaction at 300 runs), on top of
``--history`` finished runs. It prints user and system CPU per token row. Under
``strace -c -f`` it shows why: every commit rewrites one 4 KiB leaf page per run in it
(each run's rows are clustered by the key) for a row of ~80 bytes — two ``pwrite64`` per
WAL frame, and the checkpoint's copy.

Run:  .venv/bin/python bench/sqlite_token_rows.py [--runs 300 --rows 40 --commits 451]
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

SCHEMA = """CREATE TABLE run_events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL, folded TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID"""
INSERT = "INSERT INTO run_events (run_id, seq, event, data) VALUES "


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def measure(path: Path, runs: int, rows: int, commits: int, history: int) -> dict[str, float]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(SCHEMA)
    conn.execute("BEGIN")
    for _ in range(history):  # finished runs already in the file: a realistic tree
        old = f"run_{uuid.uuid4().hex}"
        conn.executemany(
            INSERT + "(?, ?, ?, ?)", [(old, i, "content_chunk", '{"chunk":"an old token"}') for i in range(1, 62)]
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    live = [f"run_{uuid.uuid4().hex}" for _ in range(runs)]
    seqs = dict.fromkeys(live, 0)
    user0, sys0 = cpu()
    started = time.monotonic()
    written = 0
    for commit in range(commits):
        batch = []
        for i in range(rows):
            run = live[(commit * rows + i) % runs]
            seqs[run] += 1
            batch.append((run, seqs[run], "content_chunk", f'{{"chunk":"token {i} "}}'))
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT + ",".join(["(?, ?, ?, ?)"] * len(batch)), [p for row in batch for p in row])
        conn.execute("COMMIT")
        written += len(batch)
    user1, sys1 = cpu()
    conn.close()
    return {
        "token_rows": written,
        "user_us_per_row": round((user1 - user0) / written * 1e6, 1),
        "sys_us_per_row": round((sys1 - sys0) / written * 1e6, 1),
        "wall_s": round(time.monotonic() - started, 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300, help="concurrent runs")
    p.add_argument("--rows", type=int, default=40, help="token rows per group commit")
    p.add_argument("--commits", type=int, default=451, help="group commits")
    p.add_argument("--history", type=int, default=200, help="finished runs of 61 rows already stored")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(measure(Path(tmp) / "tokens.db", args.runs, args.rows, args.commits, args.history))


if __name__ == "__main__":
    main()
