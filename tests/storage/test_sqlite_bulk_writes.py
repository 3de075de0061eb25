"""Knowledge-base writes on SQLite's one writer beside the live runs' events
(``SqlEngine.transact_whole``: run whole on the writer's thread, a *bulk* write).

No run event commits while such a write runs, so: a bulk write never queues for the
writer ahead of events that came during the one before it; a statement failing half-way
rolls the whole write back and leaves the writer to the next one; a caller cancelled
while its write runs on the thread leaves it whole (committed) and the writer free.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import SqliteStorage
from tests.support.storage import opened_storage

BUCKET_ROW = "INSERT INTO kb_buckets(name, schema, created_at) VALUES (?, '{}', 'now')"


async def until_true(check: Any, what: str, timeout: float = 30) -> None:
    """Wait on a condition (the timeout only guards against a hang)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def _event(storage: SqliteStorage, seq: int, done: list[str]) -> None:
    event = RunEvent(seq, "content_chunk", orjson.dumps({"chunk": f"t{seq}"}).decode())
    storage.runs.write(
        RunWrite("r1", "c", "alice", events=[event], status="running", finished=False),
        on_commit=lambda: done.append(f"event {seq}"),
    )


def _buckets(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT name FROM kb_buckets ORDER BY name")]


async def _held_write(storage: SqliteStorage, name: str) -> tuple[asyncio.Task[None], threading.Event]:
    """A bulk write that stays on the writer's thread until the returned event is set."""
    sql = storage.kb_index._sql
    entered, release = threading.Event(), threading.Event()

    async def held(tx: Any) -> None:
        await tx.execute(BUCKET_ROW, (name,))
        entered.set()
        assert release.wait(60), "the test never released the write"

    task = asyncio.create_task(sql.transact_whole(held))
    await until_true(entered.is_set, "the first write on the writer's thread")
    return task, release


async def test_a_run_event_commits_before_a_second_kb_write_queued_ahead_of_it(tmp_path: Path) -> None:
    """While one knowledge-base write runs, the ingest's next one is already waiting (two
    are in flight) and a live run's token arrives: the token commits first. On the code
    before, the second write held its place in the writer's queue ahead of the token, and
    every stream waited for both writes."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(NewRun("r1", "c", "alice", "knowledge", orjson.dumps({"m": "hi"}), "enqueue"))
        sql = storage.kb_index._sql
        done: list[str] = []
        first, release = await _held_write(storage, "first")

        async def second_write(tx: Any) -> None:
            await tx.execute(BUCKET_ROW, ("second",))

        async def second() -> None:
            await sql.transact_whole(second_write)
            done.append("kb second")

        second_task = asyncio.create_task(second())
        for _ in range(20):  # the second write asks for the writer (no fixed sleep: turns of the loop)
            await asyncio.sleep(0)
        _event(storage, 1, done)
        for _ in range(20):  # the writer's queue takes the event and asks for the writer too
            await asyncio.sleep(0)
        assert done == []  # the first write still holds the writer
        release.set()
        await asyncio.wait_for(asyncio.gather(first, second_task, storage.db.flush()), 60)
        assert done == ["event 1", "kb second"]
        assert _buckets(path) == ["first", "second"]


async def test_a_statement_failing_half_way_rolls_back_the_whole_write_and_the_writer_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(NewRun("r1", "c", "alice", "knowledge", orjson.dumps({"m": "hi"}), "enqueue"))
        sql = storage.kb_index._sql

        async def fails(tx: Any) -> None:
            await tx.execute(BUCKET_ROW, ("kept-not",))
            await tx.execute(BUCKET_ROW, ("kept-not",))  # the key again: IntegrityError

        with pytest.raises(sqlite3.IntegrityError):
            await sql.transact_whole(fails)
        assert _buckets(path) == []
        done: list[str] = []
        _event(storage, 1, done)
        await asyncio.wait_for(storage.db.flush(), 60)
        assert done == ["event 1"]

        async def works(tx: Any) -> None:
            await tx.execute(BUCKET_ROW, ("after",))

        await sql.transact_whole(works)
        assert _buckets(path) == ["after"]


async def test_a_caller_cancelled_while_its_write_runs_leaves_it_whole_and_the_writer_free(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(NewRun("r1", "c", "alice", "knowledge", orjson.dumps({"m": "hi"}), "enqueue"))
        task, release = await _held_write(storage, "held")
        task.cancel()
        for _ in range(20):  # the cancel reaches the caller; the write goes on on the thread
            await asyncio.sleep(0)
        assert not task.done()  # it waits for its transaction to end before it lets the cancel go on
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 60)
        assert _buckets(path) == ["held"]  # committed whole, as if the caller had waited
        done: list[str] = []
        _event(storage, 1, done)
        await asyncio.wait_for(storage.db.flush(), 60)
        assert done == ["event 1"]
        assert not storage.db._write_lock.locked() and not storage.db._bulk_turn.locked()
