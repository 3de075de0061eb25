"""The app's SQLite file: migrations, one writer connection, and a batched background writer.

Appends that must not slow the stream (run events, the tool-call log) go through
``Database.enqueue``: a single task drains the queue and commits in batches, so the
agent never waits on the disk. Reads use a separate connection (WAL lets them run
beside the writer). Other rooms (knowledge, drafts, keywords) open their own
connections to the same file and keep their own migration tables.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import aiosqlite

log = logging.getLogger("agentchat.db")

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE conversations (
            id TEXT PRIMARY KEY,
            user_id TEXT NOT NULL,
            created_at REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0)),
            updated_at REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0))
        );
        CREATE INDEX conversations_user ON conversations(user_id, updated_at);
        CREATE TABLE messages (
            conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL,
            payload BLOB NOT NULL,
            created_at REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0)),
            PRIMARY KEY (conversation_id, seq)
        );
        CREATE TABLE tool_calls (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            conversation_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            tool_use_id TEXT NOT NULL,
            tool_name TEXT NOT NULL,
            parameters BLOB NOT NULL,
            result TEXT,
            status TEXT NOT NULL CHECK (status IN ('success', 'failure', 'retry', 'rejected')),
            error TEXT,
            duration_ms REAL NOT NULL,
            retry_count INTEGER NOT NULL DEFAULT 0,
            created_at REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0))
        );
        CREATE INDEX tool_calls_run ON tool_calls(run_id);
        CREATE INDEX tool_calls_name_time ON tool_calls(tool_name, created_at);
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            context_type TEXT NOT NULL,
            status TEXT NOT NULL,
            created_at REAL NOT NULL DEFAULT (((julianday('now') - 2440587.5) * 86400.0)),
            finished_at REAL
        );
        CREATE INDEX runs_user ON runs(user_id, created_at);
        CREATE TABLE run_events (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            event TEXT NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID;
        """,
    ),
)


async def connect(path: Path) -> aiosqlite.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = await aiosqlite.connect(path, isolation_level=None)
    await conn.execute("PRAGMA journal_mode=WAL")
    await conn.execute("PRAGMA synchronous=NORMAL")
    await conn.execute("PRAGMA busy_timeout=5000")
    await conn.execute("PRAGMA foreign_keys=ON")
    return conn


async def apply_migrations(conn: aiosqlite.Connection, table: str, migrations: Sequence[tuple[int, str]]) -> None:
    await conn.execute(f"CREATE TABLE IF NOT EXISTS {table} (version INTEGER PRIMARY KEY, applied_at REAL)")
    async with conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {table}") as cur:
        row = await cur.fetchone()
    current = int(row[0]) if row else 0
    for version, sql in migrations:
        if version <= current:
            continue
        await conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split_sql(sql):
                await conn.execute(statement)
            await conn.execute(f"INSERT INTO {table}(version, applied_at) VALUES (?, ((julianday('now') - 2440587.5) * 86400.0))", (version,))
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        log.info("applied migration", extra={"table": table, "version": version})


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


Write = tuple[str, Sequence[Any]]


def _group_consecutive(batch: Sequence[Write]) -> list[tuple[str, list[Sequence[Any]]]]:
    """Group writes into runs of the same SQL, keeping their order."""
    groups: list[tuple[str, list[Sequence[Any]]]] = []
    for sql, params in batch:
        if groups and groups[-1][0] == sql:
            groups[-1][1].append(params)
        else:
            groups.append((sql, [params]))
    return groups


class Database:
    """Owns the writer connection, a reader connection and the background write queue."""

    def __init__(self, path: Path, writer: aiosqlite.Connection, reader: aiosqlite.Connection) -> None:
        self.path = path
        self.writer = writer
        self.reader = reader
        self._queue: asyncio.Queue[Write | asyncio.Future[None]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: Path) -> Database:
        writer = await connect(path)
        await apply_migrations(writer, "app_migrations", MIGRATIONS)
        reader = await connect(path)
        db = cls(path, writer, reader)
        db._task = asyncio.create_task(db._drain(), name="db-writer")
        return db

    async def close(self) -> None:
        await self.flush()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.reader.close()
        await self.writer.close()

    # --- background writes ---------------------------------------------------------

    def enqueue(self, sql: str, params: Sequence[Any]) -> None:
        """Queue a write; it is committed shortly, in a batch, off the caller's path."""
        self._queue.put_nowait((sql, params))

    async def flush(self) -> None:
        """Wait until everything queued so far is committed."""
        if self._task is None or self._task.done():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(fut)
        await fut

    async def _drain(self) -> None:
        while True:
            item = await self._queue.get()
            batch: list[Write] = []
            waiters: list[asyncio.Future[None]] = []
            while True:
                if isinstance(item, asyncio.Future):
                    waiters.append(item)
                else:
                    batch.append(item)
                if len(batch) >= 500 or self._queue.empty():
                    break
                item = self._queue.get_nowait()
            if batch:
                try:
                    async with self._write_lock:
                        await self.writer.execute("BEGIN")
                        # One thread hop per run of identical statements, not per row.
                        for sql, rows in _group_consecutive(batch):
                            await self.writer.executemany(sql, rows)
                        await self.writer.execute("COMMIT")
                except Exception:
                    log.exception("background write batch failed", extra={"size": len(batch)})
                    try:
                        await self.writer.execute("ROLLBACK")
                    except Exception:
                        pass
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    # --- direct writes (short transactions) -------------------------------------------

    async def write(self, statements: Iterable[Write]) -> None:
        async with self._write_lock:
            await self.writer.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    await self.writer.execute(sql, params)
                await self.writer.execute("COMMIT")
            except BaseException:
                await self.writer.execute("ROLLBACK")
                raise

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        async with self.reader.execute(sql, params) as cur:
            return list(await cur.fetchall())

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        async with self.reader.execute(sql, params) as cur:
            row = await cur.fetchone()
            return tuple(row) if row is not None else None
