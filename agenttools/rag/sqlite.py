"""SQLite plumbing shared by the keyword store and the external-result store.

Both stores live in the service's one SQLite file (``AGENT_DB_PATH``) next to the
knowledge base and the conversation store, each on its own aiosqlite connection.
Hence: WAL (readers never block the writer), a busy timeout (writers from other
connections wait instead of failing), autocommit mode (``isolation_level=None``) so
transactions are explicit ``BEGIN IMMEDIATE`` blocks, and one numbered migration list
per store recorded in that store's own migrations table.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import aiosqlite

BUSY_TIMEOUT_MS = 10_000


async def open_connection(path: str | Path) -> aiosqlite.Connection:
    """Open a connection configured for a shared, concurrently written SQLite file."""
    db = await aiosqlite.connect(str(path), isolation_level=None)
    try:
        # busy_timeout first: switching to WAL itself needs the write lock.
        await db.execute_fetchall(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        await db.execute_fetchall("PRAGMA journal_mode = WAL")
        await db.execute_fetchall("PRAGMA synchronous = NORMAL")
        await db.execute_fetchall("PRAGMA foreign_keys = ON")
    except BaseException:
        await db.close()
        raise
    return db


@asynccontextmanager
async def write_transaction(db: aiosqlite.Connection) -> AsyncIterator[aiosqlite.Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any error or cancellation.

    IMMEDIATE takes the write lock up front, so two connections doing read-modify-write
    never both read first and then collide (the classic lost update / SQLITE_BUSY
    deadlock of deferred transactions). Callers sharing one connection must also
    serialise with an ``asyncio.Lock``: SQLite has one transaction per connection.
    """
    try:
        await db.execute_fetchall("BEGIN IMMEDIATE")
        yield db
        await db.execute_fetchall("COMMIT")
    except BaseException:
        # Shielded so a cancelled run still leaves the connection usable. aiosqlite runs
        # statements in order on one thread, so this ROLLBACK lands after anything already
        # queued (even a BEGIN still waiting for the lock when we were cancelled).
        await asyncio.shield(_rollback_quietly(db))
        raise


async def _rollback_quietly(db: aiosqlite.Connection) -> None:
    with contextlib.suppress(sqlite3.OperationalError):  # "no transaction is active"
        await db.execute_fetchall("ROLLBACK")


async def apply_migrations(db: aiosqlite.Connection, table: str, migrations: Sequence[str]) -> int:
    """Apply the not-yet-applied scripts of ``migrations`` (version = index + 1).

    Runs inside one IMMEDIATE transaction, so two processes starting at once cannot both
    apply a migration. Returns the schema version afterwards.
    """
    if not table.isidentifier():
        raise ValueError(f"bad migrations table name {table!r}")
    async with write_transaction(db):
        await db.execute_fetchall(
            f"CREATE TABLE IF NOT EXISTS {table} ("
            " version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL DEFAULT (datetime('now')))"
        )
        rows = await db.execute_fetchall(f"SELECT COALESCE(MAX(version), 0) FROM {table}")
        current = int(next(iter(rows))[0])
        for version, script in enumerate(migrations, start=1):
            if version <= current:
                continue
            for statement in _split_statements(script):
                await db.execute_fetchall(statement)
            await db.execute_fetchall(f"INSERT INTO {table}(version) VALUES (?)", (version,))
            current = version
    return current


def _split_statements(script: str) -> list[str]:
    """Split a migration script on ``;`` (our scripts contain no triggers or literals with ``;``).

    ``executescript`` would be simpler but it COMMITs first, breaking the enclosing
    transaction.
    """
    return [s.strip() for s in script.split(";") if s.strip()]
