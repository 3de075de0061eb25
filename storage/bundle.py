"""Every store of the service on one database: the bundle ``open_storage`` returns.

The stores written once (``storage.stores``) are built here over the engine's executor;
an engine supplies its database, its run store and its knowledge-base index (the parts
that really differ) and, where other processes write runs, its run feed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, Self, TypeVar

from storage.sql import SqlEngine
from storage.stores.conversations import SqlConversationStore
from storage.stores.drafts import SqlDraftStore
from storage.stores.external_results import SqlExternalResultStore
from storage.stores.external_vectors import SqlExternalVectorStore
from storage.stores.history import SqlHistoryStore
from storage.stores.keywords import SqlKeywordStore
from storage.stores.limits import SqlLimitStore
from storage.stores.retention import SqlRetentionStore
from storage.stores.secrets import SqlSecretStore
from storage.stores.tool_calls import SqlToolCallLog


class _Database(Protocol):
    async def readiness(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...


class _Feed(Protocol):
    async def close(self) -> None: ...


DB = TypeVar("DB", bound=_Database)
Runs = TypeVar("Runs")
KB = TypeVar("KB")


@dataclass(slots=True)
class SqlStorage(Generic[DB, Runs, KB]):
    """Every store on one database. Built by ``SqlStorage.assemble`` in each engine's
    ``open_*_storage``."""

    db: DB
    schema_version: int
    conversations: SqlConversationStore
    runs: Runs
    tool_calls: SqlToolCallLog
    drafts: SqlDraftStore
    keywords: SqlKeywordStore
    external_results: SqlExternalResultStore
    external_vectors: SqlExternalVectorStore
    kb_index: KB
    limits: SqlLimitStore
    secrets: SqlSecretStore
    #: A user's history (conversation list, titles, deletion; run lookup; feedback).
    history: SqlHistoryStore
    #: Event-log compaction of long-finished runs.
    retention: SqlRetentionStore
    #: News of runs committed by other processes (PostgreSQL's LISTEN/NOTIFY); ``None``
    #: where one process owns the database and follows its live runs in memory.
    run_feed: Any = None

    engine: ClassVar[str] = ""

    @classmethod
    def assemble(
        cls, *, db: DB, sql: SqlEngine, schema_version: int, runs: Runs, kb_index: KB, run_feed: _Feed | None = None
    ) -> Self:
        return cls(
            db=db,
            schema_version=schema_version,
            conversations=SqlConversationStore(sql),
            runs=runs,
            tool_calls=SqlToolCallLog(sql),
            drafts=SqlDraftStore(sql),
            keywords=SqlKeywordStore(sql),
            external_results=SqlExternalResultStore(sql),
            external_vectors=SqlExternalVectorStore(sql),
            kb_index=kb_index,
            limits=SqlLimitStore(sql),
            secrets=SqlSecretStore(sql),
            history=SqlHistoryStore(sql),
            retention=SqlRetentionStore(sql),
            run_feed=run_feed,
        )

    async def readiness(self) -> dict[str, object]:
        out = await self.db.readiness()
        feed_status = getattr(self.run_feed, "status", None)
        if callable(feed_status):  # PostgreSQL's listener: informational, never "not ready"
            out = {**out, "run_feed": feed_status()}
        return out

    async def close(self) -> None:
        if self.run_feed is not None:
            await self.run_feed.close()
        await self.db.close()


__all__ = ["SqlStorage"]
