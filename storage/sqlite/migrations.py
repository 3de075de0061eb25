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
    the write lock (two processes starting on one file apply it once).

    On the plain ``sqlite3.Connection``, on that connection's own thread: its methods are
    coroutines (the runner is shared with PostgreSQL's) whose bodies never suspend, so
    ``_run_here`` drives the whole run in one go there (see ``migrate``)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        self._conn.execute(sql, params)

    @contextlib.asynccontextmanager
    async def step(self, step: Migration) -> AsyncIterator[None]:
        conn = self._conn
        keys_were = _foreign_keys(conn) if step.rebuilds else 0
        if step.rebuilds:  # only outside a transaction does this pragma take effect
            conn.execute("PRAGMA foreign_keys = OFF")
        # The keys are restored whatever fails, the BEGIN too: a busy file fails it, the
        # start-up tries the steps again (``connections.when_free``), and a writer left with
        # keys off would read "off" as what to restore - and serve without ON DELETE CASCADE.
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        finally:
            if step.rebuilds:
                conn.execute(f"PRAGMA foreign_keys = {keys_were}")

    async def applied(self, step: Migration) -> bool:
        row = self._conn.execute(f"SELECT 1 FROM {VERSION_TABLE} WHERE version = ?", (step.version,)).fetchone()
        return row is not None

    async def newest(self) -> int:
        row = self._conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()
        return int(row[0]) if row else 0

    async def apply(self, statement: str) -> None:
        try:
            self._conn.execute(statement)
        except sqlite3.OperationalError as exc:
            # A file from an earlier release may already have a column a step adds.
            if statement.lstrip().upper().startswith("ALTER TABLE") and "duplicate column" in str(exc):
                return
            raise

    async def code(self, step: Migration) -> None:
        work = CODE.get(step.version)
        if work is not None:
            work(self._conn)

    async def check(self, step: Migration) -> None:
        if step.rebuilds:
            _check_foreign_keys(self._conn, step)


def _run_here(conn: sqlite3.Connection, migrations: tuple[Migration, ...]) -> int:
    """The whole run, on ``conn``'s own thread (aiosqlite's worker): the runner's
    coroutine is driven to its end by one ``send``, since none of its awaits suspends."""
    run = _SqliteRunner(conn).run(migrations)
    try:
        run.send(None)
    except StopIteration as done:
        return int(done.value)
    run.close()
    raise RuntimeError("a SQLite migration step suspended: its work must be plain calls on the connection")


async def migrate(conn: aiosqlite.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Apply every pending step; return the schema version afterwards.

    Why in one hop: each statement handed to aiosqlite on its own is a wake-up of its
    thread and then of the event loop; a new file's steps are ~420 statements, and on a
    loaded machine each hop waits its turn for a core (a fresh open measured 0.67 s wall
    and 0.11 s CPU against 0.22 s and 0.03 s for an open with nothing to apply, load ~19).
    Run on the connection's own thread as one function, as ``thread_calls`` runs a
    transaction. aiosqlite's worker holds the result of the call before until its next
    call: a cursor its caller left open (``await conn.execute("PRAGMA journal_mode=WAL")``)
    keeps its statement in progress, and COMMIT refuses to run beside it; an empty call
    first lets it go, as the next statement did when each was a hop of its own."""
    await conn._execute(_nothing)
    version: int = await conn._execute(_run_here, conn._conn, migrations)
    return version


def _nothing() -> None:
    """An empty call on a connection's thread (``migrate``)."""


def _foreign_keys(conn: sqlite3.Connection) -> int:
    row = conn.execute("PRAGMA foreign_keys").fetchone()
    return int(row[0]) if row is not None else 0


def _check_foreign_keys(conn: sqlite3.Connection, step: Migration) -> None:
    broken = conn.execute("PRAGMA foreign_key_check").fetchall()
    if broken:
        raise sqlite3.IntegrityError(f"migration {step.version} broke {len(broken)} foreign key(s): {broken[:3]}")


__all__ = ["MIGRATIONS", "VERSION_TABLE", "migrate"]
