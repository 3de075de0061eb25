"""SQLite's live log of run events (issue 23, ``storage.stores.event_log``).

Events of unfinished runs are appended to ``run_log`` and settled into the clustered
``run_events`` now and then; every reader sees each event exactly once, wherever it is
at that moment. Each test reads the file itself as well as the store, so each fails on
the layout before (every event straight into ``run_events``, no ``run_log``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import pytest

from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import SqliteOptions, SqliteStorage, migrations, open_sqlite_storage
from storage.sqlite.live_log import RUN_EVENT_NOT_AFTER_LAST
from storage.sqlite.log_settler import SETTLE_ROWS
from tests.support.storage import opened_storage


def new_run(run_id: str, conv: str = "c", user: str = "alice") -> NewRun:
    return NewRun(run_id, conv, user, "knowledge", orjson.dumps({"message": "hi"}), "enqueue")


def ev(seq: int, name: str = "content_chunk") -> RunEvent:
    return RunEvent(seq, name, orjson.dumps({"chunk": f"t{seq}"}).decode())


def step(run_id: str, seqs: range, conv: str = "c", *, end: bool = False) -> RunWrite:
    events = [ev(s) for s in seqs]
    if end:
        events.append(ev(seqs.stop, "message_complete"))
    return RunWrite(run_id, conv, "alice", events=events, status="completed" if end else "running", finished=end)


async def until_true(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Wait on a condition (the timeout only guards against a hang)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def where(path: Path, run_id: str) -> tuple[int, int]:
    """(rows of the run in ``run_events``, rows of it in ``run_log``), read from the file."""
    with sqlite3.connect(path) as conn:
        clustered = conn.execute("SELECT count(*) FROM run_events WHERE run_id = ?", (run_id,)).fetchone()[0]
        logged = conn.execute("SELECT count(*) FROM run_log WHERE run_id = ?", (run_id,)).fetchone()[0]
    return int(clustered), int(logged)


async def seqs(storage: SqliteStorage, run_id: str, after: int = 0) -> list[int]:
    return [e.seq for e in await storage.runs.events_after(run_id, after)]


async def test_a_live_runs_events_are_in_the_log_and_a_finished_ones_all_in_run_events(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 4)))
        assert where(path, "r1") == (0, 3)  # appended to the log, none clustered yet
        assert await seqs(storage, "r1") == [1, 2, 3] and await seqs(storage, "r1", 2) == [3]
        assert (await runs.get("r1")).last_seq == 3  # type: ignore[union-attr]
        await runs.commit(step("r1", range(4, 6), end=True))
        assert await seqs(storage, "r1") == [1, 2, 3, 4, 5, 6]  # ended, not settled yet: read from the log
        await runs.settle_log()
        assert where(path, "r1") == (6, 0)  # all clustered, the log trimmed
        assert await seqs(storage, "r1") == [1, 2, 3, 4, 5, 6]
        stored = await runs.get("r1")
        assert stored is not None and stored.last_seq == 6 and stored.status == "completed"
        view = await storage.history.run("alice", "r1")
        assert view is not None and view.complete == {"chunk": "t6"}


async def test_the_writer_settles_on_its_own_every_so_many_events(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=3600))  # no timer's settle here
    try:
        runs = storage.runs
        await runs.create(new_run("done"))
        await runs.commit(step("done", range(1, 3), end=True))
        await runs.create(new_run("live", conv="d"))
        for first in range(1, SETTLE_ROWS - 100, 100):
            await runs.commit(step("live", range(first, first + 100), conv="d"))
        await storage.db.flush()
        assert where(path, "done") == (0, 3)  # not yet: fewer than SETTLE_ROWS events
        await runs.commit(step("live", range(SETTLE_ROWS - 99, SETTLE_ROWS + 1), conv="d"))
        await until_true(lambda: where(path, "done") == (3, 0), "the settle every SETTLE_ROWS events")
        assert where(path, "live")[0] == 0  # a live run stays in the log
        assert await seqs(storage, "live") == list(range(1, SETTLE_ROWS + 1))
    finally:
        await storage.close()


async def test_a_run_settled_while_it_lives_reads_each_event_once(tmp_path: Path) -> None:
    """A live run's rows so far move (``everything``, as a run lagging the log by
    ``REBASE_ROWS`` does) and its ``log_from`` moves past them: later events go on in
    the log, copies left below are never read, its ending settles the rest."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r1"))
        await runs.create(new_run("r2", conv="d"))
        await runs.commit(step("r1", range(1, 4)))
        await runs.commit(step("r2", range(1, 3), conv="d"))
        await runs.settle_log(everything=True)
        assert where(path, "r1") == (3, 0) and where(path, "r2") == (2, 0)
        await runs.commit(step("r1", range(4, 6)))
        assert where(path, "r1") == (3, 2)
        assert await seqs(storage, "r1") == [1, 2, 3, 4, 5] and await seqs(storage, "r1", 3) == [4, 5]
        assert (await runs.get("r1")).last_seq == 5  # type: ignore[union-attr]
        await runs.commit(step("r1", range(6, 7), end=True))
        await runs.settle_log()
        assert where(path, "r1") == (7, 4)  # settled; its copies wait above r2's log_from
        assert await seqs(storage, "r1") == list(range(1, 8))
        assert await seqs(storage, "r2") == [1, 2]
        await runs.commit(step("r2", range(3, 4), conv="d", end=True))
        await runs.settle_log()
        assert where(path, "r1") == (7, 0) and where(path, "r2") == (4, 0)
        assert await seqs(storage, "r2") == [1, 2, 3, 4]


