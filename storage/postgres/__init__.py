"""The scale-out engine: every store on one PostgreSQL database (with pgvector),
migrated once at open — however many replicas open it at the same moment.

Same interfaces, same contract suite (``tests/storage``) as the SQLite engine; needs
the ``postgres`` extra (``pip install 'agentchat[postgres]'``: psycopg 3, psycopg-pool,
pgvector).
"""

from __future__ import annotations

from dataclasses import dataclass

from storage.postgres.database import Conn, PostgresDatabase, PostgresOptions, redact
from storage.postgres.dialect import PostgresSql
from storage.postgres.kb_index import PostgresKBIndex
from storage.postgres.migrations import migrate
from storage.postgres.notify import RunEventsListener
from storage.postgres.runs import PostgresRunStore
from storage.stores.conversations import SqlConversationStore
from storage.stores.drafts import SqlDraftStore
from storage.stores.external_results import SqlExternalResultStore
from storage.stores.external_vectors import SqlExternalVectorStore
from storage.stores.keywords import SqlKeywordStore
from storage.stores.limits import SqlLimitStore
from storage.stores.secrets import SqlSecretStore
from storage.stores.tool_calls import SqlToolCallLog


@dataclass(slots=True)
class PostgresStorage:
    """Every store of the service on one database. Built by ``open_postgres_storage``."""

    db: PostgresDatabase
    schema_version: int
    conversations: SqlConversationStore
    runs: PostgresRunStore
    tool_calls: SqlToolCallLog
    drafts: SqlDraftStore
    keywords: SqlKeywordStore
    external_results: SqlExternalResultStore
    external_vectors: SqlExternalVectorStore
    kb_index: PostgresKBIndex
    limits: SqlLimitStore
    secrets: SqlSecretStore
    #: Wakes this process's followers of runs executing on other replicas (LISTEN/NOTIFY).
    run_feed: RunEventsListener | None = None

    engine = "postgres"

    async def readiness(self) -> dict[str, object]:
        return await self.db.readiness()

    async def close(self) -> None:
        if self.run_feed is not None:
            await self.run_feed.close()
        await self.db.close()


async def _configure(conn: Conn) -> None:
    """Every pooled connection speaks pgvector's ``vector`` (binary, numpy in and out)."""
    from pgvector.psycopg import register_vector_async

    await register_vector_async(conn)


def _start_feed(url: str, opts: PostgresOptions) -> RunEventsListener:
    feed = RunEventsListener(url, connect_timeout_s=opts.connect_timeout_s)
    feed.start()
    return feed


async def open_postgres_storage(url: str, opts: PostgresOptions | None = None) -> PostgresStorage:
    """Apply every pending migration (once, under an advisory lock, whatever the number
    of replicas starting), then open the pool and start the writer: nothing reads or
    writes a table before the schema is complete."""
    opts = opts or PostgresOptions()
    version = await migrate(url, connect_timeout=max(1, int(opts.connect_timeout_s)))
    db = await PostgresDatabase.open(url, opts, configure=_configure)
    try:
        db.start()
        sql = PostgresSql(db)
        return PostgresStorage(
            db=db,
            schema_version=version,
            conversations=SqlConversationStore(sql),
            runs=PostgresRunStore(db),
            tool_calls=SqlToolCallLog(sql),
            drafts=SqlDraftStore(sql),
            keywords=SqlKeywordStore(sql),
            external_results=SqlExternalResultStore(sql),
            external_vectors=SqlExternalVectorStore(sql),
            kb_index=PostgresKBIndex(db),
            limits=SqlLimitStore(sql),
            secrets=SqlSecretStore(sql),
            run_feed=_start_feed(url, opts),
        )
    except BaseException:
        await db.close()
        raise


__all__ = ["PostgresDatabase", "PostgresOptions", "PostgresStorage", "open_postgres_storage", "redact"]
