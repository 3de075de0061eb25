"""The PostgreSQL bucket graphs' background builds end well however they end
(``storage/postgres/kb_graph_builds.py``: ``GraphUpkeep.stop``; ``kb_graph_queue``'s worker).

- A caller of ``stop`` (the storage's close) that is itself cancelled meanwhile - a
  server's shutdown cancelled - stays cancelled, once the build it stops has ended (on
  the server too). ``stop`` used to swallow that cancel with the worker's.
- A worker that fails (its ``changed`` callback raising) or whose cancel on the server
  fails (the cancel request timing out) tells the waiters of the build it ran and of the
  queued ones - the error, or ``False`` - where it used to leave them waiting for ever (a
  bulk load's end among them), and a failed cancel request no longer makes the storage's
  close raise.

A build is held in a known phase without timing anything: another session keeps a
write transaction open on ``kb_chunks``, which a concurrent build waits for.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import psycopg
import pytest

from knowledge.buckets import typed_values
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.kb_graph_builds import GraphUpkeep
from storage.postgres.kb_graph_queue import APPLICATION_NAME, DDL_LOCK
from tests.storage.test_kb_graph_builds_pg import DIM, _doc
from tests.support.deadline import until, within
from tests.support.postgres import TestPostgres

THRESHOLD = 50
Conn = psycopg.AsyncConnection[tuple[object, ...]]


@pytest.fixture
async def storage(pg_server: TestPostgres) -> AsyncIterator[PostgresStorage]:
    with pg_server.database() as url:
        opened = await open_postgres_storage(url)
        assert await asyncio.wait_for(opened.kb_index.graph_repair(), 60) == []
        try:
            yield opened
        finally:
            await asyncio.wait_for(opened.close(), 60)


@pytest.fixture
async def observer(storage: PostgresStorage) -> AsyncIterator[Conn]:
    conn = await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True, connect_timeout=10)
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture
async def holder(storage: PostgresStorage) -> AsyncIterator[Conn]:
    """An open write on ``kb_chunks``: every concurrent build waits for it."""
    conn = await psycopg.AsyncConnection.connect(storage.db.url, connect_timeout=10)
    try:
        yield conn
    finally:
        await conn.close()


async def fill(storage: PostgresStorage, bucket: str, seed: int) -> None:
    """``bucket`` past the threshold; no build queued by the writes themselves."""
    rng = np.random.default_rng(seed)
    kb = storage.kb_index
    kb.exact_scope_vectors = 10**9
    await kb.create_bucket(bucket, {}, typed_row=typed_values)
    docs = [_doc(f"{bucket}{i}", rng.normal(size=(1, DIM))) for i in range(THRESHOLD + 5)]
    await asyncio.wait_for(kb.write_documents(bucket, {}, docs), 30)


async def sessions(conn: Conn, *, waiting: bool = False) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
        + (" AND wait_event_type = 'Lock'" if waiting else ""),
        (APPLICATION_NAME,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0  # type: ignore[call-overload]


async def test_a_cancelled_caller_of_stop_stays_cancelled_once_the_build_has_ended(
    storage: PostgresStorage, observer: Conn, holder: Conn
) -> None:
    upkeep = GraphUpkeep(storage.db, lambda: THRESHOLD)
    await fill(storage, "big", 1)
    await holder.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
    built = upkeep.request(DIM, "big")
    await until(lambda: sessions(observer, waiting=True), "the build waiting for the open write")
    worker = upkeep._worker
    assert worker is not None
    stopping = asyncio.create_task(upkeep.stop())
    for _ in range(100):  # turns of the loop, no time: until stop has cancelled the worker
        if worker.cancelling():
            break
        await asyncio.sleep(0)
    assert worker.cancelling() and not worker.done()
    stopping.cancel()  # the caller is cancelled while stop waits for the build to end
    await within(asyncio.wait({stopping}), "stop, cancelled")
    assert stopping.cancelled(), "stop swallowed its caller's cancel"
    assert worker.done()
    assert await within(built, "the build's answer") is False
    # Cancelled on the server, its session closed: the backend leaves pg_stat_activity a
    # moment after the client has closed the connection, so this waits for it.
    await until(lambda: no_sessions(observer), "the build's session gone from the server")


async def test_a_caller_closing_because_it_was_cancelled_gets_its_whole_stop(
    storage: PostgresStorage, observer: Conn, holder: Conn
) -> None:
    """The other side: a command cancelled (SIGTERM) that stops the builds in its cancel's
    handler - its ``cancelling()`` already counts that cancel - gets the whole stop, not
    a second ``CancelledError`` cutting its close short."""
    upkeep = GraphUpkeep(storage.db, lambda: THRESHOLD)
    await fill(storage, "big", 6)
    await holder.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
    built = upkeep.request(DIM, "big")
    await until(lambda: sessions(observer, waiting=True), "the build waiting for the open write")
    stopped = asyncio.Event()
    started = asyncio.Event()

    async def command() -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await upkeep.stop()  # the close its cancel starts
            stopped.set()
            raise

    task = asyncio.create_task(command())
    await within(started.wait(), "the command running")
    task.cancel()
    await within(asyncio.wait({task}), "the command's close")
    assert task.cancelled() and stopped.is_set()
    assert await within(built, "the build's answer") is False
    await until(lambda: no_sessions(observer), "the build's session gone from the server")


async def test_a_worker_that_fails_tells_its_waiters_and_the_queued_ones(storage: PostgresStorage) -> None:
    def changed() -> None:
        raise RuntimeError("the searches' cache is gone")

    upkeep = GraphUpkeep(storage.db, lambda: THRESHOLD, changed=changed)
    await fill(storage, "one", 2)
    await fill(storage, "two", 3)
    first, second = upkeep.request(DIM, "one"), upkeep.request(DIM, "two")
    try:
        await within(asyncio.wait({first, second}), "the builds' answers")
        for fut in (first, second):
            with pytest.raises(RuntimeError, match="cache is gone"):
                fut.result()
        assert upkeep._jobs == {}
        # The next request starts a worker again (and tells its waiter the same way).
        third = upkeep.request(DIM, "two")
        await within(asyncio.wait({third}), "the next build's answer")
        with pytest.raises(RuntimeError, match="cache is gone"):
            third.result()
    finally:
        await within(upkeep.stop(), "stop")


async def test_a_failed_cancel_on_the_server_still_answers_every_waiter(
    storage: PostgresStorage, observer: Conn, holder: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker waits for the DDL lock (another replica's build holds it: here another
    session) when the close comes, and the cancel request to the server times out (the
    server unreachable by then): the close ends, and both waiters hear ``False``. It used
    to raise the cancel request's error out of ``stop`` (the storage's close) and leave
    both waiting for ever."""
    upkeep = GraphUpkeep(storage.db, lambda: THRESHOLD)
    upkeep.lock_poll_s = 0.05
    await fill(storage, "one", 4)
    await fill(storage, "two", 5)
    await holder.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (DDL_LOCK,))
    running, queued = upkeep.request(DIM, "one"), upkeep.request(DIM, "two")
    await until(lambda: tried_the_lock(observer), "the worker polling the DDL lock")

    async def unreachable(self: psycopg.AsyncConnection[object], *, timeout: float = 30.0) -> None:
        raise psycopg.errors.CancellationTimeout("cancellation timeout expired")

    monkeypatch.setattr(psycopg.AsyncConnection, "cancel_safe", unreachable)
    await within(upkeep.stop(), "stop")  # it used to raise the cancel request's error
    assert await within(running, "the running build's answer") is False
    assert await within(queued, "the queued build's answer") is False
    assert upkeep._jobs == {}
    await until(lambda: no_sessions(observer), "the worker's session closed")


async def tried_the_lock(conn: Conn) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
        " AND query LIKE '%%pg_try_advisory_lock%%'",
        (APPLICATION_NAME,),
    )
    row = await cur.fetchone()
    return bool(row and row[0])


async def no_sessions(conn: Conn) -> bool:
    return await sessions(conn) == 0
