"""The ``LimitStore`` contract: request counts and unfinished-run counts, shared by
every process on the database, the same on every engine."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage.interfaces import LimitStore
from storage.records import NewRun, RunWrite

T0 = 1_700_000_040.0  # the start of a one-minute window


@pytest.fixture
def limits(store_engine: Any) -> LimitStore:
    return store_engine.limits


async def test_requests_are_admitted_up_to_the_limit_and_refusals_are_not_counted(limits: LimitStore) -> None:
    got = [await limits.hit("u", 3, T0 + i) for i in range(5)]
    assert [d.allowed for d in got] == [True, True, True, False, False]
    assert got[3].retry_after_s is not None and 1 <= got[3].retry_after_s <= 60
    assert (await limits.hit("other", 3, T0 + 5)).allowed  # keys are counted apart


async def test_the_previous_window_weighs_by_its_overlap(limits: LimitStore) -> None:
    for i in range(4):
        assert (await limits.hit("u", 4, T0 + 50 + i)).allowed
    # 15 s into the next window, 3/4 of the previous one still overlaps the last minute:
    # room for one more.
    assert [(await limits.hit("u", 4, T0 + 75 + i)).allowed for i in range(2)] == [True, False]
    # 45 s in, a quarter of it overlaps: 4 - 1 = 3 in this window, one already taken.
    assert [(await limits.hit("u", 4, T0 + 105 + i / 10)).allowed for i in range(3)] == [True, True, False]
    # Two windows on, nothing of the first one counts.
    assert (await limits.hit("u", 4, T0 + 185)).allowed


async def test_concurrent_requests_never_exceed_the_limit(limits: LimitStore) -> None:
    got = await asyncio.gather(*(limits.hit("burst", 7, T0 + 1) for _ in range(20)))
    assert sum(d.allowed for d in got) == 7


async def test_prune_forgets_windows_that_no_longer_count(limits: LimitStore) -> None:
    await limits.hit("u", 5, T0)
    await limits.hit("u", 5, T0 + 60)
    assert await limits.prune(T0 + 65) == 0  # the previous window still counts
    assert await limits.prune(T0 + 125) == 1
    assert (await limits.hit("u", 5, T0 + 125)).allowed


async def test_unfinished_runs_counts_queued_and_running_runs_of_the_user(store_engine: Any) -> None:
    runs, limits = store_engine.runs, store_engine.limits
    for i, user in enumerate(["alice", "alice", "alice", "bob"]):
        await runs.create(NewRun(id=f"r{i}", conversation_id=f"c{i}", user_id=user, context_type="knowledge",
                                 input=b"{}"))
    await runs.commit(RunWrite("r1", "c1", "alice", status="running"))
    await runs.commit(RunWrite("r2", "c2", "alice", status="completed", finished=True))
    assert sorted(await limits.unfinished_runs("alice", 10)) == ["r0", "r1"]
    assert len(await limits.unfinished_runs("alice", 1)) == 1
    assert await limits.unfinished_runs("bob", 10) == ["r3"]
    assert await limits.unfinished_runs("carol", 10) == []
