"""What one streamed token's durable row costs SQLite (issue 23), apart from the service,
in the clustered layout and in the live log (``--layout``).

At 300 concurrent paced runs the server's threads other than the event loop — SQLite's
writer — spent about as much CPU as the gap between the service and the bare-proxy
floor (``bench/capacity.py``: total minus loop CPU). This replays that write pattern on
a bare ``sqlite3`` connection with the service's settings (WAL, ``synchronous=NORMAL``):
``--runs`` concurrent runs, each group commit one multi-row ``INSERT`` of ``--rows``
tokens from as many different runs (what ``storage/sqlite/thread_calls.commit_sync``
sends; the capacity runs measured 35-40 tokens per transaction at 300 runs), on top of
``--history`` finished runs. A run ends after ``--tokens`` rows (its status written,
as the service's last step does) and a new one is admitted in its place. It prints user
and system CPU per token row, admissions and endings included.

The layouts:

* ``clustered`` (before issue 23's live log): every event straight into ``run_events``
  (``WITHOUT ROWID``, keyed by run and seq). Under ``strace -c -f`` it shows why it
  costs: every commit rewrites one 4 KiB leaf page per run in it (each run's rows are
  clustered by the key) for a row of ~80 bytes — two ``pwrite64`` per WAL frame, and the
  checkpoint's copy.
* ``log`` (the service's layout since, ``storage.stores.event_log``, with its own SQL):
  events of unfinished runs are appended to ``run_log`` (``INTEGER PRIMARY KEY
  AUTOINCREMENT``, no other index), so one commit dirties the log's last page or two
  whatever the number of runs in it; the run's ``log_from`` (the log's next id at its
  admission, a trigger) bounds its rows; the writer connection's temporary trigger
  refuses an event not after its run's last (``storage.sqlite.live_log``); every
  ``--trim-every`` commits the writer settles the runs ended since into ``run_events``
  in one pass over the log and trims the log below the smallest ``log_from`` still set
  (a contiguous range).
* ``log-at-end``: the same, but each ending moves its run's rows in its own transaction
  (a trigger on the status) — the first candidate. Finding a run's rows without an
  index on the log scans it from the run's ``log_from`` on: the rows of every run live
  meanwhile, ~18,000 at 300 runs of 60 tokens, which costs more than it saves.

Run:  .venv/bin/python bench/sqlite_token_rows.py [--runs 300 --rows 40 --commits 451 --layout both|all]
      [--repeat 3 --out bench/results/livelog_token_rows_300.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import tempfile
import time
import uuid
from pathlib import Path

from storage.sqlite.live_log import WRITER_SETUP
from storage.sqlite.migration_steps.live_log import LIVE_LOG
from storage.stores.event_log import LIVE_LOG as LIVE_LOG_SQL

EVENTS = """CREATE TABLE run_events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL, folded TEXT,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID"""
#: ``log_first``/``log_until``: migration 30's columns, which the settle writes (where a
#: settled run's rows were, for a bounded conversation delete).
RUNS = """CREATE TABLE runs (
    id TEXT PRIMARY KEY, status TEXT NOT NULL, log_from INTEGER, log_first INTEGER, log_until INTEGER
)"""
LOG = """CREATE TABLE run_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL
)"""
#: The service's own schema of the log (migration 29): the admission trigger that sets
#: a run's ``log_from``, the partial index of runs that have one.
LOG_SCHEMA = tuple(sql for sql in LIVE_LOG if not sql.startswith(("ALTER", "UPDATE", "CREATE TABLE")))
#: ``log-at-end``: each ending moves its run's rows in its own transaction — which scans
#: the log from the run's ``log_from`` to its end: the rows of every run live meanwhile.
MOVE_AT_END = """CREATE TRIGGER runs_log_end AFTER UPDATE OF status ON runs
    WHEN OLD.log_from IS NOT NULL AND NEW.status IN ('completed', 'failed', 'cancelled') BEGIN
        INSERT INTO run_events(run_id, seq, event, data)
            SELECT run_id, seq, event, data FROM run_log WHERE id >= OLD.log_from AND run_id = NEW.id;
        UPDATE runs SET log_from = NULL WHERE id = NEW.id;
    END"""
#: ``log``: the service's settling (``storage.stores.event_log``): the rows of every run
#: ended since move in one pass over the log, then the log is trimmed.
SETTLE = LIVE_LOG_SQL.settle()
TRIM = SETTLE[-1]


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def setup(conn: sqlite3.Connection, layout: str) -> str:
    """The tables; returns the table a live run's events go to."""
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(EVENTS)
    conn.execute(RUNS)
    if layout == "clustered":
        return "run_events"
    conn.execute(LOG)
    for sql in (*LOG_SCHEMA, *WRITER_SETUP):
        conn.execute(sql)
    if layout == "log-at-end":
        conn.execute(MOVE_AT_END)
    return "run_log"


