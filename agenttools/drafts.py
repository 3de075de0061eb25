"""Workflow drafts: a workflow built one action at a time, stored in SQLite.

A draft outlives a single request (the user confirms each step in conversation), so it is
durable; it belongs to one caller (another caller's draft id reads as "not found"); it
expires 10 minutes after its last use; each caller may hold a limited number; and updates
to one draft are serialised with an asyncio lock so two concurrent tool calls cannot lose
each other's action. Nothing here talks to the backend: the tools validate first, then
take the lock only for the read-modify-write.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import aiosqlite
import orjson

__all__ = [
    "Draft",
    "DraftAction",
    "DraftError",
    "DraftLimitError",
    "DraftNotFoundError",
    "DraftStore",
    "SqliteDraftStore",
]

T = TypeVar("T")
Clock = Callable[[], float]

DEFAULT_TTL_S = 600.0
DEFAULT_MAX_PER_OWNER = 20


class DraftError(Exception):
    """A draft operation failed; the message is meant for the model."""


class DraftNotFoundError(DraftError):
    def __init__(self, draft_id: str) -> None:
        super().__init__(
            f"draft {draft_id!r} not found or expired (drafts expire 10 minutes after their last use); "
            "start a new one with start_draft"
        )


class DraftLimitError(DraftError):
    pass


@dataclass(slots=True)
class DraftAction:
    name: str
    action_type: str
    action_config: dict[str, Any]
    is_active: bool = True
    description: str = ""
    after: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action_type": self.action_type,
            "action_config": self.action_config,
            "is_active": self.is_active,
            "description": self.description,
            "after": self.after,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DraftAction:
        return cls(
            name=str(d["name"]),
            action_type=str(d["action_type"]),
            action_config=dict(d.get("action_config") or {}),
            is_active=bool(d.get("is_active", True)),
            description=str(d.get("description") or ""),
            after=str(d.get("after") or ""),
        )


@dataclass(slots=True)
class Draft:
    id: str
    owner: str
    name: str
    entity: str
    trigger_type: str
    description: str = ""
    trigger_conditions: dict[str, Any] | None = None
    actions: list[DraftAction] = field(default_factory=list)
    created_at: float = 0.0
    last_access: float = 0.0

    def action(self, name: str) -> DraftAction | None:
        return next((a for a in self.actions if a.name == name), None)

    def to_payload(self) -> dict[str, Any]:
        """The workflow payload (names, ``after`` links) that the transformer resolves."""
        payload: dict[str, Any] = {
            "name": self.name,
            "is_active": True,
            "entity": self.entity,
            "trigger_type": self.trigger_type,
            "actions": [],
            "edges": [],
        }
        if self.description:
            payload["description"] = self.description
        if self.trigger_conditions:
            payload["trigger_conditions"] = self.trigger_conditions
        for a in self.actions:
            item: dict[str, Any] = {
                "name": a.name,
                "action_type": a.action_type,
                "action_config": a.action_config,
                "is_active": a.is_active,
            }
            if a.description:
                item["description"] = a.description
            if a.after:
                item["after"] = a.after
            payload["actions"].append(item)
        return payload


class DraftStore(Protocol):
    """What the draft tools need; swap in Redis/PostgreSQL behind the same calls."""

    ttl_s: float
    max_per_owner: int

    async def create(
        self,
        owner: str,
        *,
        name: str,
        entity: str,
        trigger_type: str,
        description: str = "",
        trigger_conditions: dict[str, Any] | None = None,
    ) -> Draft: ...

    async def get(self, owner: str, draft_id: str) -> Draft:
        """The live draft (refreshing its TTL) or :class:`DraftNotFoundError`."""
        ...

    async def update(self, owner: str, draft_id: str, mutate: Callable[[Draft], T]) -> T:
        """Run ``mutate`` on the live draft under its lock and save it; return its result."""
        ...

    async def purge_expired(self) -> int: ...

    async def close(self) -> None: ...


_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE IF NOT EXISTS workflow_drafts (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        entity TEXT NOT NULL,
        trigger_type TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        trigger_conditions TEXT,
        actions TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        last_access REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS workflow_drafts_owner ON workflow_drafts(owner, last_access);
    """,
)


