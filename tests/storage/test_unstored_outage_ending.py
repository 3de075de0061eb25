"""A run whose writes failed for good (the database away past the writer's retry window)
shows its followers here no ending under an id before that ending is stored.

Before, the owner showed ``error`` (``storage_unavailable``) + ``message_complete``
(failed) under the next ids at once and wrote them into the log afterwards. When the
outage outlasted the run's lease and another replica's claim won against that late
write once the database was back, the new owner's events took those ids: a client that
followed on the old owner had seen an ending the run never had, under ids the log gives
to other events, and its ``Last-Event-ID`` skipped the new owner's events.

Now the follower gets one ``error`` without an id and the stream ends; once the database
is back, a reconnect by ``Last-Event-ID`` reads whatever the log holds: the old owner's
rescued ending (its late write won), or the new owner's continuation (its claim won).
Both engines (the store's lease check is the engine's; SQLite's as ``serve --workers``
sets it); the outage is the old owner's
view of the store switched off (``Down``), the rest of the world keeps it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

import orjson
import pytest

from app.runs.counters import RunCounters
from app.runs.follow import Followed, follow, follow_here
from app.runs.remote import RemoteRuns
from app.runs.rescue import EndingRescue
from app.runs.run import Run
from storage.errors import StorageUnavailable
from storage.interfaces import RunStore
from storage.records import NewRun, RunEvent, RunWrite, StoredRun
from tests.support.deadline import within

LEASE_S = 0.3
COMPLETE = '{"status":"completed","run_id":"r1","conversation_id":"c1","turns":1}'

Seen = tuple[int | None, str, str]


class Down:
    """The run store as the old owner reaches it: while ``down``, a commit raises
    ``StorageUnavailable`` as the engines do when the database is away."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner
        self.down = True
        self.refused = 0

    async def commit(self, step: RunWrite) -> None:
        if self.down:
            self.refused += 1
            raise StorageUnavailable("the database is unreachable (test)")
        await self.inner.commit(step)


def _chunk(seq: int, who: str) -> RunEvent:
    return RunEvent(seq=seq, event="content_chunk", data=f'{{"chunk":"{who}{seq} "}}')


def _seen(item: Followed) -> Seen:
    """What the client gets of one frame: its id (``None`` when the frame has no
    ``id:`` line), its name and data."""
    wire = item.wire.decode()
    has_id = any(line.startswith("id:") for line in wire.split("\n"))
    return (item.seq if has_id else None, item.name, item.data)


async def _read_all(batches: AsyncIterator[list[Followed] | None]) -> list[Seen]:
    seen: list[Seen] = []
    async for batch in batches:
        seen += [_seen(item) for item in batch or ()]
    return seen


async def _until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    async def wait() -> None:
        while not predicate():
            await asyncio.sleep(0.02)

    await within(wait(), what, timeout)


@pytest.mark.parametrize("winner", ["old_owner_late_write", "new_owner_claim"])
async def test_an_ending_not_stored_is_shown_without_an_id_and_the_log_decides(
    store_engine: Any, winner: Literal["old_owner_late_write", "new_owner_claim"]
) -> None:
    store: RunStore = store_engine.runs
    if hasattr(store, "guard_leases"):
        store.guard_leases = True  # SQLite: several processes on the file (serve --workers) check leases
    await store.create(NewRun("r1", "c1", "alice", "workflow", b"{}", lease_owner="replica-a", lease_s=LEASE_S))
    ours = [_chunk(i, "a") for i in (1, 2, 3)]
    await store.commit(RunWrite("r1", "c1", "alice", events=ours, lease_owner="replica-a", lease_s=LEASE_S))

    reach = Down(store)
    rescue = EndingRescue(reach, RunCounters(), 0.02, lambda: None)  # type: ignore[arg-type]
    run = Run.restore(StoredRun("r1", "c1", "alice", "workflow", "running"), ours, None, 1000)
    run.lease_owner, run.lease_s = "replica-a", LEASE_S
    run.on_storage_failure = rescue.rescue
    remote = RemoteRuns(store, None, poll_s=0.05)
    try:
        batches = follow_here(run, 0, idle=30.0, remote=remote).batches
        first = await within(anext(batches), "the follower's first batch")
        assert first is not None and [ev.seq for ev in first] == [1, 2, 3]
        seen = [_seen(item) for item in first]

        # The writer gave up (its retry window spent): the run ends here.
        run.storage_lost(StorageUnavailable("database write failed after 3 attempts"))
        seen_during = await within(_read_all(batches), "the follower's end during the outage")
        assert [(i, n) for i, n, _ in seen_during] == [(None, "error")], (
            f"a follower was shown an ending the log does not hold: {seen_during}"
        )
        assert orjson.loads(seen_during[0][2])["code"] == "storage_unavailable"
        await _until(lambda: reach.refused >= 2, "the rescue meeting the outage")
        # A client that comes back while the database is still away ends the same way.
        again = await follow({"r1": run}, store, remote, "r1", "alice", 3, idle=30.0)
        assert again is not None
        assert [(i, n) for i, n, _ in await within(_read_all(again.batches), "a reconnect's end")] == [
            (None, "error")
        ]

        if winner == "new_owner_claim":
            # The lease lapsed in the outage; another replica claims the run first.
            deadline = time.monotonic() + 20
            claimed: list[StoredRun] = []
            while not claimed:
                assert time.monotonic() < deadline, "the other replica never claimed the run"
                claimed = [r for r in await store.claim("replica-b", 30.0) if r.id == "r1"]
                await asyncio.sleep(0.05)
            theirs = [_chunk(4, "b"), _chunk(5, "b"), RunEvent(seq=6, event="message_complete", data=COMPLETE)]
            await store.commit(
                RunWrite(
                    "r1", "c1", "alice", events=theirs, status="completed", finished=True,
                    lease_owner="replica-b", lease_s=30.0, lease_epoch=claimed[0].lease_epoch,
                )
            )
            reach.down = False  # the database is back for the old owner too
            await _until(lambda: run.lost, "the old owner's late write refused by the lease")
        else:
            reach.down = False
            await _until(lambda: not run.ending_unwritten, "the old owner's ending stored")

        stored = await store.events_after("r1", 0)
        log_holds = {ev.seq: (ev.event, ev.data) for ev in stored}
        assert stored[-1].event == "message_complete", stored
        if winner == "new_owner_claim":
            assert orjson.loads(stored[-1].data)["status"] == "completed"
        else:
            assert [ev.event for ev in stored[3:]] == ["error", "message_complete"], stored
            assert orjson.loads(stored[-1].data)["status"] == "failed"

        # The client resumes by Last-Event-ID and gets exactly what the log holds.
        resumed = await follow({"r1": run}, store, remote, "r1", "alice", 3, idle=30.0)
        assert resumed is not None
        seen += seen_during + await within(_read_all(resumed.batches), "the resumed stream")
        shown = [(i, n, d) for i, n, d in seen if i is not None]
        wrong = [s for s in shown if log_holds.get(s[0]) != (s[1], s[2])]
        assert not wrong, f"frames shown under ids the log gives to other events: {wrong}"
        assert [s[0] for s in shown] == [ev.seq for ev in stored], (shown, stored)
    finally:
        rescue.cancel_all()
