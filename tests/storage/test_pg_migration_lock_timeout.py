"""PostgreSQL migrations never wait forever on a lock (``storage.postgres.lock_waits``).

Step 25 builds a unique index on ``kb_chunks``: it needs a SHARE lock, which a writer's
open transaction (ROW EXCLUSIVE, held here by another real session) keeps it from
taking. Each attempt waits ``lock_timeout``, is rolled back, logged with the lock and its
holder, and tried again; past the last attempt start-up fails with
``MigrationLockTimeout`` naming them, with nothing of the step applied. When the holder
ends its transaction between attempts, the migration completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg
import pytest

from storage.errors import StorageUnavailable
from storage.postgres.lock_waits import LockRetries, MigrationLockTimeout
from storage.postgres.migrations import MIGRATIONS, migrate
from tests.support.postgres import TestPostgres
from tests.support.tcp_cut import CuttableRelay

pytestmark = pytest.mark.postgres

LAST = MIGRATIONS[-1]
#: The step made pending again: its unique index on kb_chunks needs a SHARE lock. Named
#: by its number, not as the last step (migration 26 came after it).
STEP = next(m for m in MIGRATIONS if m.version == 25)
#: Short waits; the probe reads the wait at half of it.
RETRIES = LockRetries(lock_timeout_ms=1_000, attempts=2, delay_s=0.05)


async def _step_pending(url: str) -> None:
    """Make step 25 (the unique index on kb_chunks) pending again: its statements are
    written to run again on a migrated database, the later steps stay applied."""
    assert any("CREATE UNIQUE INDEX" in s and "ON kb_chunks" in s for s in STEP.statements), STEP
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
        await conn.execute("DELETE FROM schema_version WHERE version = %s", (STEP.version,))


async def _applied(url: str) -> set[int]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
        cur = await conn.execute("SELECT version FROM schema_version")
        return {int(v) for (v,) in await cur.fetchall()}


async def _writer_holding_kb_chunks(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """Another session in the middle of a write transaction on kb_chunks."""
    other = await psycopg.AsyncConnection.connect(url, connect_timeout=10, application_name="long-writer")
    await other.execute("SET lock_timeout = '10s'")
    await other.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
    return other


async def test_a_held_lock_fails_start_up_naming_the_lock_after_bounded_retries(
    pg_server: TestPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentchat.storage")
    with pg_server.database() as url:
        await _step_pending(url)
        other = await _writer_holding_kb_chunks(url)
        try:
            with pytest.raises(MigrationLockTimeout) as failed:
                await asyncio.wait_for(migrate(url, retries=RETRIES), 60)
        finally:
            await other.rollback()
            await other.close()
        message = str(failed.value)
        assert isinstance(failed.value, StorageUnavailable)  # a start-up error the CLI prints as such
        assert "migration step 25" in message and "ShareLock on kb_chunks" in message, message
        assert "long-writer" in message and "gave up after 2 attempts" in message, message
        retried = [r.getMessage() for r in caplog.records if "attempt 1 of 2 failed" in r.getMessage()]
        assert len(retried) == 1 and "ShareLock on kb_chunks" in retried[0], caplog.text
        assert STEP.version not in await _applied(url)  # rolled back: nothing half-made
        # The lock gone, the same migration completes.
        assert await asyncio.wait_for(migrate(url, retries=RETRIES), 60) == LAST.version
        assert STEP.version in await _applied(url)


async def test_a_lock_released_between_attempts_lets_the_migration_finish(
    pg_server: TestPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="agentchat.storage")
    retries = LockRetries(lock_timeout_ms=1_000, attempts=3, delay_s=0.5)
    with pg_server.database() as url:
        await _step_pending(url)
        other = await _writer_holding_kb_chunks(url)
        migrating = asyncio.create_task(migrate(url, retries=retries))
        try:
            async with asyncio.timeout(30):  # the first attempt's timeout, logged
                while not any("attempt 1 of 3 failed" in r.getMessage() for r in caplog.records):
                    assert not migrating.done(), migrating
                    await asyncio.sleep(0.02)
            await other.rollback()  # the writer's transaction ends before the next attempt
            assert await asyncio.wait_for(migrating, 60) == LAST.version
        finally:
            if not migrating.done():
                migrating.cancel()
            await other.close()
        assert STEP.version in await _applied(url)


async def test_a_long_step_is_not_cut_by_a_statement_timeout_set_for_the_database(pg_server: TestPostgres) -> None:
    """An operator's ``statement_timeout`` (for the role or the database) must not fail a
    long step at every start (migration 26 rewrites every chunk row); the migration
    session turns it off and relies on its lock_timeout for the waits."""
    from storage.migration_runner import Migration

    with pg_server.database() as url:
        assert await migrate(url, retries=RETRIES) == LAST.version
        async with await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10) as conn:
            name = (await (await conn.execute("SELECT current_database()")).fetchone() or ("",))[0]
            await conn.execute(
                psycopg.sql.SQL("ALTER DATABASE {} SET statement_timeout = '100ms'").format(
                    psycopg.sql.Identifier(str(name))
                )
            )
        slow = Migration(LAST.version + 1, "a slow step", ("SELECT pg_sleep(0.5)",))
        assert await asyncio.wait_for(migrate(url, (*MIGRATIONS, slow), retries=RETRIES), 60) == slow.version


class SlowWhileMigrationWaits(CuttableRelay):
    """A relay to the server that holds each new connection for as long as the migration's
    session waits for a lock: a server (or a network path) slow to open a connection
    exactly while the wait lasts - what a loaded machine does to the probe's connection."""

    def __init__(self, host: str, port: int, direct_url: str) -> None:
        super().__init__(host, port)
        self._direct_url = direct_url

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with (
                asyncio.timeout(30),
                await psycopg.AsyncConnection.connect(self._direct_url, autocommit=True, connect_timeout=10) as conn,
            ):
                while await (await conn.execute(_MIGRATION_WAITS)).fetchone() is not None:
                    await asyncio.sleep(0.02)
        except (TimeoutError, psycopg.Error):
            writer.close()  # the client sees its connection refused, and says so
            return
        await super()._accept(reader, writer)


