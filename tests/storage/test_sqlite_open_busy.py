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
from pathlib import Path

import pytest

from storage.sqlite.connections import SqliteOptions, busy
from storage.sqlite.engine import SqliteStorage, open_sqlite_storage
from tests.support.sqlite_lock import sqlite_file_locked

WAITS = "the database is busy"


async def _migrated(path: Path) -> None:
    storage = await open_sqlite_storage(path)
    await storage.close()


async def test_the_open_waits_for_a_write_lock_held_past_the_busy_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "agent.sqlite3"
    await _migrated(path)
    # The write retry far longer than the test waits: only a start-up that gives up early fails.
    opts = SqliteOptions(write_retry_s=120)
    with caplog.at_level(logging.WARNING, logger="agentchat.storage"):
        async with sqlite_file_locked(path):
            opening = asyncio.create_task(open_sqlite_storage(path, opts))
            # Held until the open says it waits (past its first busy_timeout), or has ended.
            while not opening.done() and not any(WAITS in r.getMessage() for r in caplog.records):
                await asyncio.sleep(0.02)
            assert not opening.done(), f"the open ended while the file was held: {opening.exception()!r}"
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