async def test_ids_are_never_reused_once_the_log_is_trimmed_empty(tmp_path: Path) -> None:
    """A run admitted after the log's last rows were trimmed must find its events: with
    plain rowids the next id would start again below its ``log_from``."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("old"))
        await runs.commit(step("old", range(1, 50), end=True))
        await runs.create(new_run("new", conv="d"))
        await runs.settle_log()
        assert where(path, "old") == (50, 0)
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT count(*) FROM run_log").fetchone()[0] == 0
        await runs.commit(step("new", range(1, 3), conv="d"))
        assert await seqs(storage, "new") == [1, 2]


async def test_an_event_not_after_the_runs_last_fails_only_its_step_even_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(new_run("r1"))
        await storage.runs.commit(step("r1", range(1, 4)))
    async with opened_storage(path) as storage:  # a new writer connection: it looks the run up
        runs = storage.runs
        failed: list[BaseException] = []
        ok: list[int] = []
        runs.write(step("r1", range(3, 4)), on_fail=failed.append)
        runs.write(step("r1", range(4, 5)), on_commit=lambda: ok.append(4))
        await storage.db.flush()
        assert ok == [4] and len(failed) == 1 and RUN_EVENT_NOT_AFTER_LAST in str(failed[0])
        assert await seqs(storage, "r1") == [1, 2, 3, 4]


async def test_deleting_a_conversation_removes_its_runs_rows_from_the_log(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("gone"))
        await runs.commit(step("gone", range(1, 4), end=True))  # ended, not settled: in the log only
        await runs.create(new_run("kept", conv="d"))
        await runs.commit(step("kept", range(1, 3), conv="d"))
        deleted = await storage.history.delete_conversation("alice", "c")
        assert deleted is not None and deleted.events == 4
        assert where(path, "gone") == (0, 0)
        assert await seqs(storage, "kept") == [1, 2]


async def test_deleting_a_conversation_removes_settled_copies_left_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("live", conv="d"))  # holds the log's trim back
        await runs.commit(step("live", range(1, 2), conv="d"))
        await runs.create(new_run("gone"))
        await runs.commit(step("gone", range(1, 4), end=True))
        await runs.settle_log()
        assert where(path, "gone") == (4, 4)  # settled; the copies wait above the live run's log_from
        deleted = await storage.history.delete_conversation("alice", "c")
        assert deleted is not None and deleted.events == 4
        assert where(path, "gone") == (0, 0)


async def test_the_retention_pass_settles_compacts_and_trims_the_log(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 6), end=True))
        assert where(path, "r1") == (0, 6)
        ids = await storage.retention.compactable(finished_before=1e12, limit=10)
        assert ids == ["r1"]
        held, removed = await storage.retention.compact(ids)
        assert held and removed == 4  # five text chunks fold into one row
        assert where(path, "r1") == (2, 0)
        replay = await runs.events_after("r1", 0)
        assert [e.seq for e in replay] == [5, 6]
        assert orjson.loads(replay[0].data) == {"chunk": "t1t2t3t4t5"}


#: A file written at main's schema before the live log (migration 28, the knowledge
#: base's generation, its last step): one run unfinished (its events so far in
#: ``run_events``), one finished.
LEGACY = (
    "INSERT INTO conversations (id, user_id, created_at, updated_at) VALUES ('c', 'alice', 1, 2), ('d', 'alice', 1, 2)",
    "INSERT INTO runs (id, conversation_id, user_id, context_type, status, input) VALUES"
    " ('live', 'c', 'alice', 'knowledge', 'running', X'7B7D'), ('done', 'd', 'alice', 'knowledge', 'completed', NULL)",
    "INSERT INTO run_events (run_id, seq, event, data) VALUES ('live', 1, 'run_started', '{}'),"
    " ('live', 2, 'content_chunk', '{\"chunk\":\"a\"}'), ('done', 1, 'run_started', '{}'),"
    " ('done', 2, 'message_complete', '{\"status\":\"completed\"}')",
)


async def test_a_file_of_the_previous_schema_carries_its_unfinished_run_on_in_the_log(tmp_path: Path) -> None:
    path = tmp_path / "legacy.db"
    async with aiosqlite.connect(path, isolation_level=None) as conn:
        await migrations.migrate(conn, migrations.MIGRATIONS[:28])
        assert migrations.MIGRATIONS[27].version == 28
        tables = await (await conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")).fetchall()
        assert "kb_generation" in {t[0] for t in tables} and "run_log" not in {t[0] for t in tables}
        for statement in LEGACY:
            await conn.execute(statement)
    async with opened_storage(path) as storage:
        assert storage.schema_version >= 30
        runs = storage.runs
        live = await runs.get("live")
        assert live is not None and live.last_seq == 2
        assert [r.id for r in await runs.unfinished()] == ["live"]
        await runs.commit(step("live", range(3, 5)))
        assert where(path, "live") == (2, 2)
        assert await seqs(storage, "live") == [1, 2, 3, 4] and await seqs(storage, "live", 2) == [3, 4]
        assert await seqs(storage, "done") == [1, 2]
        await runs.commit(step("live", range(5, 6), end=True))
        await runs.settle_log()
        assert where(path, "live") == (6, 0)
        assert await seqs(storage, "live") == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("layout", ["run_log", "runs.log_from"])
async def test_the_schema_has_the_live_log(tmp_path: Path, layout: Any) -> None:
    async with opened_storage(tmp_path / "agent.db") as storage:
        table, _, column = layout.partition(".")
        rows = await storage.db.fetchall(f"SELECT name FROM pragma_table_info('{table}')")
        assert rows and (not column or (column,) in rows)


def plant_duplicates(path: Path, run_id: str, seqs: list[int]) -> None:
    """Rows of ``run_id`` written again into the log, as a second process on the file
    would have (a different payload: the first-written one must win)."""
    with sqlite3.connect(path) as conn:
        for seq in seqs:
            conn.execute(
                "INSERT INTO run_log(run_id, seq, event, data) VALUES (?, ?, 'content_chunk', ?)",
                (run_id, seq, orjson.dumps({"chunk": f"dup{seq}"}).decode()),
            )


async def test_a_run_with_duplicate_seqs_is_reconciled_and_every_other_run_settles(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Duplicate ``(run_id, seq)`` rows in the log (two processes on one file before the
    writer lock): the plain settle's insert is refused whole, which left every run in
    the log for good. Now the others settle, the bad run keeps the first-written row of
    each seq, and it is said: an ERROR line once, the counters, ``/readyz``'s report."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("bad"))
        await runs.commit(step("bad", range(1, 4)))
        await runs.create(new_run("good", conv="d"))
        await runs.commit(step("good", range(1, 3), conv="d", end=True))
        await storage.db.flush()
        plant_duplicates(path, "bad", [2, 3])  # written after the run's own 2 and 3
        await runs.commit(step("bad", range(4, 5), end=True))
        with caplog.at_level("ERROR", logger="agentchat.storage"):
            await runs.settle_log()
            await runs.settle_log()  # nothing left to reconcile: no second line
        assert where(path, "good") == (3, 0)
        assert where(path, "bad") == (5, 0)  # settled, the duplicates trimmed with the log
        replay = await runs.events_after("bad", 0)
        assert [e.seq for e in replay] == [1, 2, 3, 4, 5]
        assert [orjson.loads(e.data) for e in replay[1:3]] == [{"chunk": "t2"}, {"chunk": "t3"}]  # the first written
        lines = [r for r in caplog.records if "conflicting rows" in r.getMessage()]
        assert len(lines) == 1 and lines[0].run_id == "bad" and lines[0].dropped == 2  # type: ignore[attr-defined]
        stats = runs.settler.stats
        assert (stats.reconciled_runs, stats.dropped_rows, stats.failures) == (1, 2, 0)
        report = (await storage.readiness())["live_log"]
        assert report["reconciled_runs"] == 1 and report["recent"] == [{"run_id": "bad", "rows": 7, "kept": 5}]  # type: ignore[index]


async def test_a_duplicate_of_a_row_already_settled_is_reconciled_too(tmp_path: Path) -> None:
    """A live run settled while it lived (its rows in ``run_events``), then one of its
    seqs written again into the log: the ``run_events`` row, written first, stays."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 4)))
        await runs.settle_log(everything=True)
        await storage.db.flush()
        plant_duplicates(path, "r1", [3])
        await runs.commit(step("r1", range(4, 5), end=True))
        await runs.settle_log()
        assert where(path, "r1")[0] == 5
        replay = await runs.events_after("r1", 0)
        assert [e.seq for e in replay] == [1, 2, 3, 4, 5] and orjson.loads(replay[2].data) == {"chunk": "t3"}
        assert runs.settler.stats.reconciled_runs == 1


