"""SQLite's live log of run events (issue 23, ``storage.stores.event_log``).

Events of unfinished runs are appended to ``run_log`` and settled into the clustered
``run_events`` now and then; every reader sees each event exactly once, wherever it is
at that moment. Each test reads the file itself as well as the store, so each fails on
the layout before (every event straight into ``run_events``, no ``run_log``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import pytest

from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import SqliteStorage, migrations
from storage.sqlite.live_log import RUN_EVENT_NOT_AFTER_LAST
from storage.sqlite.runs import SETTLE_ROWS
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
    async with opened_storage(path) as storage:
        runs = storage.runs
        await runs.create(new_run("done"))
        await runs.commit(step("done", range(1, 3), end=True))
        await runs.create(new_run("live", conv="d"))
        for first in range(1, SETTLE_ROWS + 1, 100):
            await runs.commit(step("live", range(first, first + 100), conv="d"))
        await storage.db.flush()
        assert where(path, "done") == (3, 0)
        assert where(path, "live")[0] == 0  # a live run stays in the log
        assert await seqs(storage, "live") == list(range(1, SETTLE_ROWS + 1))


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


#: A file written before migration 27: one run unfinished (its events so far in
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
        await migrations.migrate(conn, migrations.MIGRATIONS[:26])
        for statement in LEGACY:
            await conn.execute(statement)
    async with opened_storage(path) as storage:
        assert storage.schema_version >= 27
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
