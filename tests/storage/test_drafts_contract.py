"""The ``DraftStore`` contract: every engine keeps drafts the same way.

Behaviour only, through the Protocol: ownership, liveness by ``live_after``, the
per-owner limit (also under concurrency), saving actions, purging.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from storage.draft_records import Draft, DraftAction
from storage.interfaces import DraftStore

T0 = 1_700_000_000.0


@pytest.fixture
def drafts(store_engine: Any) -> DraftStore:
    return store_engine.drafts


def draft(owner: str = "alice", *, at: float = T0, **kw: Any) -> Draft:
    fields: dict[str, Any] = {"name": "Order flow", "entity": "sales.orders", "trigger_type": "on_create"}
    fields.update(kw)
    return Draft(id=str(uuid.uuid4()), owner=owner, created_at=at, last_access=at, **fields)


async def test_an_inserted_draft_loads_back_whole(drafts: DraftStore) -> None:
    d = draft(description="mail on every order", trigger_conditions={"field": "total", "op": "gt", "value": 100})
    assert await drafts.insert(d, live_after=T0 - 600, max_per_owner=5) is True
    loaded = await drafts.load("alice", d.id, live_after=T0 - 600)
    assert loaded == d


async def test_optional_fields_round_trip_empty(drafts: DraftStore) -> None:
    d = draft()
    await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    loaded = await drafts.load("alice", d.id, live_after=T0 - 600)
    assert loaded is not None
    assert loaded.description == "" and loaded.trigger_conditions is None and loaded.actions == []


async def test_another_owners_draft_reads_as_absent(drafts: DraftStore) -> None:
    d = draft("alice")
    await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    assert await drafts.load("bob", d.id, live_after=T0 - 600) is None
    assert await drafts.load("alice", "no-such-draft", live_after=T0 - 600) is None


async def test_a_draft_is_live_only_while_last_access_is_after_live_after(drafts: DraftStore) -> None:
    d = draft(at=T0)
    await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    assert await drafts.load("alice", d.id, live_after=T0 - 0.5) is not None
    assert await drafts.load("alice", d.id, live_after=T0) is None  # last_access == live_after: dead
    assert await drafts.load("alice", d.id, live_after=T0 + 1) is None


async def test_save_stores_actions_and_refreshes_last_access(drafts: DraftStore) -> None:
    d = draft(at=T0)
    await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    d.actions.append(DraftAction("Check", "check_inventory", {"threshold": 2}))
    d.actions.append(
        DraftAction("Mail", "send_email", {"to": ["ops@example.com"]}, is_active=False,
                    description="tell ops", after="Check:insufficient")
    )
    d.last_access = T0 + 500
    await drafts.save(d)
    # still live long after its creation, because it was used
    loaded = await drafts.load("alice", d.id, live_after=T0 + 100)
    assert loaded is not None
    assert loaded.actions == d.actions and loaded.last_access == T0 + 500
    assert loaded.created_at == T0 and loaded.name == d.name


async def test_save_touches_only_the_owners_draft(drafts: DraftStore) -> None:
    d = draft("alice")
    await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    intruder = Draft(d.id, "bob", d.name, d.entity, d.trigger_type,
                     actions=[DraftAction("X", "delay", {})], created_at=T0, last_access=T0 + 10)
    await drafts.save(intruder)
    loaded = await drafts.load("alice", d.id, live_after=T0 - 600)
    assert loaded is not None and loaded.actions == [] and loaded.last_access == T0
    assert await drafts.load("bob", d.id, live_after=T0 - 600) is None


async def test_insert_refuses_past_the_per_owner_limit(drafts: DraftStore) -> None:
    for _ in range(3):
        assert await drafts.insert(draft("alice"), live_after=T0 - 600, max_per_owner=3)
    refused = draft("alice")
    assert await drafts.insert(refused, live_after=T0 - 600, max_per_owner=3) is False
    assert await drafts.load("alice", refused.id, live_after=T0 - 600) is None
    assert await drafts.insert(draft("bob"), live_after=T0 - 600, max_per_owner=3)  # own budget


async def test_dead_drafts_do_not_count_and_go_on_insert(drafts: DraftStore) -> None:
    old = [draft("alice", at=T0) for _ in range(3)]
    for d in old:
        await drafts.insert(d, live_after=T0 - 600, max_per_owner=3)
    later = T0 + 601
    fresh = draft("alice", at=later)
    assert await drafts.insert(fresh, live_after=later - 600, max_per_owner=3)
    assert await drafts.load("alice", fresh.id, live_after=later - 600) is not None
    # the dead ones are gone for good, whatever liveness a later reader asks for
    assert all([await drafts.load("alice", d.id, live_after=0.0) is None for d in old])


async def test_concurrent_inserts_never_overshoot_the_limit(drafts: DraftStore) -> None:
    candidates = [draft("alice") for _ in range(12)]
    accepted = await asyncio.gather(
        *(drafts.insert(d, live_after=T0 - 600, max_per_owner=4) for d in candidates)
    )
    assert accepted.count(True) == 4
    stored = [await drafts.load("alice", d.id, live_after=T0 - 600) for d in candidates]
    assert [s is not None for s in stored] == accepted


async def test_purge_deletes_dead_drafts_and_counts_them(drafts: DraftStore) -> None:
    dead = [draft("alice", at=T0), draft("bob", at=T0 + 10)]
    live = draft("alice", at=T0 + 700)
    for d in (*dead, live):
        await drafts.insert(d, live_after=T0 - 600, max_per_owner=5)
    assert await drafts.purge(live_after=T0 + 100) == 2
    assert await drafts.purge(live_after=T0 + 100) == 0
    assert await drafts.load("alice", live.id, live_after=0.0) is not None
    assert await drafts.load("alice", dead[0].id, live_after=0.0) is None