async def test_retention_compacts_past_a_run_with_duplicate_seqs(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("bad"))
        await runs.commit(step("bad", range(1, 4), end=True))
        await storage.db.flush()
        plant_duplicates(path, "bad", [1])
        await runs.create(new_run("r2", conv="d"))
        await runs.commit(step("r2", range(1, 4), conv="d", end=True))
        ids = await storage.retention.compactable(finished_before=1e12, limit=10)
        held, removed = await storage.retention.compact(ids)
        assert held and removed == 4  # both runs' three chunks folded into one row each
        assert where(path, "bad") == (2, 0) and where(path, "r2") == (2, 0)


async def test_a_quiet_process_settles_on_its_timer(tmp_path: Path) -> None:
    """Fewer than ``SETTLE_ROWS`` events, then nothing: settled by the timer alone."""
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=0.05))
    try:
        runs = storage.runs
        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 4), end=True))
        assert where(path, "r1") == (0, 4)
        await until_true(lambda: where(path, "r1") == (4, 0), "the timer's settle")
    finally:
        await storage.close()


async def test_a_clean_close_settles_what_this_process_wrote(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=3600))
    try:
        await storage.runs.create(new_run("r1"))
        await storage.runs.commit(step("r1", range(1, 4), end=True))
        await storage.runs.create(new_run("live", conv="d"))
        await storage.runs.commit(step("live", range(1, 3), conv="d"))
        assert where(path, "r1") == (0, 4)
    finally:
        await storage.close()
    assert where(path, "r1") == (4, 0)
    assert where(path, "live") == (0, 2)  # unfinished: the next process carries it on from the log


