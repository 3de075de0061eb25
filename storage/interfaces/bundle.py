"""Every store of the service on one engine, as ``storage.open_storage`` returns it
(``StorageBundle``), with the part of its database the app reads (``WriterHealth``) and
a readiness check (``Health``).

Why apart: the one protocol that names all the others; the app factory holds it.
"""

from __future__ import annotations

from typing import Any, Protocol

from storage.interfaces.conversations import ConversationStore, HistoryStore
from storage.interfaces.drafts import DraftStore
from storage.interfaces.knowledge_base import KBIndex
from storage.interfaces.limits_and_secrets import LimitStore, SecretStore
from storage.interfaces.runs import RetentionStore, RunStore, ToolCallLog
from storage.interfaces.web_answers import ExternalResultStore, ExternalVectorStore, KeywordStore
from storage.run_feed import RunFeed


class Health(Protocol):
    async def readiness(self) -> dict[str, Any]: ...


class WriterHealth(Protocol):
    """The part of an engine's database the app reads: health, counters, a barrier."""

    @property
    def healthy(self) -> bool: ...

    @property
    def stats(self) -> Any: ...

    async def flush(self) -> None: ...


class StorageBundle(Protocol):
    """Every store of the service on one engine, as ``storage.open_storage`` returns it
    (``SqliteStorage`` or ``PostgresStorage``); the app factory holds one of these.
    Members are read-only properties so that an engine may hold its own store classes (a
    protocol attribute would be invariant)."""

    @property
    def engine(self) -> str: ...

    @property
    def schema_version(self) -> int: ...

    @property
    def db(self) -> WriterHealth: ...

    @property
    def conversations(self) -> ConversationStore: ...

    @property
    def runs(self) -> RunStore: ...

    @property
    def tool_calls(self) -> ToolCallLog: ...

    @property
    def drafts(self) -> DraftStore: ...

    @property
    def keywords(self) -> KeywordStore: ...

    @property
    def external_results(self) -> ExternalResultStore: ...

    @property
    def external_vectors(self) -> ExternalVectorStore: ...

    @property
    def kb_index(self) -> KBIndex: ...

    @property
    def limits(self) -> LimitStore: ...

    @property
    def secrets(self) -> SecretStore: ...

    @property
    def history(self) -> HistoryStore: ...

    @property
    def retention(self) -> RetentionStore: ...

    @property
    def run_feed(self) -> RunFeed | None:
        """News of runs committed by other processes; ``None`` for a one-process engine."""
        ...

    async def readiness(self) -> dict[str, Any]: ...

    async def close(self) -> None: ...
