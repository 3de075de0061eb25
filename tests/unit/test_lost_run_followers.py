"""A follower of a run this process lost (another replica took it over: this one was
paused past its lease) reads the run on from the store, under the stored ids.

Before, the follower's stream just ended without a terminal event when the run was
abandoned here; a client following on the paused replica had to reconnect to see the
rest. Now it is handed to the store's reader (``RemoteRuns``, as for a run of another
replica) at the last event it saw, and gets the new owner's events and its one ending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.runs.follow import Followed, follow_here
from app.runs.remote import RemoteRuns
from app.runs.run import Run
from storage.records import NewRun, RunEvent, RunWrite, StoredRun
from tests.support.deadline import within

COMPLETE = '{"status":"completed","run_id":"r1","conversation_id":"c1","turns":1}'


def _chunk(seq: int, who: str) -> RunEvent:
    return RunEvent(seq=seq, event="content_chunk", data=f'{{"text":"{who}{seq} "}}')


async def _next(batches: AsyncIterator[list[Followed] | None]) -> list[Followed]:
    while True:
        batch = await within(anext(batches), "the follower's next batch")
        if batch is not None:
            return batch


async def test_a_follower_of_a_run_taken_over_reads_the_new_owners_events(storage: Any) -> None:
    store = storage.runs
    await store.create(NewRun("r1", "c1", "alice", "workflow", b"{}"))
    # What this process stored before it was paused, and what the new owner stored since.
    ours = [_chunk(i, "a") for i in (1, 2, 3)]
    theirs = [_chunk(i, "b") for i in (4, 5)] + [RunEvent(seq=6, event="message_complete", data=COMPLETE)]
    await store.commit(RunWrite("r1", "c1", "alice", events=ours))
    await store.commit(RunWrite("r1", "c1", "alice", events=theirs, status="completed", finished=True))

    stored = StoredRun("r1", "c1", "alice", "workflow", "running")
    run = Run.restore(stored, ours, None, 1000)
    remote = RemoteRuns(store, None, poll_s=0.05)
    batches = follow_here(run, 0, idle=30.0, remote=remote).batches
    try:
        first = await _next(batches)
        assert [ev.seq for ev in first] == [1, 2, 3]
        run.abandon()  # its lease check or renewal found the run taken over
        seen: list[Followed] = []
        while not seen or seen[-1].name != "message_complete":
            seen += await _next(batches)
        assert [(ev.seq, ev.name, ev.data) for ev in seen] == [(e.seq, e.event, e.data) for e in theirs]
        with pytest.raises(StopAsyncIteration):
            await within(anext(batches), "the follower's end")
    finally:
        await batches.aclose()
    assert remote.followed_runs == 0
