"""The embedded engine: every store on one SQLite file, migrated once at open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage.sqlite.database import SqliteDatabase, SqliteOptions
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.kb_index import SqliteKBIndex
from storage.sqlite.migrations import migrate
from storage.sqlite.runs import SqliteRunStore
from storage.stores.conversations import SqlConversationStore
from storage.stores.drafts import SqlDraftStore
from storage.stores.external_results import SqlExternalResultStore
from storage.stores.external_vectors import SqlExternalVectorStore
from storage.stores.keywords import SqlKeywordStore
from storage.stores.limits import SqlLimitStore
from storage.stores.secrets import SqlSecretStore
from storage.stores.tool_calls import SqlToolCallLog


@dataclass(slots=True)
class SqliteStorage:
    """Every store of the service on one file. Built by ``open_sqlite_storage``."""

    db: SqliteDatabase
    schema_version: int
    conversations: SqlConversationStore
    runs: SqliteRunStore
    tool_calls: SqlToolCallLog
    drafts: SqlDraftStore
    keywords: SqlKeywordStore
    external_results: SqlExternalResultStore
    external_vectors: SqlExternalVectorStore
    kb_index: SqliteKBIndex
    limits: SqlLimitStore
    secrets: SqlSecretStore

    engine = "sqlite"
    #: One process per file: its live runs are followed in memory.
    run_feed = None

    async def readiness(self) -> dict[str, object]:
        return await self.db.readiness()

    async def close(self) -> None:
        await self.db.close()


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
        return SqliteStorage(
            db=db,
            schema_version=version,
            conversations=SqlConversationStore(sql),
            runs=SqliteRunStore(db),
            tool_calls=SqlToolCallLog(sql),
            drafts=SqlDraftStore(sql),
            keywords=SqlKeywordStore(sql),
            external_results=SqlExternalResultStore(sql),
            external_vectors=SqlExternalVectorStore(sql),
            kb_index=SqliteKBIndex(db),
            limits=SqlLimitStore(sql),
            secrets=SqlSecretStore(sql),
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
