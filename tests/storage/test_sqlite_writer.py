"""The SQLite engine's writer under a database held by another process: retried while
busy, then a loud failure (callers told, health flips) — and healthy again after."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from storage.errors import StorageUnavailable
from storage.sqlite import SqliteOptions, open_sqlite_storage
from storage.sqlite.migrations import MIGRATIONS, VERSION_TABLE


async def _holding_exclusive(path: Path, seconds: float) -> asyncio.Task[None]:
    """Another connection (as another process would) takes the write lock and holds it
    for ``seconds``; returns once the lock is held (the task ends when it is released)."""
    loop = asyncio.get_running_loop()
    held = asyncio.Event()

    def hold() -> None:
        try:
            conn = sqlite3.connect(path, isolation_level=None, timeout=5)
            conn.execute("BEGIN EXCLUSIVE")
        finally:
            loop.call_soon_threadsafe(held.set)
        import time

        time.sleep(seconds)
        conn.execute("ROLLBACK")
        conn.close()

    holder = asyncio.create_task(asyncio.to_thread(hold))
    await held.wait()
    if holder.done():
        holder.result()  # the lock was never taken: say why
    return holder


async def test_a_busy_database_is_waited_for_within_the_retry_window(tmp_path: Path) -> None:
    storage = await open_sqlite_storage(tmp_path / "a.db", SqliteOptions(write_retry_s=10, busy_timeout_ms=50))
    try:
        holder = await _holding_exclusive(storage.db.path, 0.4)
        await storage.conversations.claim("c", "alice")  # waits, then succeeds
        await holder
        assert storage.db.stats.retries >= 1 and storage.db.healthy
        assert await storage.conversations.exists("c", "alice")
    finally:
        await storage.close()


async def test_past_the_retry_window_writes_fail_loudly_then_recover(tmp_path: Path) -> None:
    storage = await open_sqlite_storage(tmp_path / "a.db", SqliteOptions(write_retry_s=0.3, busy_timeout_ms=50))
    try:
        holder = await _holding_exclusive(storage.db.path, 1.3)
        failed: list[BaseException] = []
        storage.db.enqueue([("INSERT INTO conversations(id, user_id) VALUES ('q', 'u')", ())], on_fail=failed.append)
        with pytest.raises(StorageUnavailable):
            await storage.db.commit([("INSERT INTO conversations(id, user_id) VALUES ('x', 'u')", ())])
        assert len(failed) == 1 and isinstance(failed[0], StorageUnavailable)
        assert not storage.db.healthy and (await storage.readiness())["ok"] is False
        assert storage.db.stats.failures >= 1
        await holder
        await storage.conversations.claim("after", "u")
        assert storage.db.healthy and (await storage.readiness())["ok"] is True
        assert not await storage.conversations.exists("q", "u")  # the failed write was not half-done
    finally:
        await storage.close()


async def test_migrations_apply_once_into_one_version_table(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    opened = await asyncio.gather(*(open_sqlite_storage(path) for _ in range(4)))
    for s in opened:
        await s.close()
    conn = sqlite3.connect(path)
    rows = conn.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY version").fetchall()
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
    assert not any(t.endswith("_migrations") for t in tables)
    assert {"runs", "run_events", "messages", "kb_chunks", "keywords", "workflow_drafts"} <= tables


async def test_reads_take_one_hop_return_plain_tuples_and_release_their_reader(tmp_path: Path) -> None:
    """``fetchall``/``fetchone`` run statement, rows and cursor close on the reader's thread
    together; an error in the statement still gives the reader back to the pool."""
    storage = await open_sqlite_storage(tmp_path / "a.db", SqliteOptions(readers=1))
    try:
        db = storage.db
        await db.execute([("CREATE TABLE t(a INTEGER, b TEXT)", ()), ("INSERT INTO t VALUES (1, 'x'), (2, 'y')", ())])
        assert await db.fetchall("SELECT a, b FROM t ORDER BY a") == [(1, "x"), (2, "y")]
        assert await db.fetchone("SELECT b FROM t WHERE a = ?", (2,)) == ("y",)
        assert await db.fetchone("SELECT b FROM t WHERE a = ?", (3,)) is None
        with pytest.raises(sqlite3.OperationalError):
            await db.fetchall("SELECT nope FROM t")
        # The one reader came back: these would wait forever otherwise.
        rows = await asyncio.wait_for(asyncio.gather(*(db.fetchone("SELECT count(*) FROM t") for _ in range(5))), 10)
        assert rows == [(2,)] * 5
    finally:
        await storage.close()


async def test_a_transaction_cancelled_while_it_waits_for_the_lock_leaves_no_coroutine_behind(tmp_path: Path) -> None:
    """A caller cancelled while another transaction holds the writer's lock (a shutdown
    cancelling a run mid-write) must not leave a transaction coroutine created and never
    awaited: the transaction is only built once the lock is held."""
    import gc
    import warnings

    from storage.sqlite.database import SqliteDatabase

    db = await SqliteDatabase.open(tmp_path / "db.sqlite3")
    try:
        await db.execute([("CREATE TABLE t (x INTEGER)", ())])
        async with db._write_lock:  # another transaction holds the writer
            waiting = asyncio.create_task(db.execute([("INSERT INTO t VALUES (1)", ())]))
            await asyncio.sleep(0)  # let it reach the lock
            waiting.cancel()
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                with pytest.raises(asyncio.CancelledError):
                    await asyncio.wait_for(waiting, 10)
                gc.collect()
        assert not [w for w in seen if "never awaited" in str(w.message)], [str(w.message) for w in seen]
        assert await db.fetchall("SELECT x FROM t") == []
    finally:
        await db.close()


async def test_a_close_cancelled_half_way_still_closes_every_connection(tmp_path: Path) -> None:
    """Ctrl-C or SIGTERM during a CLI command's last close cancels it while the writer
    commits what is queued. The rest of the close must still run: an aiosqlite
    connection left open keeps a thread the interpreter waits for at exit, and the
    command said "terminated" and never ended."""
    from storage.sqlite.database import SqliteDatabase

    db = await SqliteDatabase.open(tmp_path / "db.sqlite3")
    connections = [db._writer, *db._readers]
    assert all(c._thread is not None and c._thread.is_alive() for c in connections)
    flushing, release = asyncio.Event(), asyncio.Event()
    queue_close = db._queue.close

    async def slow_queue_close() -> None:  # the writer still committing what is queued
        flushing.set()
        await release.wait()
        await queue_close()

    db._queue.close = slow_queue_close  # type: ignore[method-assign]
    closing = asyncio.create_task(db.close())
    await asyncio.wait_for(flushing.wait(), 10)
    closing.cancel()
    await asyncio.sleep(0)
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(closing, 30)
    for c in connections:  # each connection's thread has ended
        assert c._thread is not None
        await asyncio.wait_for(asyncio.to_thread(c._thread.join, 10), 15)
        assert not c._thread.is_alive()


async def test_an_open_cancelled_after_connecting_closes_its_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel while the open records the files' identity (the last step, after every
    connection is made) closes them: their aiosqlite threads kept the interpreter alive
    at exit (the review's reproduction: SIGTERM to a CLI command while it opened)."""
    import threading

    from storage.sqlite import file_guard

    entered, release = threading.Event(), threading.Event()
    real_check = file_guard.DatabaseFileGuard.check

    def held_check(self: file_guard.DatabaseFileGuard) -> str | None:
        entered.set()
        release.wait(30)
        return real_check(self)

    monkeypatch.setattr(file_guard.DatabaseFileGuard, "check", held_check)
    before = set(threading.enumerate())  # connection threads started from here on are this open's
    from storage.sqlite.database import SqliteDatabase

    opening = asyncio.create_task(SqliteDatabase.open(tmp_path / "db.sqlite3"))
    assert await asyncio.wait_for(asyncio.to_thread(entered.wait, 30), 35)
    started = [t for t in threading.enumerate() if t not in before and "_connection_worker_thread" in t.name]
    assert started  # the writer's and the readers' threads (aiosqlite names them after their function)
    opening.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(opening, 30)
    for t in started:  # each connection's thread ends once its connection is closed
        await asyncio.wait_for(asyncio.to_thread(t.join, 10), 15)
        assert not t.is_alive(), t.name
