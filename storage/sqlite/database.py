"""One SQLite file, shared by every store: one writer connection, a few readers.

Why this shape:

* WAL lets readers run beside the single writer, so reads borrow one of a few reader
  connections (aiosqlite runs each connection on its own thread) and never wait on a
  write.
* Every write goes through the one writer connection under one lock, so our own
  transactions never collide and ``BEGIN IMMEDIATE`` read-modify-writes (the next
  message ``seq``) cannot race.
* Appends that must not slow the stream (run events, checkpoints, the tool-call log)
  are *items* on a queue that one task commits in batches. An item's statements always
  commit together; ``on_commit`` tells its producer when it is durable (followers are
  shown an event only then), ``on_fail`` when it never will be.
* A busy or unwritable database is retried with backoff for ``write_retry_s``; after
  that the failure is loud: the waiting callers get ``StorageUnavailable``, ``healthy``
  turns false (``/readyz``), and ``stats`` counts it. Nothing is dropped silently.
* The file is checked, not assumed (``file_guard.py``): before every write transaction
  and every ``file_check_s``, the database, ``-wal`` and ``-shm`` must still be the files
  opened, and writable. Removed or replaced, nothing more is written (a write would land
  in a file that vanishes with the process) — every write, every read (from then on:
  the flag, not a ``stat`` per query) and ``/readyz`` say ``storage_unavailable``
  (``DatabaseLost``) until a restart, and ``on_lost`` ends the live runs at once.

A connection is opened with its pragmas in ``connections`` (with ``SqliteOptions``); the
plain functions each hop runs on a connection's thread are ``thread_calls``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import aiosqlite

from storage.close_bounds import DATABASE_CLOSE_S
from storage.errors import DatabaseLost, StorageUnavailable
from storage.sqlite.connections import SqliteOptions, connect, transient
from storage.sqlite.file_guard import DatabaseFileGuard
from storage.sqlite.group_gap import GroupGap
from storage.sqlite.thread_calls import (
    commit_sync,
    data_version_sync,
    fetchall_sync,
    fetchone_sync,
    transaction_sync,
    transaction_version_sync,
)
from storage.stores.run_rows import UNFINISHED_SQL
from storage.writer import (
    OrderedWriter,
    QueuedWrites,
    Statement,
    WriteHealth,
    WriteItem,
    finish_even_if_cancelled,
    group_consecutive,
    retrying,
)

log = logging.getLogger("agentchat.storage")

T = TypeVar("T")

#: How long a cancelled ``close`` still waits for the connections to close: past the
#: writer's own bound for committing what is queued (``AGENT_DB_WRITE_RETRY_S`` + 5 s);
#: named in ``storage.close_bounds``, which the close budget reads without this module.
CLOSE_AFTER_CANCEL_S = DATABASE_CLOSE_S


def _create_private(path: Path) -> None:
    """Create the empty database file readable by this user only (``0600``), as the
    stream key beside it is: it holds every user's conversations, runs and attachments,
    and with the usual umask (022) SQLite made it, and its ``-wal``/``-shm`` (which SQLite
    creates with the database file's mode), readable by every local account. A file that
    exists already is left as its owner made it; one made meanwhile by another process is
    that process's."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


class SqliteDatabase(QueuedWrites):
    """The file, its connections, and the ordered background writer."""

    def __init__(
        self, path: Path, writer: aiosqlite.Connection, readers: list[aiosqlite.Connection], opts: SqliteOptions
    ) -> None:
        self.path = path
        self.opts = opts
        self.health = WriteHealth()
        self._writer = writer
        self._readers = readers
        self._idle: asyncio.Queue[aiosqlite.Connection] = asyncio.Queue()
        for r in readers:
            self._idle.put_nowait(r)
        self._write_lock = asyncio.Lock()
        #: Taken by a bulk write (a knowledge-base write) before ``_write_lock``, so at
        #: most one of them is ever queued there: a run's events wait for one such write
        #: at most, never for a second one queued ahead of them (``transact_sync``).
        self._bulk_turn = asyncio.Lock()
        #: A one-off command's gaps between its bulk writes for a serving group's writer.
        self.group_gap = GroupGap(path) if opts.yield_to_writer_group else None
        self._queue = OrderedWriter(
            lambda batch: self._locked(lambda: self._commit_items(batch)),
            transient=transient,
            retry_s=opts.write_retry_s,
            health=self.health,
        )
        self._closed = False
        self.guard = DatabaseFileGuard(path)
        #: Told (on the event loop) when the file is found removed or replaced.
        self.on_lost: list[Callable[[StorageUnavailable], None]] = []
        self._loop = asyncio.get_running_loop()
        self.guard.on_lost.append(self._lost_from_thread)
        self._watch_task: asyncio.Task[None] | None = None

    @classmethod
    async def open(cls, path: str | Path, opts: SqliteOptions | None = None) -> SqliteDatabase:
        """Open the file (creating its folder); migrations are the caller's next step."""
        opts = opts or SqliteOptions()
        # aiosqlite logs every statement with its parameters at DEBUG: user messages and
        # the credentials a live run keeps in its input. Never let that reach a log.
        logging.getLogger("aiosqlite").setLevel(logging.INFO)
        p = Path(path)
        if str(p) == ":memory:":
            raise ValueError("storage needs a file path (the writer and readers share it)")
        p.parent.mkdir(parents=True, exist_ok=True)
        if not await asyncio.to_thread(p.exists):
            # The normal first start — or a file removed while no server ran: say so.
            log.warning("creating a new database", extra={"path": str(p.resolve())})
            await asyncio.to_thread(_create_private, p)
        writer = await connect(p, opts, writer=True)
        readers: list[aiosqlite.Connection] = []
        try:
            for _ in range(max(1, opts.readers)):
                readers.append(await connect(p, opts, writer=False))
            db = cls(p, writer, readers, opts)
            await asyncio.to_thread(db.guard.check)  # records the files' identity as opened
        except BaseException:  # a cancel too: aiosqlite's threads would keep the process alive at exit
            for r in readers:
                await r.close()
            await writer.close()
            raise
        return db

    def start(self) -> None:
        """Start the background writer and the file watch (after migrations)."""
        super().start()
        if self._watch_task is None and self.opts.file_check_s > 0:
            self._watch_task = asyncio.create_task(self._watch_file(), name="storage-file-watch")

    async def _watch_file(self) -> None:
        while not self._closed and self.guard.lost is None:
            await asyncio.sleep(self.opts.file_check_s)
            await asyncio.to_thread(self.guard.check)

    def _lost_from_thread(self, reason: str) -> None:
        exc = DatabaseLost(f"database file {self.path}: {reason} (restart the server)")
        self._loop.call_soon_threadsafe(self._announce_lost, exc)

    def _announce_lost(self, exc: StorageUnavailable) -> None:
        self.health.gave_up(exc)
        for listener in list(self.on_lost):
            try:
                listener(exc)
            except Exception:
                log.exception("database-lost listener raised")

    async def close(self) -> None:
        """Close everything, also when the caller is cancelled meanwhile (Ctrl-C or SIGTERM
        during a CLI command's last close, a server's shutdown): the close runs as its own
        task and is waited for (at most ``CLOSE_AFTER_CANCEL_S``) before the cancel goes on.
        A close cut half-way left the aiosqlite connections open, and their threads are not
        daemons: the interpreter then waited for them at exit for ever."""
        if self._closed:
            return
        self._closed = True
        closing = asyncio.create_task(self._close(), name="sqlite-close")
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + CLOSE_AFTER_CANCEL_S
            while not closing.done() and (left := deadline - loop.time()) > 0:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait({closing}, timeout=left)
            if closing.done() and not closing.cancelled() and closing.exception() is not None:
                log.error("closing the database after a cancel failed", exc_info=closing.exception())
            raise

    async def _close(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
        await self._queue.close()  # commits what is queued; anything left fails loudly
        async with self._write_lock:
            if self.guard.lost is None:  # never a write into a file removed or replaced
                with contextlib.suppress(sqlite3.Error):
                    await self._writer.execute("PRAGMA optimize")
            await self._writer.close()
        for r in self._readers:
            await r.close()
        await asyncio.to_thread(self.guard.set_aside_orphans)

    # --- reads --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[aiosqlite.Connection]:
        """Borrow a reader connection for several statements (temp tables, cursors).
        Refused (``DatabaseLost``) once the file is known removed or replaced: the
        readers still see the unlinked file, whose runs and conversations are no longer
        the database's."""
        self.guard.raise_if_lost()
        conn = await self._idle.get()
        try:
            yield conn
        finally:
            self._idle.put_nowait(conn)

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """All rows of one statement, in ONE hop to a reader's thread (statement, rows
        and cursor close together): each hop is a wake-up of that thread and then of
        the event loop, and a search makes several of these reads."""
        async with self.reading() as conn:
            rows: list[tuple[Any, ...]] = await conn._execute(fetchall_sync, conn._conn, sql, params)
            return rows

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of one statement (``None`` when there is none), in one hop."""
        async with self.reading() as conn:
            row: tuple[Any, ...] | None = await conn._execute(fetchone_sync, conn._conn, sql, params)
            return row

    # --- transactions on the writer ------------------------------------------------

    async def transact(
        self,
        fn: Callable[[aiosqlite.Connection], Awaitable[T]],
        *,
        immediate: bool = True,
        deadline: float | None = None,
    ) -> T:
        """Run ``fn`` inside one write transaction and commit; retried as a whole while
        the database is busy (so ``fn`` must only touch the database). Raises
        ``StorageUnavailable`` after ``write_retry_s``; other errors propagate at once.
        With a ``deadline`` (``time.monotonic()``: a request not yet acknowledged,
        ``app/server/storage_budget.py``) the retries and the wait for the writer end there."""
        return await self._retrying(lambda: self._run_transaction(fn, immediate), deadline)

    async def transact_sync(
        self, fn: Callable[[sqlite3.Connection], T], *, deadline: float | None = None, bulk: bool = False
    ) -> T:
        """Like ``transact``, for a plain function run on the writer's own thread: the
        whole transaction is one hop, which keeps hot paths (admitting a run, before its
        2xx) short when the event loop is busy.

        ``bulk``: a long write (a knowledge-base write) that waits its turn behind any
        other bulk write before it queues for the writer. No run event commits while a
        write runs; without this, an ingest's next write (two are in flight) queued on
        the writer ahead of the events that came during the current one, and every live
        stream waited for both.

        In a one-off command beside a ``serve`` (``SqliteOptions.yield_to_writer_group``)
        the next bulk write also waits for the gap left after this one
        (``storage.sqlite.group_gap``): the server's writer does not share this lock."""
        if not bulk:
            return await self._retrying(lambda: self._run_sync_transaction(fn), deadline)
        async with self._bulk_turn:
            gap = self.group_gap
            if gap is None:
                return await self._retrying(lambda: self._run_sync_transaction(fn), deadline)
            began = time.monotonic()
            result, version = await self._retrying(lambda: self._run_versioned_transaction(fn), deadline)
            await gap.after_write(version, time.monotonic() - began, self._data_version, self._live_runs)
            return result

    async def _run_sync_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        result: T = await self._writer._execute(transaction_sync, self._writer._conn, fn, self.guard)
        self._succeeded()
        return result

    async def _run_versioned_transaction(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[T, int]:
        done: tuple[T, int] = await self._writer._execute(transaction_version_sync, self._writer._conn, fn, self.guard)
        self._succeeded()
        return done

    async def _live_runs(self) -> bool:
        """Whether a run in the file is not finished (a serving group's streams)."""
        row = await self.fetchone(f"SELECT EXISTS (SELECT 1 FROM runs WHERE status IN {UNFINISHED_SQL})")
        return bool(row and row[0])

    async def _data_version(self) -> int:
        async with self._write_lock:  # never inside another coroutine's transaction
            version: int = await self._writer._execute(data_version_sync, self._writer._conn)
            return version

    async def _retrying(self, attempt_once: Callable[[], Awaitable[T]], deadline: float | None = None) -> T:
        return await retrying(
            lambda: self._locked(attempt_once, deadline),
            transient=transient,
            retry_s=self.opts.write_retry_s,
            health=self.health,
            deadline=deadline,
        )

    async def transact_raw(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
        """Run ``fn`` on the writer under the lock, *without* a transaction around it
        (``fn`` manages its own, e.g. one per migration step). For start-up work only."""
        async with self._write_lock:
            await self._writer._execute(self.guard.raise_if_unsafe)
            return await fn(self._writer)

    async def execute(self, statements: Sequence[Statement]) -> None:
        """Commit ``statements`` now, in one transaction (retried like ``transact``)."""

        async def run(conn: aiosqlite.Connection) -> None:
            for sql, params in statements:
                await conn.execute(sql, params)

        await self.transact(run)

    async def _locked(self, work: Callable[[], Awaitable[T]], deadline: float | None = None) -> T:
        """Run one transaction on the writer under the lock. A cancelled caller still
        lets it finish (commit or roll back) before the lock is released, so the next
        transaction never finds one open. ``work`` is called once the lock is held: a
        caller cancelled while it waits leaves no coroutine behind never awaited. With a
        ``deadline``, the wait for the lock (the writer retrying a busy file for
        ``write_retry_s``) ends there: the busy error the retry loop gives up on."""
        if deadline is not None:
            try:
                await asyncio.wait_for(self._write_lock.acquire(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise sqlite3.OperationalError("database is locked (this process's writer is busy)") from None
            try:
                return await finish_even_if_cancelled(work())
            finally:
                self._write_lock.release()
        async with self._write_lock:
            return await finish_even_if_cancelled(work())

    async def _run_transaction(self, fn: Callable[[aiosqlite.Connection], Awaitable[T]], immediate: bool) -> T:
        conn = self._writer
        await conn._execute(self.guard.raise_if_unsafe)  # on the writer's thread, just before
        await conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            result = await fn(conn)
            await conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            raise
        self._succeeded()
        return result

    # --- the ordered background writer (storage/writer.py) ---------------------------

    async def _commit_items(self, batch: Sequence[WriteItem]) -> None:
        groups = group_consecutive(s for item in batch for s in item.statements)
        # The whole batch — BEGIN, one executemany per run of identical statements, COMMIT —
        # in ONE hop to the connection's thread: under load, each hop is a wait for the
        # event loop, and the stream is shown an event only after this commit.
        await self._writer._execute(commit_sync, self._writer._conn, groups, self.guard)
        self._succeeded()

    def _succeeded(self) -> None:
        self.health.succeeded()

    async def readiness(self) -> dict[str, Any]:
        problem = await asyncio.to_thread(self.guard.check)
        if problem is not None:
            what = "restart the server" if self.guard.lost else "writes are refused until it is writable"
            return {"ok": False, "engine": "sqlite", "detail": f"database file {self.path}: {problem} ({what})"}
        try:
            await asyncio.wait_for(self.fetchone("SELECT 1"), timeout=3)
        except Exception as exc:
            return {"ok": False, "engine": "sqlite", "detail": f"read failed: {exc}"}
        if not self.healthy:
            return {"ok": False, "engine": "sqlite", "detail": f"writes are failing: {self.last_error}"}
        return {
            "ok": True,
            "engine": "sqlite",
            "queued_writes": self.queued,
            "write_retries": self.stats.retries,
            "write_failures": self.stats.failures,
        }
