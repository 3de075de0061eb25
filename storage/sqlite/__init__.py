"""The embedded engine: every store on one SQLite file, migrated once at open."""

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
        return SqliteStorage.assemble(
            db=db, sql=sql, schema_version=version, runs=SqliteRunStore(sql), kb_index=SqliteKBIndex(db)
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