_MIGRATION_WAITS = (
    "SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE a.datname = current_database()"
    " AND a.application_name = 'agentchat-migrate' AND NOT l.granted LIMIT 1"
)


@contextlib.asynccontextmanager
async def _relayed(url: str) -> AsyncIterator[str]:
    """``url`` through a ``SlowWhileMigrationWaits`` relay."""
    params = psycopg.conninfo.conninfo_to_dict(url)
    host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
    relay = await SlowWhileMigrationWaits(host, port, url).start()
    try:
        yield psycopg.conninfo.make_conninfo(url, host="127.0.0.1", port=relay.port)
    finally:
        await relay.aclose()


async def test_the_lock_is_named_when_connecting_is_slow_during_the_wait(pg_server: TestPostgres) -> None:
    """The probe's connection is open before the statement waits: opened once the wait
    was half over (as it was), it came after the lock_timeout on a loaded machine and
    the report said "a lock (it was not seen in pg_locks)" with the lock held."""
    with pg_server.database() as url:
        await _step_pending(url)
        other = await _writer_holding_kb_chunks(url)
        try:
            async with _relayed(url) as relayed:
                with pytest.raises(MigrationLockTimeout) as failed:
                    once = LockRetries(lock_timeout_ms=1_000, attempts=1, delay_s=0.05)
                    await asyncio.wait_for(migrate(relayed, retries=once), 60)
        finally:
            await other.rollback()
            await other.close()
        message = str(failed.value)
        assert "ShareLock on kb_chunks" in message and "long-writer" in message, message
        assert STEP.version not in await _applied(url)


class SlowAfterTheFirst(CuttableRelay):
    """A relay that opens its first connection (the migration's) at once and every later
    one (the lock probe's) after ``delay_s``: a server slow to accept a connection."""

    def __init__(self, host: str, port: int, delay_s: float) -> None:
        super().__init__(host, port)
        self._delay_s, self._accepted = delay_s, 0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._accepted += 1
        if self._accepted > 1:
            await asyncio.sleep(self._delay_s)
        await super()._accept(reader, writer)


async def test_the_probe_opens_before_the_steps_transaction_never_idle_in_it(pg_server: TestPostgres) -> None:
    """The lock probe's connection opened inside the step's transaction, after the version
    table was read in it: the migration's session sat idle in its transaction while the
    probe connected, and a server with ``idle_in_transaction_session_timeout`` shorter than
    that ended the session (start-up failed: IdleInTransactionSessionTimeout)."""
    with pg_server.database() as url:
        await _step_pending(url)
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as admin:
            db = admin.info.dbname
            await admin.execute(f"ALTER DATABASE \"{db}\" SET idle_in_transaction_session_timeout = '1s'")
        params = psycopg.conninfo.conninfo_to_dict(url)
        host, port = str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)
        relay = await SlowAfterTheFirst(host, port, delay_s=1.5).start()
        try:
            relayed = psycopg.conninfo.make_conninfo(url, host="127.0.0.1", port=relay.port)
            once = LockRetries(lock_timeout_ms=1_000, attempts=1, delay_s=0.05)
            assert await asyncio.wait_for(migrate(relayed, retries=once), 60) >= STEP.version
        finally:
            await relay.aclose()
        assert STEP.version in await _applied(url)
