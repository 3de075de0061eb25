"""Opening one connection to the SQLite file, and the options of the file's connections.

Why apart: the pragmas every connection gets (busy timeout, WAL on the writer, the
synchronous level, foreign keys, the page cache) and which errors a write may retry
are decided once here; ``database`` only holds and uses the connections.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import aiosqlite


@dataclass(frozen=True, slots=True)
class SqliteOptions:
    readers: int = 3
    #: How long a write keeps retrying a busy or failing database before giving up.
    write_retry_s: float = 10.0
    #: SQLite's own wait for a lock, per attempt (our retry loop wraps it).
    busy_timeout_ms: int = 1000
    #: Page cache per connection (SQLite's default is 2 MiB); each of the 1 + readers
    #: connections holds up to this much, so it bounds RSS as much as speed.
    cache_kib: int = 2_048
    #: How often the file's identity and writability are checked besides before writes.
    file_check_s: float = 1.0
    #: A quiet process settles the live log this long after its last settle
    #: (``storage.sqlite.log_settler``; tests make it short).
    settle_every_s: float = 5.0
    #: A one-off command's process (``agentchat ingest``): while a ``serve`` holds the
    #: file's writer lock, leave the file free between bulk writes for its writer
    #: (``storage.sqlite.group_gap``). Never in a serving process.
    yield_to_writer_group: bool = False


def transient(exc: BaseException) -> bool:
    """Locked, busy, I/O and full-disk errors may pass; constraint errors never will."""
    return isinstance(exc, sqlite3.OperationalError) or (
        isinstance(exc, sqlite3.DatabaseError)
        and not isinstance(exc, sqlite3.IntegrityError | sqlite3.ProgrammingError | sqlite3.InterfaceError)
    )


def busy(exc: BaseException) -> bool:
    """SQLite's "database is locked" (``SQLITE_BUSY``, ``SQLITE_LOCKED`` and their extended
    codes): another connection held what this one needed for longer than ``busy_timeout``.
    Unlike ``transient``, not an SQL error that would fail again the same way."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.OperationalError)
        and isinstance(code, int)
        and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    )


async def switch_to_wal(conn: aiosqlite.Connection, opts: SqliteOptions) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the file.

    SQLite answers this pragma "database is locked" at once, without its busy handler,
    when another connection is opening the same new file at that moment (several
    processes or stores starting together); it is the same wait ``busy_timeout`` would
    have done, so it is retried for as long."""
    deadline = time.monotonic() + max(opts.busy_timeout_ms / 1000, 1.0)
    delay = 0.01
    while True:
        try:
            await conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


async def connect(path: Path, opts: SqliteOptions, *, writer: bool) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        # busy_timeout first: switching to WAL itself needs the write lock.
        await conn.execute(f"PRAGMA busy_timeout = {int(opts.busy_timeout_ms)}")
        if writer:
            await switch_to_wal(conn, opts)
        await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute(f"PRAGMA cache_size = -{int(opts.cache_kib)}")
    except BaseException:
        await conn.close()
        raise
    return conn
