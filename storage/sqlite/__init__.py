"""The embedded engine: every store on one SQLite file, migrated once at open."""

from __future__ import annotations

from pathlib import Path

from storage.bundle import SqlStorage
from storage.sqlite.database import SqliteDatabase, SqliteOptions
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.kb_index import SqliteKBIndex
from storage.sqlite.migrations import migrate
from storage.stores.runs import SqlRunStore


class SqliteStorage(SqlStorage[SqliteDatabase, SqlRunStore, SqliteKBIndex]):
    """Every store of the service on one file. Built by ``open_sqlite_storage``; one
    process per file, so its live runs are followed in memory (no ``run_feed``)."""

    engine = "sqlite"


async def open_sqlite_storage(path: str | Path, opts: SqliteOptions | None = None) -> SqliteStorage:
    """Open the file, apply every pending migration, then start the writer: nothing
    reads or writes a table before the schema is complete."""
    db = await SqliteDatabase.open(path, opts)
    try:
        async with db.reading():  # readers exist; no statement ran on them yet
            pass
        version = await db.transact_raw(migrate)
        db.start()
        sql = SqliteSql(db)
        return SqliteStorage.assemble(
            db=db, sql=sql, schema_version=version, runs=SqlRunStore(sql), kb_index=SqliteKBIndex(db)
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
