"""The embedded engine's storage: every store on one SQLite file, migrated once at open
(``open_sqlite_storage``). Apart from the package's ``__init__`` so that importing a light
module of the package (``storage.sqlite.writer_lock``, ``runtime_dir``: what a ``serve
--workers`` supervisor needs) does not import every store, numpy among them."""

from __future__ import annotations

from pathlib import Path

import aiosqlite

from storage.bundle import SqlStorage
from storage.sqlite.connections import SqliteOptions
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.kb_index import SqliteKBIndex
from storage.sqlite.live_log import WRITER_SETUP
from storage.sqlite.migrations import migrate
from storage.sqlite.runs import SqliteRunStore


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


async def open_sqlite_storage(path: str | Path, opts: SqliteOptions | None = None) -> SqliteStorage:
    """Open the file, apply every pending migration, then start the writer: nothing
    reads or writes a table before the schema is complete."""
    db = await SqliteDatabase.open(path, opts)
    try:
        async with db.reading():  # readers exist; no statement ran on them yet
            pass
        version = await db.transact_raw(migrate)
        await db.transact_raw(_writer_setup)  # the live log's order check (per connection)
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