async def test_a_new_process_settles_what_a_killed_one_left_without_writing(tmp_path: Path) -> None:
    """Ended runs a SIGKILLed process left in the log are settled by the next one's
    first tick, even when it writes nothing."""
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=3600))
    await storage.runs.create(new_run("r1"))
    await storage.runs.commit(step("r1", range(1, 4), end=True))
    storage.runs.settler._written = 0  # as if killed: no settle at close
    await storage.close()
    assert where(path, "r1") == (0, 4)
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=0.05))
    try:
        await until_true(lambda: where(path, "r1") == (4, 0), "the first tick's settle")
    finally:
        await storage.close()


def vm_steps(path: Path, sql: str, params: tuple[Any, ...]) -> int:
    """SQLite virtual-machine steps (in thousands) one statement takes, rolled back: a
    measure of the rows it visits that does not depend on the machine's speed."""
    steps = 0

    def tick() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        conn.set_progress_handler(tick, 1000)
        conn.execute(sql, params)
        conn.set_progress_handler(None, 0)
        conn.execute("ROLLBACK")
    finally:
        conn.close()
    return steps


async def test_a_conversation_delete_sweeps_only_its_runs_range_of_the_log(tmp_path: Path) -> None:
    """A long log (a live run holds its trim back, others write meanwhile): deleting a
    conversation whose runs span a few rows visits those rows, not the whole log (the
    sweep scanned every row before: ~0.1 s a delete on a long log)."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("holder", conv="h"))  # live throughout: the log is never trimmed past it
        await runs.commit(step("holder", range(1, 2), conv="h"))
        await runs.create(new_run("gone"))
        await runs.commit(step("gone", range(1, 4), end=True))
        await runs.create(new_run("gone2"))
        await runs.commit(step("gone2", range(1, 3), end=True))
        await runs.settle_log()  # settled; their copies stay above the holder's log_from
        for first in range(2, 20_002, 500):  # a long log after them
            await runs.commit(step("holder", range(first, first + 500), conv="h"))
        await storage.db.flush()
        assert where(path, "gone") == (4, 4) and where(path, "gone2") == (3, 3)
        sweep = next(sql for kind, sql in storage.runs.log.delete_conversation() if kind == "sweep")
        full = vm_steps(path, "SELECT count(*) FROM run_log WHERE event = 'nothing'", ())
        swept = vm_steps(path, sweep, ("alice", "c"))
        assert full > 50 and swept * 10 < full, (swept, full)
        deleted = await storage.history.delete_conversation("alice", "c")
        assert deleted is not None and deleted.events == 4 + 3
        assert where(path, "gone") == (0, 0) and where(path, "gone2") == (0, 0)
        await runs.create(new_run("gone3", conv="e"))
        await runs.commit(step("gone3", range(1, 3), conv="e", end=True))  # ended, not settled yet
        deleted = await storage.history.delete_conversation("alice", "e")
        assert deleted is not None and deleted.events == 3 and where(path, "gone3") == (0, 0)
        assert [e.seq for e in await runs.events_after("holder", 0, 30_000)] == list(range(1, 20_002))


async def test_a_reconciled_run_keeps_one_ending_and_nothing_after_it(tmp_path: Path) -> None:
    """Two writers' streams of one run interleave by seq: the first wrote 1-5 (its ending
    at 5, what its clients saw), a second took it over at 3 and went on longer (4-8 of its
    own, its ending at 9). Keeping the first-written row of each seq kept the second's
    6-9 after the first's ending - two endings, content after the first. Rows after the
    first kept ending are dropped, and counted."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r"))
        await runs.commit(step("r", range(1, 4)))
        await runs.commit(step("r", range(4, 5), end=True))
        await storage.db.flush()
        plant_duplicates(path, "r", [4, 5, 6, 7, 8])
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO run_log(run_id, seq, event, data) VALUES ('r', 9, 'message_complete', '{}')")
        await runs.settle_log()
        replay = [(e.seq, e.event) for e in await runs.events_after("r", 0)]
        assert replay == [(1, "content_chunk"), (2, "content_chunk"), (3, "content_chunk"), (4, "content_chunk"),
                          (5, "message_complete")]
        assert where(path, "r") == (5, 0)
        stats = runs.settler.stats
        assert (stats.reconciled_runs, stats.dropped_rows) == (1, 6)  # 4 and 5 written twice, 6-9 after the ending
        assert stats.recent == [{"run_id": "r", "rows": 11, "kept": 5}]


