"""The plain functions that run on a connection's own thread (aiosqlite's worker),
each handed over in one hop by ``SqliteDatabase``.

Why apart: each hop to a connection's thread is a wake-up of that thread and then of the
event loop, so reads, a whole transaction and a whole batch of queued writes are each
one function run there; they take a plain ``sqlite3.Connection`` and never touch the
event loop.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from storage.sqlite.file_guard import DatabaseFileGuard

T = TypeVar("T")

VALUES_ROW = re.compile(r"^(INSERT (?:OR \w+ )?INTO [^(]+\([^)]*\)\s*VALUES\s*)(\((?:\?,\s*)*\?\))$", re.IGNORECASE)
#: SQLite allows 32,766 parameters per statement; keep well below.
MAX_PARAMS = 8_000


def fetchall_sync(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Runs on a reader connection's own thread (``SqliteDatabase.fetchall``)."""
    cur = conn.execute(sql, params)
    try:
        return [tuple(r) for r in cur.fetchall()]
    finally:
        cur.close()


def fetchone_sync(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    """Runs on a reader connection's own thread (``SqliteDatabase.fetchone``)."""
    cur = conn.execute(sql, params)
    try:
        row = cur.fetchone()
        return tuple(row) if row is not None else None
    finally:
        cur.close()


def transaction_sync(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], guard: DatabaseFileGuard) -> T:
    guard.raise_if_unsafe()
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    return result


def transaction_version_sync(
    conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], guard: DatabaseFileGuard
) -> tuple[T, int]:
    """``transaction_sync``, then ``PRAGMA data_version`` read at once after the commit:
    the count another connection's next commit moves (``storage.sqlite.group_gap``)."""
    result = transaction_sync(conn, fn, guard)
    return result, data_version_sync(conn)


def data_version_sync(conn: sqlite3.Connection) -> int:
    """SQLite's count of the commits other connections made to the file, as this
    connection sees it (its own commits do not move it)."""
    row = conn.execute("PRAGMA data_version").fetchone()
    return int(row[0])


def commit_sync(
    conn: sqlite3.Connection, groups: list[tuple[str, list[Sequence[Any]]]], guard: DatabaseFileGuard
) -> None:
    """Runs on the writer connection's own thread (aiosqlite's worker).

    Many rows of one plain ``INSERT … VALUES (?, …)`` become one multi-row statement:
    ``executemany`` releases and retakes the GIL around every row, and with a busy event
    loop each retake can wait a whole switch interval — a burst of tokens from a thousand
    runs would queue behind that convoy. The guard goes first: never a write into a file
    removed or replaced under the server."""
    guard.raise_if_unsafe()
    conn.execute("BEGIN IMMEDIATE")
    try:
        for sql, rows in groups:
            match = VALUES_ROW.match(sql) if len(rows) > 1 else None
            if len(rows) == 1:
                conn.execute(sql, rows[0])
            elif match is None:
                conn.executemany(sql, rows)
            else:
                head, one = match.group(1), match.group(2)
                per = max(1, MAX_PARAMS // max(1, len(rows[0])))
                for i in range(0, len(rows), per):
                    chunk = rows[i : i + per]
                    conn.execute(head + ",".join([one] * len(chunk)), [p for row in chunk for p in row])
        conn.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
