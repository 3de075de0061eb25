"""The one migration runner and the one version table (``schema_version``) of the
PostgreSQL engine.

The steps carry the SQLite engine's numbers and names, so "schema version 4" means the
same tables on both engines (what ``agentchat migrate-db`` relies on); each step says
the same thing in PostgreSQL's words. A released step is never edited; a change is a
new step, in both engines. Numbers, names and the runner's order are shared
(``storage.migration_runner``). The steps themselves, in order, are
``storage.postgres.migration_steps``; this module applies them.

Ten replicas starting together migrate once: the runner takes a session-level
``pg_advisory_lock`` before reading the version table, so the first applies the
pending steps and the others, let in one by one afterwards, find nothing to do. Each
step runs in its own transaction with its row in ``schema_version`` (DDL is
transactional in PostgreSQL: a failed step leaves nothing half-made).

The ``vector`` extension (pgvector) is created by step 1 when it is missing, which
needs a role allowed to create it; a managed database where it already exists needs no
such right.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg

from storage.migration_runner import VERSION_TABLE, Migration, MigrationRunner
from storage.postgres.lock_waits import LockProbe, LockRetries, LockWait, MigrationLockTimeout, probed
from storage.postgres.migration_steps import MIGRATIONS

__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "migrate"]

log = logging.getLogger("agentchat.storage")

#: ``pg_advisory_lock`` key of the migration runner ("agentchat" as an int64).
MIGRATION_LOCK = 0x6167656E74636861


class _PostgresRunner(MigrationRunner):
    """Each step in its own transaction; the applied versions are read once, under the
    session's advisory lock (``migrate``), before the first step. A statement that waits
    for a lock past the session's ``lock_timeout`` fails its step; ``blocked`` says what
    it waited for, read by ``probe`` (``storage.postgres.lock_waits``)."""

    time_type = "DOUBLE PRECISION"
    mark = "%s"

    def __init__(
        self, conn: psycopg.AsyncConnection[tuple[object, ...]], retries: LockRetries, probe: LockProbe
    ) -> None:
        self._conn = conn
        self._done: set[int] | None = None
        self._retries, self._probe = retries, probe
        #: The step under way ("25 (name)"), for the lock-wait report.
        self.current = "?"
        self.blocked: LockWait | None = None

    async def apply(self, statement: str) -> None:
        wait_s = self._retries.lock_timeout_ms / 1000
        if wait_s <= 0:  # no lock_timeout (asked for): nothing ever times out to report
            await self.execute(statement)
            return
        # Opened by ``step`` before its transaction (a wait is read while it lasts, and a
        # connection opened in a transaction would leave the session idle in it); one
        # closed since is reported as gone, not opened again with locks held.
        probe = asyncio.create_task(self._probe.waiting_for(wait_s / 2, max(0.05, wait_s / 10)))
        try:
            await self.execute(statement)
        except psycopg.errors.LockNotAvailable:
            self.blocked = LockWait(self.current, statement, await probed(probe, grace_s=1.0))
            raise
        finally:
            if not probe.done():
                probe.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await probe  # also takes a failed probe's error: never "exception never retrieved"

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._conn.execute(sql, params or None)  # type: ignore[arg-type]

    async def _versions(self) -> set[int]:
        """The applied versions, read once (under the advisory lock) for every step."""
        if self._done is None:
            cur = await self._conn.execute(f"SELECT version FROM {VERSION_TABLE}")
            self._done = {int(r[0]) for r in await cur.fetchall()}  # type: ignore[call-overload]
        return self._done

    @contextlib.asynccontextmanager
    async def step(self, step: Migration) -> AsyncIterator[None]:
        if step.version in await self._versions():
            yield
            return
        self.current = f"{step.version} ({step.name})"
        if self._retries.lock_timeout_ms > 0:
            await self._probe.ready()  # before the transaction: never idle in it while connecting
        async with self._conn.transaction():
            yield

    async def applied(self, step: Migration) -> bool:
        return self._done is not None and step.version in self._done

    async def newest(self) -> int:
        return max(await self._versions(), default=0)


async def migrate(
    url: str,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    *,
    connect_timeout: int = 10,
    retries: LockRetries | None = None,
) -> int:
    """Apply every pending step on a connection of its own, under the advisory lock;
    return the schema version afterwards.

    Past the advisory lock (another replica migrating: wait for it, its steps are
    bounded too) every statement waits at most ``retries.lock_timeout_ms`` for a lock; a
    step that timed out is rolled back and tried again after ``retries.delay_s``, up to
    ``retries.attempts`` times, each logged with the lock and its holder; then
    ``MigrationLockTimeout`` (``storage.postgres.lock_waits``)."""
    retries = retries or LockRetries()
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, connect_timeout=connect_timeout, application_name="agentchat-migrate"
    ) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        lock_probe = LockProbe(url, conn.info.backend_pid, connect_timeout)
        try:
            await conn.execute(f"SET lock_timeout = {int(retries.lock_timeout_ms)}")
            # A step may run long (migration 26 rewrites every chunk row: about a minute
            # at 1M): a statement_timeout set for the role or the database would fail it
            # at every start. The lock_timeout above bounds the waits instead.
            await conn.execute("SET statement_timeout = 0")
            for attempt in range(1, max(1, retries.attempts) + 1):
                runner = _PostgresRunner(conn, retries, lock_probe)
                try:
                    return await runner.run(migrations)
                except psycopg.errors.LockNotAvailable as exc:
                    blocked = runner.blocked or LockWait(runner.current, "(the runner's own statement)")
                    what = blocked.describe(retries.lock_timeout_ms)
                    if attempt >= retries.attempts:
                        raise MigrationLockTimeout(
                            f"the database schema was not migrated: {what}; gave up after {attempt} attempts. "
                            "End or wait out that session's transaction, then start again"
                        ) from exc
                    log.warning(
                        "schema migration: %s; attempt %d of %d failed, trying again in %g s",
                        what,
                        attempt,
                        retries.attempts,
                        retries.delay_s,
                    )
                    await asyncio.sleep(retries.delay_s)
            raise AssertionError("unreachable: the last attempt returns or raises")
        finally:
            await lock_probe.aclose()
            if not conn.closed:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
