"""Workflow drafts: a workflow built one action at a time, kept in ``storage``.

A draft outlives a single request (the user confirms each step in conversation), so it is
durable; it belongs to one caller (another caller's draft id reads as "not found"); it
expires 10 minutes after its last use; each caller may hold a limited number; and updates
to one draft are serialised with an asyncio lock so two concurrent tool calls cannot lose
each other's action. Nothing here talks to the backend: the tools validate first, then
take the lock only for the read-modify-write.

The rows live behind ``storage.interfaces.DraftStore``; :class:`Drafts` holds the rules
(TTL, per-owner limit, locks, the errors the model reads) and the clock.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from storage.draft_records import Draft, DraftAction
from storage.interfaces import DraftStore

__all__ = [
    "Draft",
    "DraftAction",
    "DraftError",
    "DraftLimitError",
    "DraftNotFoundError",
    "DraftStore",
    "Drafts",
    "draft_payload",
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


def draft_payload(draft: Draft) -> dict[str, Any]:
    """The workflow payload (names, ``after`` links) that the transformer resolves."""
    payload: dict[str, Any] = {
        "name": draft.name,
        "is_active": True,
        "entity": draft.entity,
        "trigger_type": draft.trigger_type,
        "actions": [],
        "edges": [],
    }
    if draft.description:
        payload["description"] = draft.description
    if draft.trigger_conditions:
        payload["trigger_conditions"] = draft.trigger_conditions
    for a in draft.actions:
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


class Drafts:
    """What the draft tools call: the draft rules over a ``DraftStore``."""

    def __init__(
        self,
        store: DraftStore,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        max_per_owner: int = DEFAULT_MAX_PER_OWNER,
        clock: Clock = time.time,
    ) -> None:
        self._store = store
        self.ttl_s = ttl_s
        self.max_per_owner = max_per_owner
        self._clock = clock
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def _live_after(self) -> float:
        return self._clock() - self.ttl_s

    def _lock(self, draft_id: str) -> asyncio.Lock:
        lock = self._locks.get(draft_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[draft_id] = lock
        return lock

    async def purge_expired(self) -> int:
        return await self._store.purge(live_after=self._live_after())

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
        live_after = self._live_after()
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
        # The store purges, counts and inserts atomically: concurrent starts cannot
        # overshoot the limit.
        if not await self._store.insert(draft, live_after=live_after, max_per_owner=self.max_per_owner):
            raise DraftLimitError(
                f"you already have {self.max_per_owner} open drafts (the limit); preview one or wait "
                "for old drafts to expire (10 minutes after their last use)"
            )
        return draft

    async def _load(self, owner: str, draft_id: str) -> Draft:
        draft = await self._store.load(owner, draft_id, live_after=self._live_after())
        if draft is None:
            raise DraftNotFoundError(draft_id)
        return draft

    async def _save(self, draft: Draft) -> None:
        draft.last_access = self._clock()
        await self._store.save(draft)

    async def get(self, owner: str, draft_id: str) -> Draft:
        """The live draft (refreshing its TTL) or :class:`DraftNotFoundError`."""
        async with self._lock(draft_id):
            draft = await self._load(owner, draft_id)
            await self._save(draft)  # using a draft refreshes its TTL
            return draft

    async def update(self, owner: str, draft_id: str, mutate: Callable[[Draft], T]) -> T:
        """Run ``mutate`` on the live draft under its lock and save it; return its result."""
        async with self._lock(draft_id):
            draft = await self._load(owner, draft_id)
            result = mutate(draft)
            await self._save(draft)
            return result
