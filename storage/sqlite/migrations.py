"""The one migration runner and the one version table (``schema_version``) of the file.

Every table of every store is created by its steps, numbered, applied once, in order,
at start-up, before any reader or background task exists. A released step is never
edited; a change is a new step. Step 1 uses ``IF NOT EXISTS`` throughout so a file made
by an earlier release (when each store migrated itself into its own version table) is
adopted as it is; step 2 drops those old version tables.

The steps themselves, in order, are ``storage.sqlite.migration_steps``; this module
applies them. The runner is ``storage.migration_runner`` (shared, with the steps'
numbers and names); here each step runs in its own ``BEGIN IMMEDIATE`` transaction
and re-checks the version inside the write lock, so two processes starting on one file
apply each step once.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator

import aiosqlite

from storage.migration_runner import VERSION_TABLE, Migration, MigrationRunner
from storage.sqlite.migration_steps import CODE, MIGRATIONS


class _SqliteRunner(MigrationRunner):
    """Each step in its own ``BEGIN IMMEDIATE`` transaction, its version re-checked inside
    the write lock (two processes starting on one file apply it once)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._conn.execute(sql, params)

    @contextlib.asynccontextmanager
    async def step(self, step: Migration) -> AsyncIterator[None]:
        conn = self._conn
        keys_were = await _foreign_keys(conn) if step.rebuilds else 0
        if step.rebuilds:  # only outside a transaction does this pragma take effect
            await conn.execute("PRAGMA foreign_keys = OFF")
        # The keys are restored whatever fails, the BEGIN too: a busy file fails it, the
        # start-up tries the steps again (``connections.when_free``), and a writer left with
        # keys off would read "off" as what to restore - and serve without ON DELETE CASCADE.
        try:
            await conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                await conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    await conn.execute("ROLLBACK")
                raise
        finally:
            if step.rebuilds:
                await conn.execute(f"PRAGMA foreign_keys = {keys_were}")

    async def applied(self, step: Migration) -> bool:
        async with self._conn.execute(f"SELECT 1 FROM {VERSION_TABLE} WHERE version = ?", (step.version,)) as cur:
            return await cur.fetchone() is not None

    async def newest(self) -> int:
        async with self._conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}") as cur:
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def apply(self, statement: str) -> None:
        try:
            await self._conn.execute(statement)
        except sqlite3.OperationalError as exc:
            # A file from an earlier release may already have a column a step adds.
            if statement.lstrip().upper().startswith("ALTER TABLE") and "duplicate column" in str(exc):
                return
            raise

    async def code(self, step: Migration) -> None:
        work = CODE.get(step.version)
        if work is not None:
            await work(self._conn)

    async def check(self, step: Migration) -> None:
        if step.rebuilds:
            await _check_foreign_keys(self._conn, step)


async def migrate(conn: aiosqlite.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Apply every pending step; return the schema version afterwards."""
    return await _SqliteRunner(conn).run(migrations)


async def _foreign_keys(conn: aiosqlite.Connection) -> int:
    async with conn.execute("PRAGMA foreign_keys") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def _check_foreign_keys(conn: aiosqlite.Connection, step: Migration) -> None:
    async with conn.execute("PRAGMA foreign_key_check") as cur:
        broken = list(await cur.fetchall())
    if broken:
        raise sqlite3.IntegrityError(f"migration {step.version} broke {len(broken)} foreign key(s): {broken[:3]}")


__all__ = ["MIGRATIONS", "VERSION_TABLE", "migrate"]
