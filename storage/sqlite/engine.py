"""The embedded engine's storage: every store on one SQLite file, migrated once at open
(``open_sqlite_storage``). Apart from the package's ``__init__`` so that importing a light
module of the package (``storage.sqlite.writer_lock``, ``runtime_dir``: what a ``serve
--workers`` supervisor needs) does not import every store, numpy among them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import aiosqlite

from storage.bundle import SqlStorage
from storage.sqlite.connections import SqliteOptions, when_free
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.kb_index import SqliteKBIndex
from storage.sqlite.live_log import WRITER_SETUP
from storage.sqlite.migrations import migrate
from storage.sqlite.runs import SqliteRunStore

T = TypeVar("T")


class SqliteStorage(SqlStorage[SqliteDatabase, SqliteRunStore, SqliteKBIndex]):
    """Every store of the service on one file. Built by ``open_sqlite_storage``; no
    ``run_feed`` (a file notifies no one): one process per file follows its live runs in
    memory, and several (``--workers``) read each other's from the log and check their
    leases in every step (``storage.sqlite.runs``)."""

    engine = "sqlite"

    async def readiness(self) -> dict[str, object]:
        report = await self.db.readiness()
        report["live_log"] = self.runs.settler.readiness()
        return report

    async def close(self) -> None:
        # The events of runs ended since the last settle, while the writer still runs.
        await self.runs.settler.aclose()
        await super().close()


async def _writer_setup(conn: aiosqlite.Connection) -> None:
    for statement in WRITER_SETUP:
        await conn.execute(statement)


async def _when_free(db: SqliteDatabase, fn: Callable[[aiosqlite.Connection], Awaitable[T]]) -> T:
    """``db.transact_raw(fn)``, tried again while another connection holds the file's
    write lock, for ``write_retry_s`` as every other write is; then its error.

    Why: every migration step, applied or not, takes the write lock at every start
    (``BEGIN IMMEDIATE``, its version re-checked inside), and that waited SQLite's
    ``busy_timeout`` (1 s) only: beyond it the start-up failed - "database is locked",
    exit 3. Whoever writes the file meanwhile can hold it longer: a sibling worker of
    ``serve --workers`` migrating a new file (its first step is 30 statements, one
    event-loop hop each, so on a loaded machine the step lasts as long as the machine
    makes those hops wait), or a one-off command's bulk write (``agentchat ingest``)
    beside a serve being started. And a ``--workers`` worker that cannot start stops
    the whole group. Running ``fn`` again is safe: a migration step that failed rolled
    back and the next run re-checks it inside its own transaction; the writer's setup
    creates temporary objects only if they do not exist."""
    return await when_free(lambda: db.transact_raw(fn), db.path, db.opts.write_retry_s)


async def open_sqlite_storage(path: str | Path, opts: SqliteOptions | None = None) -> SqliteStorage:
    """Open the file, apply every pending migration, then start the writer: nothing
    reads or writes a table before the schema is complete."""
    db = await SqliteDatabase.open(path, opts)
    try:
        async with db.reading():  # readers exist; no statement ran on them yet
            pass
        version = await _when_free(db, migrate)
        await _when_free(db, _writer_setup)  # the live log's order check (per connection)
        db.start()
        sql = SqliteSql(db)
        runs = SqliteRunStore(sql)
        storage = SqliteStorage.assemble(
            db=db, sql=sql, schema_version=version, runs=runs, kb_index=SqliteKBIndex(db)
        )
        # Retention compacts settled runs only: it settles through the settler first,
        # which reconciles a run it could not otherwise move (``storage.sqlite.log_settler``).
        storage.retention.settle_first = runs.settle_log
        runs.settler.every_s = db.opts.settle_every_s
        runs.settler.start()
        return storage
    except BaseException:
        await db.close()
        raise


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
