"""Following runs that execute on another replica, on PostgreSQL (``app/remote_runs.py``).

One reader per followed run per replica takes the run's events from the notifications
that carry them and reads the log only when it must: followers never each hold a
pooled connection per token (what made tokens reach followers a second late under a few
dozen live runs). These tests commit real steps to a real PostgreSQL and follow them
through the real listener: fan-out, gaps, an oversized step, a lost notification, a
follower far behind, a failing read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import psycopg
import pytest

from app.runs.remote import RemoteRuns
from storage.postgres.notify_payload import MAX_PAYLOAD_BYTES, decode_payload, encode_payload
from storage.records import NewRun, RunEvent, RunWrite
from storage.run_feed import MAX_CARRIED, RunWatch
from tests.support.postgres import TestPostgres

# --- the payload ------------------------------------------------------------------------


def ev(seq: int, name: str = "content_chunk", text: str = "") -> RunEvent:
    return RunEvent(seq, name, orjson.dumps({"content": text or f"token {seq}"}).decode())


def test_a_payload_carries_its_events_when_they_fit() -> None:
    events = [ev(1, text="tab\there, newline\nthere, NUL \x00, ünïcödé 🙂"), ev(2, "message_complete")]
    payload = encode_payload("run:with:colons", events)
    assert len(payload.encode()) < MAX_PAYLOAD_BYTES and "\x00" not in payload
    assert decode_payload(payload) == ("run:with:colons", events)


def test_an_oversized_step_sends_only_its_run_and_last_id() -> None:
    big = [ev(7, text="é" * 5000)]  # fits in characters, not in UTF-8 bytes
    assert encode_payload("r1", big) == "r1:7"
    assert decode_payload("r1:7") == ("r1", None)


@pytest.mark.parametrize("payload", ["r1:3\nnot an event", "r1:3\nx\tcontent_chunk\t{}", "r1:3\n3\t\t{}", "r1"])
def test_a_payload_that_does_not_parse_means_read_the_log(payload: str) -> None:
    assert decode_payload(payload)[1] is None


def test_a_watcher_far_behind_reads_the_log_instead_of_collecting() -> None:
    watch = RunWatch()
    watch.take()
    watch.deliver([ev(i) for i in range(1, MAX_CARRIED)])
    watch.deliver([ev(MAX_CARRIED), ev(MAX_CARRIED + 1)])
    assert watch.take() == ([], True)


# --- following through PostgreSQL ---------------------------------------------------------


@pytest.fixture
async def storage(pg_server: TestPostgres) -> AsyncIterator[Any]:
    from storage.postgres import open_postgres_storage

    with pg_server.database() as url:
        opened = await open_postgres_storage(url)
        try:
            assert opened.run_feed is not None
            await asyncio.wait_for(opened.run_feed.connected.wait(), 10)
            yield opened
        finally:
            await opened.close()


async def new_run(storage: Any, run_id: str = "r1") -> None:
    await storage.runs.create(NewRun(run_id, f"conv-{run_id}", "alice", "knowledge", b"{}"))


async def follow_all(remote: RemoteRuns, run_id: str, after: int = 0, idle: float = 30) -> list[int]:
    """The ids a follower receives, in order, until the run's end."""
    seqs: list[int] = []
    async for frames in remote.follow(run_id, after, idle=idle):
        if frames is not None:
            seqs += [int(line[4:]) for line in frames.decode().splitlines() if line.startswith("id: ")]
    return seqs


async def until(check: Any, what: str) -> None:
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_followers_of_one_run_share_one_reader_fed_by_notifications(storage: Any) -> None:
    await new_run(storage)
    remote = RemoteRuns(storage.runs, storage.run_feed, poll_s=30)
    followers = [asyncio.create_task(follow_all(remote, "r1")) for _ in range(3)]
    await until(lambda: remote.followed_runs == 1 and storage.run_feed.watched == 1, "the tail to watch")
    for seq in range(1, 200):
        await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(seq)]))
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(200, "message_complete")], finished=True))
    got = await asyncio.wait_for(asyncio.gather(*followers), 20)
    assert got == [list(range(1, 201))] * 3
    # One look at the log when the tail started; every later event came in a notification.
    assert remote.log_reads == 1
    assert remote.followed_runs == 0 and storage.run_feed.watched == 0


