"""A replica frozen inside a transaction does not hold off the others' take-over.

A replica stopped (SIGSTOP, a paused VM) or cut off between two statements of a
transaction keeps its session open and its row locks held: every other replica's claim
of its runs then waits out ``lock_timeout``, fails, and is tried again — for as long as
the replica stays frozen (a CI run of tests/test_replicas.py's paused case waited for
ever). The service sets PostgreSQL's ``idle_in_transaction_session_timeout`` to the run
lease (``app/wiring.py`` → ``storage/open.py``), so PostgreSQL ends such a session and
releases its locks once the replica has lost its leases anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from storage.open import open_storage
from storage.postgres import PostgresStorage
from storage.postgres.database import transient
from storage.records import NewRun
from tests.support.deadline import within
from tests.support.postgres import TestPostgres


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def test_a_transaction_frozen_past_the_lease_gives_up_its_row_locks(pg_url: str) -> None:
    frozen = await open_storage(pg_url, idle_in_transaction_s=1.0)
    other = await open_storage(pg_url)
    assert isinstance(frozen, PostgresStorage) and isinstance(other, PostgresStorage)
    try:
        await frozen.runs.create(NewRun("r1", "c1", "alice", "knowledge", b"{}"))
        locked, thaw = asyncio.Event(), asyncio.Event()

        async def freeze() -> None:
            async with frozen.db.pool.connection() as conn, conn.transaction():
                cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
                assert (await cur.fetchone()) == ("1s",)
                await conn.execute("SELECT 1 FROM runs WHERE id = 'r1' FOR UPDATE")
                locked.set()
                await thaw.wait()  # the client stops here, its transaction open
                await conn.execute("SELECT 1")

        holder = asyncio.create_task(freeze())
        await within(locked.wait(), "the frozen replica's row lock")
        # Another replica writes the row: PostgreSQL ends the frozen session after 1 s, so
        # the write gets the lock within its own lock_timeout (5 s) — without the setting
        # it fails with a lock timeout, and every retry would too.
        async with other.db.pool.connection() as conn:
            await within(
                conn.execute("UPDATE runs SET status = 'running' WHERE id = 'r1'"), "the write past the frozen lock"
            )
        stored = await other.runs.get("r1")
        assert stored is not None and stored.status == "running"
        # The frozen replica learns, when it runs again, that its transaction is gone —
        # an error its writer retries on a new connection (where it meets its lease).
        thaw.set()
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as caught:
            await within(holder, "the thawed transaction's next statement")
        assert transient(caught.value)
    finally:
        await frozen.close()
        await other.close()


async def test_the_default_pool_ends_a_transaction_left_waiting(pg_url: str) -> None:
    storage = await open_storage(pg_url)
    assert isinstance(storage, PostgresStorage)
    try:
        async with storage.db.pool.connection() as conn:
            cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
            assert (await cur.fetchone()) == ("10s",)
    finally:
        await storage.close()