async def test_an_ending_already_settled_bounds_a_reconciled_runs_log_rows(tmp_path: Path) -> None:
    """The run's ending is in ``run_events`` already (settled), and the log still holds
    a later row of the run (a second writer): it never goes after the ending."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("r"))
        await runs.commit(step("r", range(1, 3)))
        await runs.settle_log(everything=True)  # 1-2 in run_events, the run still live
        await runs.commit(step("r", range(3, 4), end=True))  # 3, ending at 4, in the log
        await storage.db.flush()
        plant_duplicates(path, "r", [2, 5])  # 2 again (the conflict), 5 after the ending
        await runs.settle_log()
        assert [e.seq for e in await runs.events_after("r", 0)] == [1, 2, 3, 4]
        assert runs.settler.stats.dropped_rows == 2


async def test_a_failed_settle_is_tried_again_by_a_quiet_process(tmp_path: Path) -> None:
    """A settle that fails (here a trigger on ``run_events`` refusing every row while a
    gate is shut: a real error from the real file) reset the settler's count before its
    commit, so a process that wrote nothing more never tried again: its ended runs stayed
    in the log, and ``last_error`` on ``/readyz``, for good. Now the timer tries again,
    and a success clears the error."""
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=0.05))
    try:
        runs = storage.runs
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE settle_gate (open INTEGER)")
            conn.execute("INSERT INTO settle_gate VALUES (0)")
            conn.execute("CREATE TRIGGER settle_gate BEFORE INSERT ON run_events "
                         "WHEN (SELECT open FROM settle_gate) = 0 BEGIN SELECT RAISE(ABORT, 'gate shut'); END")
        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 4), end=True))
        await until_true(lambda: runs.settler.stats.failures >= 1, "a settle failing")
        assert where(path, "r1") == (0, 4)
        assert "gate shut" in str((await storage.readiness())["live_log"]["last_error"])  # type: ignore[index]
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE settle_gate SET open = 1")
        await until_true(lambda: where(path, "r1") == (4, 0), "the timer's settle after the failure")
        await until_true(lambda: runs.settler.stats.last_error is None, "the error cleared")
        assert "last_error" not in (await storage.readiness())["live_log"]  # type: ignore[operator]
    finally:
        await storage.close()