async def test_an_oversized_step_a_gap_and_a_lost_notification_are_read_from_the_log(
    storage: Any, pg_server: TestPostgres
) -> None:
    await new_run(storage)
    remote = RemoteRuns(storage.runs, storage.run_feed, poll_s=0.2)
    follower = asyncio.create_task(follow_all(remote, "r1"))
    await until(lambda: storage.run_feed.watched == 1, "the tail to watch")
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(1)]))
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(2, text="x" * 9000)]))  # not carried
    await until(lambda: remote.log_reads >= 2, "the oversized step to be read from the log")
    # Events committed without a notification (as if it were lost): only the poll finds them.
    async with await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True) as conn:
        for seq in (3, 4):
            await conn.execute("INSERT INTO run_events(run_id, seq, event, data) VALUES (%s, %s, %s, %s)",
                               ("r1", seq, "content_chunk", ev(seq).data))
    await until(lambda: remote.log_reads >= 3, "the slow poll")
    # A notification carrying 6 before 5 is known: a gap, so the tail reads the log.
    async with await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True) as conn:
        await conn.execute("INSERT INTO run_events(run_id, seq, event, data) VALUES (%s, %s, %s, %s)",
                           ("r1", 5, "content_chunk", ev(5).data))
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(6, "message_complete")], finished=True))
    assert await asyncio.wait_for(follower, 20) == [1, 2, 3, 4, 5, 6]


async def test_a_follower_behind_the_window_catches_up_from_the_log(storage: Any) -> None:
    await new_run(storage)
    remote = RemoteRuns(storage.runs, storage.run_feed, poll_s=30, window=4, batch=3)
    live: list[int] = []

    async def first() -> None:
        async for frames in remote.follow("r1", 0, idle=30):
            if frames is not None:
                live.extend(int(x[4:]) for x in frames.decode().splitlines() if x.startswith("id: "))

    task = asyncio.create_task(first())
    await until(lambda: storage.run_feed.watched == 1, "the tail to watch")
    for seq in range(1, 21):
        await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(seq)]))
    await until(lambda: len(live) >= 20, "the first follower")
    assert remote._tails["r1"].base > 2  # the shared tail no longer holds events 3, 4, ...
    late = asyncio.create_task(follow_all(remote, "r1", after=2))
    await until(lambda: remote._tails["r1"].followers == 2, "the late follower to join")
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(21, "message_complete")], finished=True))
    assert await asyncio.wait_for(late, 20) == list(range(3, 22))
    assert await asyncio.wait_for(late, 20) == list(range(3, 22))
    await asyncio.wait_for(task, 20)
    assert live == list(range(1, 22))


class FailingReads:
    """The real store, whose log reads fail once the tail has started."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.fail = False

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]:
        if self.fail:
            raise psycopg.OperationalError("the database went away")
        return list(await self.store.events_after(run_id, after, limit))


async def test_a_failing_log_read_reaches_every_follower_and_the_next_one_starts_afresh(storage: Any) -> None:
    await new_run(storage)
    store = FailingReads(storage.runs)
    remote = RemoteRuns(store, storage.run_feed, poll_s=30)  # type: ignore[arg-type]
    followers = [asyncio.create_task(follow_all(remote, "r1")) for _ in range(2)]
    await until(lambda: storage.run_feed.watched == 1, "the tail to watch")
    store.fail = True
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(2)]))  # a gap: must read the log
    for task in followers:
        with pytest.raises(psycopg.OperationalError):
            await asyncio.wait_for(task, 20)
    assert remote.followed_runs == 0
    store.fail = False
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(1)]))
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(3, "message_complete")], finished=True))
    assert await asyncio.wait_for(follow_all(remote, "r1"), 20) == [1, 2, 3]


async def test_a_quiet_run_gets_heartbeats_and_a_follower_leaving_stops_the_reader(storage: Any) -> None:
    await new_run(storage)
    remote = RemoteRuns(storage.runs, storage.run_feed, poll_s=30)
    stream = remote.follow("r1", 0, idle=0.1)
    assert await asyncio.wait_for(anext(stream), 10) is None  # a heartbeat, nothing stored yet
    await storage.runs.commit(RunWrite("r1", "conv-r1", "alice", events=[ev(1)]))
    assert await asyncio.wait_for(anext(stream), 10) == ev(1).wire
    await stream.aclose()
    assert remote.followed_runs == 0
    await until(lambda: storage.run_feed.watched == 0, "the reader to stop watching")