class SqliteDraftStore:
    """Drafts in the shared SQLite file, on their own aiosqlite connection."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_per_owner: int = DEFAULT_MAX_PER_OWNER,
        clock: Clock = time.time,
    ) -> None:
        self._conn = conn
        self.ttl_s = ttl_s
        self.max_per_owner = max_per_owner
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()
        self._create_lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        db_path: str,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_per_owner: int = DEFAULT_MAX_PER_OWNER,
        clock: Clock = time.time,
    ) -> SqliteDraftStore:
        conn = await aiosqlite.connect(db_path)
        try:
            await conn.execute("PRAGMA busy_timeout = 5000")
            if db_path != ":memory:":
                await conn.execute("PRAGMA journal_mode = WAL")
            await cls._migrate(conn)
        except BaseException:
            await conn.close()
            raise
        return cls(conn, ttl_s=ttl_s, max_per_owner=max_per_owner, clock=clock)

    @staticmethod
    async def _migrate(conn: aiosqlite.Connection) -> None:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS drafts_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        async with conn.execute("SELECT COALESCE(MAX(version), 0) FROM drafts_migrations") as cur:
            row = await cur.fetchone()
        current = int(row[0]) if row else 0
        for version, script in enumerate(_MIGRATIONS, start=1):
            if version <= current:
                continue
            await conn.executescript(
                f"BEGIN;\n{script}\nINSERT INTO drafts_migrations(version, applied_at) VALUES ({version}, {time.time()});\nCOMMIT;"
            )

    async def close(self) -> None:
        await self._conn.close()

    def _lock(self, draft_id: str) -> asyncio.Lock:
        lock = self._locks.get(draft_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[draft_id] = lock
        return lock

    async def purge_expired(self) -> int:
        cutoff = self._clock() - self.ttl_s
        cur = await self._conn.execute("DELETE FROM workflow_drafts WHERE last_access <= ?", (cutoff,))
        await self._conn.commit()
        return cur.rowcount

    async def create(
        self,
        owner: str,
        *,
        name: str,
        entity: str,
        trigger_type: str,
        description: str = "",
        trigger_conditions: dict[str, Any] | None = None,
    ) -> Draft:
        # Serialise count-then-insert so concurrent starts cannot overshoot the limit.
        async with self._create_lock:
            await self.purge_expired()
            async with self._conn.execute(
                "SELECT COUNT(*) FROM workflow_drafts WHERE owner = ?", (owner,)
            ) as cur:
                row = await cur.fetchone()
            if row and int(row[0]) >= self.max_per_owner:
                raise DraftLimitError(
                    f"you already have {self.max_per_owner} open drafts (the limit); preview one or wait "
                    "for old drafts to expire (10 minutes after their last use)"
                )
            now = self._clock()
            draft = Draft(
                id=str(uuid.uuid4()),
                owner=owner,
                name=name,
                entity=entity,
                trigger_type=trigger_type,
                description=description,
                trigger_conditions=trigger_conditions,
                created_at=now,
                last_access=now,
            )
            await self._conn.execute(
                "INSERT INTO workflow_drafts(id, owner, name, entity, trigger_type, description, "
                "trigger_conditions, actions, created_at, last_access) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    draft.id,
                    owner,
                    name,
                    entity,
                    trigger_type,
                    description,
                    orjson.dumps(trigger_conditions).decode() if trigger_conditions is not None else None,
                    "[]",
                    now,
                    now,
                ),
            )
            await self._conn.commit()
            return draft

    async def _load(self, owner: str, draft_id: str) -> Draft:
        cutoff = self._clock() - self.ttl_s
        async with self._conn.execute(
            "SELECT id, owner, name, entity, trigger_type, description, trigger_conditions, actions, "
            "created_at, last_access FROM workflow_drafts WHERE id = ? AND owner = ? AND last_access > ?",
            (draft_id, owner, cutoff),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise DraftNotFoundError(draft_id)
        return Draft(
            id=row[0],
            owner=row[1],
            name=row[2],
            entity=row[3],
            trigger_type=row[4],
            description=row[5] or "",
            trigger_conditions=orjson.loads(row[6]) if row[6] else None,
            actions=[DraftAction.from_dict(a) for a in orjson.loads(row[7] or "[]")],
            created_at=float(row[8]),
            last_access=float(row[9]),
        )

    async def _save(self, draft: Draft) -> None:
        draft.last_access = self._clock()
        await self._conn.execute(
            "UPDATE workflow_drafts SET actions = ?, last_access = ? WHERE id = ? AND owner = ?",
            (
                orjson.dumps([a.to_dict() for a in draft.actions]).decode(),
                draft.last_access,
                draft.id,
                draft.owner,
            ),
        )
        await self._conn.commit()

    async def get(self, owner: str, draft_id: str) -> Draft:
        async with self._lock(draft_id):
            draft = await self._load(owner, draft_id)
            await self._save(draft)  # using a draft refreshes its TTL
            return draft

    async def update(self, owner: str, draft_id: str, mutate: Callable[[Draft], T]) -> T:
        async with self._lock(draft_id):
            draft = await self._load(owner, draft_id)
            result = mutate(draft)
            await self._save(draft)
            return result