def measure(
    path: Path, layout: str, runs: int, rows: int, commits: int, history: int, tokens: int, trim_every: int
) -> dict[str, float | int | str]:
    conn = sqlite3.connect(path, isolation_level=None)
    table = setup(conn, layout)
    insert = f"INSERT INTO {table} (run_id, seq, event, data) VALUES "
    conn.execute("BEGIN")
    for _ in range(history):  # finished runs already in the file: a realistic tree
        old = f"run_{uuid.uuid4().hex}"
        conn.execute("INSERT INTO runs (id, status) VALUES (?, 'completed')", (old,))
        conn.executemany(
            "INSERT INTO run_events (run_id, seq, event, data) VALUES (?, ?, ?, ?)",
            [(old, i, "content_chunk", '{"chunk":"an old token"}') for i in range(1, tokens + 2)],
        )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def admit() -> str:
        run = f"run_{uuid.uuid4().hex}"
        conn.execute("INSERT INTO runs (id, status) VALUES (?, 'running')", (run,))
        return run

    conn.execute("BEGIN IMMEDIATE")
    live = [admit() for _ in range(runs)]
    conn.execute("COMMIT")
    seqs = dict.fromkeys(live, 0)
    user0, sys0 = cpu()
    started = time.monotonic()
    written = ended = 0
    for commit in range(commits):
        batch = []
        ending: list[int] = []
        for i in range(rows):
            slot = (commit * rows + i) % runs
            run = live[slot]
            seqs[run] += 1
            batch.append((run, seqs[run], "content_chunk", f'{{"chunk":"token {i} "}}'))
            if seqs[run] == tokens:
                ending.append(slot)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert + ",".join(["(?, ?, ?, ?)"] * len(batch)), [p for row in batch for p in row])
        for slot in ending:  # the last step: its status (the trigger moves its log rows)
            conn.execute("UPDATE runs SET status = 'completed' WHERE id = ?", (live[slot],))
            live[slot] = admit()
            seqs[live[slot]] = 0
            ended += 1
        if layout != "clustered" and trim_every and commit % trim_every == trim_every - 1:
            for sql, params in SETTLE if layout == "log" else [TRIM]:
                conn.execute(sql, params)
        conn.execute("COMMIT")
        written += len(batch)
    user1, sys1 = cpu()
    left = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] if layout != "clustered" else 0
    if layout == "log":  # what is not settled yet, then the check
        for sql, params in SETTLE:
            conn.execute(sql, params)
    moved = conn.execute(
        "SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id WHERE r.status = 'completed'"
    ).fetchone()[0]
    expected = (ended + history) * tokens + history
    if moved != expected:
        raise SystemExit(f"{layout}: {moved} rows of ended runs in run_events, expected {expected}")
    conn.close()
    return {
        "layout": layout,
        "runs": runs,
        "token_rows": written,
        "runs_ended": ended,
        "user_us_per_row": round((user1 - user0) / written * 1e6, 1),
        "sys_us_per_row": round((sys1 - sys0) / written * 1e6, 1),
        "cpu_us_per_row": round((user1 - user0 + sys1 - sys0) / written * 1e6, 1),
        "wall_s": round(time.monotonic() - started, 2),
        "log_rows_left": left,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=300, help="concurrent runs")
    p.add_argument("--rows", type=int, default=40, help="token rows per group commit")
    p.add_argument("--commits", type=int, default=451, help="group commits")
    p.add_argument("--history", type=int, default=200, help="finished runs already stored")
    p.add_argument("--tokens", type=int, default=60, help="token rows of a run before it ends")
    p.add_argument("--trim-every", type=int, default=50, help="log layouts: commits between two settles and trims")
    p.add_argument("--layout", choices=("clustered", "log", "log-at-end", "both", "all"), default="both")
    p.add_argument("--repeat", type=int, default=1, help="alternate the layouts this many times")
    p.add_argument("--out", type=Path, default=None, help="also write the rows, with the load, to this JSON file")
    args = p.parse_args()
    rows: list[dict[str, float | int | str]] = []
    layouts = {"both": ["clustered", "log"], "all": ["clustered", "log", "log-at-end"]}.get(args.layout, [args.layout])
    for _ in range(args.repeat):
        for layout in layouts:
            with tempfile.TemporaryDirectory() as tmp:
                out = measure(
                    Path(tmp) / "tokens.db",
                    layout,
                    args.runs,
                    args.rows,
                    args.commits,
                    args.history,
                    args.tokens,
                    args.trim_every,
                )
                out["load_avg_1m"] = round(os.getloadavg()[0], 2)
                rows.append(out)
                print(json.dumps(out), flush=True)
    if args.out is not None:
        args.out.write_text(
            json.dumps(
                {"benchmark": "sqlite_token_rows", "args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=1
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
