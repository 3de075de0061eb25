"""The embedded engine: every store on one SQLite file, migrated once at open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from storage.sqlite.database import SqliteDatabase, SqliteOptions
from storage.sqlite.dialect import SqliteSql
from storage.sqlite.drafts import SqliteDraftStore
from storage.sqlite.external_results import SqliteExternalResultStore
from storage.sqlite.external_vectors import SqliteExternalVectorStore
from storage.sqlite.kb_index import SqliteKBIndex
from storage.sqlite.keywords import SqliteKeywordStore
from storage.sqlite.limits import SqliteLimitStore
from storage.sqlite.migrations import migrate
from storage.sqlite.runs import SqliteRunStore
from storage.sqlite.secrets import SqliteSecretStore
from storage.sqlite.tool_calls import SqliteToolCallLog
from storage.stores.conversations import ConversationStore


@dataclass(slots=True)
class SqliteStorage:
    """Every store of the service on one file. Built by ``open_sqlite_storage``."""

    db: SqliteDatabase
    schema_version: int
    conversations: ConversationStore
    runs: SqliteRunStore
    tool_calls: SqliteToolCallLog
    drafts: SqliteDraftStore
    keywords: SqliteKeywordStore
    external_results: SqliteExternalResultStore
    external_vectors: SqliteExternalVectorStore
    kb_index: SqliteKBIndex
    limits: SqliteLimitStore
    secrets: SqliteSecretStore

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
            conversations=ConversationStore(sql),
            runs=SqliteRunStore(db),
            tool_calls=SqliteToolCallLog(db),
            drafts=SqliteDraftStore(db),
            keywords=SqliteKeywordStore(db),
            external_results=SqliteExternalResultStore(db),
            external_vectors=SqliteExternalVectorStore(db),
            kb_index=SqliteKBIndex(db),
            limits=SqliteLimitStore(db),
            secrets=SqliteSecretStore(db),
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["SqliteDatabase", "SqliteOptions", "SqliteStorage", "open_sqlite_storage"]
