"""Opening one connection to the SQLite file, and the options of the file's connections.

Why apart: the pragmas every connection gets (busy timeout, WAL on the writer, the
synchronous level, foreign keys, the page cache) and which errors a write may retry
are decided once here; ``database`` only holds and uses the connections.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiosqlite

from storage.writer import backoff

log = logging.getLogger("agentchat.storage")
T = TypeVar("T")


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


async def switch_to_wal(conn: aiosqlite.Connection, opts: SqliteOptions, path: Path) -> None:
    """``PRAGMA journal_mode = WAL``, retried while another connection holds the file,
    for ``write_retry_s`` as every other write of the start-up is (``when_free``).

    SQLite answers this pragma "database is locked" at once, without its busy handler,
    when another connection is opening the same new file at that moment (several
    processes or stores starting together), and after its busy timeout while another
    process holds the file (a one-off command's write, an ``sqlite3`` shell, a backup).
    That was retried for ~1 s only, so the start-up failed ("database is locked", exit 3)
    where the migration check right after it would have waited."""
    await when_free(
        lambda: conn.execute("PRAGMA journal_mode = WAL"),
        path,
        max(opts.write_retry_s, opts.busy_timeout_ms / 1000),
    )


async def when_free(fn: Callable[[], Awaitable[T]], path: Path, wait_s: float) -> T:
    """``fn()``, tried again while another connection holds the file (``busy``), for up
    to ``wait_s`` with the writer's backoff; then its error. One WARNING names the file
    at the first wait: the start-up's steps (the WAL switch, each migration step, the
    writer's set-up) wait for another process's write this way instead of failing after
    SQLite's busy timeout."""
    deadline = time.monotonic() + wait_s
    attempt = 0
    while True:
        try:
            return await fn()
        except sqlite3.OperationalError as exc:
            if not busy(exc) or time.monotonic() >= deadline:
                raise
        attempt += 1
        if attempt == 1:
            log.warning(
                "the database is busy: another connection is writing it; the start-up waits for it",
                extra={"path": str(path), "up_to_s": wait_s},
            )
        await asyncio.sleep(backoff(attempt))


async def connect(path: Path, opts: SqliteOptions, *, writer: bool) -> aiosqlite.Connection:
    conn = await aiosqlite.connect(path, isolation_level=None)
    try:
        # busy_timeout first: switching to WAL itself needs the write lock.
        await conn.execute(f"PRAGMA busy_timeout = {int(opts.busy_timeout_ms)}")
        if writer:
            await switch_to_wal(conn, opts, path)
        await conn.execute("PRAGMA synchronous = NORMAL")
        await conn.execute("PRAGMA foreign_keys = ON")
        await conn.execute(f"PRAGMA cache_size = -{int(opts.cache_kib)}")
    except BaseException:
        await conn.close()
        raise
    return conn
