"""RunStore, both engines: cancels marked for whichever process executes a run, and the
per-user cap counted in the admitting transaction (issue 21, items 3 and 4)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from storage.errors import TooManyRuns
from storage.records import MultitaskPolicy, NewRun, RunEvent, RunWrite


def new_run(run_id: str, conversation: str = "c", user: str = "alice", multitask: MultitaskPolicy = "enqueue",
            cap: int | None = None, ending: tuple[str, ...] = ()) -> NewRun:
    return NewRun(run_id, conversation, user, "knowledge", orjson.dumps({"message": "hi"}), multitask=multitask,
                  lease_owner="A", lease_s=30, max_unfinished_per_user=cap, ending_unwritten=ending)


async def finish(store: Any, run_id: str, conversation: str = "c") -> None:
    await store.commit(RunWrite(run_id, conversation, "alice", events=[RunEvent(1, "message_complete", "{}")],
                                status="completed", finished=True))


async def test_a_cancel_is_marked_on_an_unfinished_run_only(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("live", "c1"))
    await runs.create(new_run("done", "c2"))
    await finish(runs, "done", "c2")
    assert await runs.cancel_requests(["live", "done"]) == set()
    marked = await runs.request_cancel("live")
    assert marked is not None and marked.cancel_requested and marked.status == "queued"
    again = await runs.request_cancel("live")  # idempotent
    assert again is not None and again.cancel_requested
    ended = await runs.request_cancel("done")
    assert ended is not None and ended.status == "completed" and not ended.cancel_requested
    assert await runs.request_cancel("nope") is None
    assert await runs.cancel_requests(["live", "done", "nope"]) == {"live"}
    await finish(runs, "live", "c1")
    assert await runs.cancel_requests(["live"]) == set()  # ended: nothing left to cancel


async def test_a_claim_carries_the_mark(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(NewRun("orphan", "c", "alice", "knowledge", b"{}"))  # held by nobody
    await runs.request_cancel("orphan")
    claimed = await runs.claim("B", 5)
    assert [(r.id, r.cancel_requested) for r in claimed] == [("orphan", True)]


async def test_an_interrupting_run_marks_the_conversations_other_runs(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(new_run("first"))
    await runs.create(new_run("second"))  # enqueued: marks nothing
    assert await runs.cancel_requests(["first", "second"]) == set()
    admitted = await runs.create(new_run("third", multitask="interrupt"))
    assert admitted.others == ["first", "second"]
    assert await runs.cancel_requests(["first", "second", "third"]) == {"first", "second"}


async def test_the_cap_is_counted_in_the_admitting_transaction(store_engine: Any) -> None:
    runs = store_engine.runs
    for i in range(3):
        await runs.create(new_run(f"r{i}", f"c{i}", cap=3))
    with pytest.raises(TooManyRuns):
        await runs.create(new_run("r3", "c3", cap=3))
    assert await runs.get("r3") is None
    assert not await store_engine.conversations.exists("c3", "alice")  # nothing of it was kept
    await runs.create(new_run("bob", "cb", user="bob", cap=3))  # another user's count
    # A run the admitting process has ended, its ending not written yet, does not count.
    await runs.create(new_run("r4", "c4", cap=3, ending=("r0",)))
    await finish(runs, "r1", "c1")
    await finish(runs, "r2", "c2")
    await runs.create(new_run("r5", "c5", cap=3))


async def test_concurrent_admissions_never_pass_the_cap(store_engine: Any) -> None:
    runs = store_engine.runs

    async def admit(i: int) -> bool:
        try:
            await runs.create(new_run(f"r{i}", f"c{i}", cap=5))
        except TooManyRuns:
            return False
        return True

    admitted = await asyncio.gather(*(admit(i) for i in range(30)))
    assert sum(admitted) == 5
