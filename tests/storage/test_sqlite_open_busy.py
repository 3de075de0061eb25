"""Opening the SQLite storage while another process writes the file: the start-up waits
for the write lock, as every write does (``storage.sqlite.engine._when_free``).

Every migration step takes the write lock at every start, applied or not. That waited
SQLite's ``busy_timeout`` (1 s) and no more: a sibling ``--workers`` worker migrating a
new file on a loaded machine, or a one-off command's bulk write, held it longer, and the
start-up failed with "database is locked" (exit 3; in a ``--workers`` group, the group
stopped). Here another process holds the lock until the opening has said that it waits.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite
import pytest

from storage.sqlite.connections import SqliteOptions, busy
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.engine import SqliteStorage, _when_free, open_sqlite_storage
from storage.sqlite.migration_steps import MIGRATIONS
from storage.sqlite.migrations import migrate
from tests.support.sqlite_lock import sqlite_file_locked

WAITS = "the database is busy"
T = TypeVar("T")


async def _migrated(path: Path) -> None:
    storage = await open_sqlite_storage(path)
    await storage.close()


async def _released_once_waiting(
    path: Path, opening: Coroutine[Any, Any, T], caplog: pytest.LogCaptureFixture
) -> asyncio.Task[T]:
    """``opening`` started while another process holds ``path``'s write lock, which is
    held until the opening says it waits (past its first ``busy_timeout``) and then let
    go; the opening's task, still running (it must not have ended while the file was held)."""
    async with sqlite_file_locked(path):
        task = asyncio.create_task(opening)
        while not task.done() and not any(WAITS in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.02)
        assert not task.done(), f"the open ended while the file was held: {task.exception()!r}"
    return task


async def test_the_open_waits_for_a_write_lock_held_past_the_busy_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "agent.sqlite3"
    await _migrated(path)
    # The write retry far longer than the test waits: only a start-up that gives up early fails.
    opts = SqliteOptions(write_retry_s=120)
    with caplog.at_level(logging.WARNING, logger="agentchat.storage"):
        opening = await _released_once_waiting(path, open_sqlite_storage(path, opts), caplog)
        storage: SqliteStorage = await asyncio.wait_for(opening, 120)
    try:
        waited = [r for r in caplog.records if WAITS in r.getMessage()]
        assert len(waited) == 1 and getattr(waited[0], "path", None) == str(path), waited
        assert storage.schema_version > 0
        await storage.db.execute([("CREATE TABLE written_after (x INTEGER)", ())])  # the writer works
    finally:
        await storage.close()


async def test_a_busy_file_fails_the_open_once_the_write_retry_is_spent(tmp_path: Path) -> None:
    """The wait is bounded by ``write_retry_s``: then SQLite's own error, as before."""
    path = tmp_path / "agent.sqlite3"
    await _migrated(path)
    async with sqlite_file_locked(path):
        with pytest.raises(sqlite3.OperationalError) as failed:
            await asyncio.wait_for(open_sqlite_storage(path, SqliteOptions(write_retry_s=0.5)), 60)
    assert busy(failed.value), failed.value


def test_only_sqlites_busy_errors_are_waited_for(tmp_path: Path) -> None:
    """A statement that fails for what it says fails again: not waited for."""
    path = tmp_path / "plain.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, isolation_level=None, timeout=0.05)
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("BEGIN IMMEDIATE")
        with pytest.raises(sqlite3.OperationalError) as no_table:
            other.execute("SELECT * FROM runs")
    finally:
        holder.close()
        other.close()
    assert busy(locked.value), locked.value
    assert not busy(no_table.value), no_table.value


async def test_a_rebuilding_step_met_busy_leaves_the_writers_foreign_keys_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The steps that rebuild a table (15, 16) turn foreign keys off on the writer before
    their ``BEGIN IMMEDIATE``, and every start passes through them, applied or not. That
    BEGIN meeting a busy file raised before the step's restoring ``finally``: keys stayed
    off, the start-up's retry then read "off" as what to restore, and the writer served
    with foreign keys off - no ``ON DELETE CASCADE`` (a conversation deleted, its
    messages and runs left behind). Here the open's retry meets the lock at step 15 first."""
    path = tmp_path / "agent.sqlite3"
    await _migrated(path)
    db = await SqliteDatabase.open(path, SqliteOptions(write_retry_s=120))
    try:
        from_rebuild = [m for m in MIGRATIONS if m.version >= 15]
        assert from_rebuild[0].rebuilds

        async def migrate_from_the_rebuild(conn: aiosqlite.Connection) -> int:
            return await migrate(conn, tuple(from_rebuild))

        with caplog.at_level(logging.WARNING, logger="agentchat.storage"):
            waiting = await _released_once_waiting(path, _when_free(db, migrate_from_the_rebuild), caplog)
            await asyncio.wait_for(waiting, 120)

        async def foreign_keys(conn: aiosqlite.Connection) -> int:
            async with conn.execute("PRAGMA foreign_keys") as cur:
                row = await cur.fetchone()
            return int(row[0]) if row else -1

        assert await db.transact_raw(foreign_keys) == 1
    finally:
        await db.close()


async def test_the_switch_to_wal_of_a_new_file_waits_for_a_lock_held_past_a_second(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file not yet in WAL mode (new, or left in rollback mode by another tool): the
    writer's first connection switches it, which needs the file to itself. That retried
    "database is locked" for ~1 s only, so the start-up failed where the migration check
    after it waits ``write_retry_s``; now the switch waits as long, and says so."""
    path = tmp_path / "agent.sqlite3"
    with sqlite3.connect(path) as conn:  # a SQLite file in rollback-journal mode
        conn.execute("CREATE TABLE left_by_another_tool (x INTEGER)")
    opts = SqliteOptions(write_retry_s=120)
    with caplog.at_level(logging.WARNING, logger="agentchat.storage"):
        opening = await _released_once_waiting(path, open_sqlite_storage(path, opts), caplog)
        storage: SqliteStorage = await asyncio.wait_for(opening, 120)
    try:
        assert (await storage.db.fetchone("PRAGMA journal_mode"))[0] == "wal"  # type: ignore[index]
        assert storage.schema_version > 0
    finally:
        await storage.close()


async def test_the_switch_to_wal_gives_up_once_the_write_retry_is_spent(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE left_by_another_tool (x INTEGER)")
    async with sqlite_file_locked(path):
        with pytest.raises(sqlite3.OperationalError) as failed:
            await asyncio.wait_for(open_sqlite_storage(path, SqliteOptions(write_retry_s=0.5)), 60)
    assert busy(failed.value), failed.value
