"""Waits that shutdown cancels keep their cancel (Python 3.11's ``asyncio.wait_for``).

On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` waits in a task of its own and,
when the caller's cancel lands in the same turn of the loop as the event being set,
returns instead of raising: the cancel is lost. A loop that stops only on cancellation
then goes on - the way ``Leader``'s campaign held a worker's shutdown (6b556c5). Each
test here sets the event and cancels in the same turn, as ``tests/test_leader.py`` does.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import orjson

from app.runs.cancels import RunCancels
from storage.records import NewRun, StoredRun
from storage.run_feed import RunWatchers, set_within
from storage.sqlite import open_sqlite_storage


async def test_a_cancel_landing_as_the_event_is_set_is_kept() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(set_within(event, 60))
    await asyncio.sleep(0)  # the task is now parked in its wait
    event.set()
    waiting.cancel()
    done, _ = await asyncio.wait({waiting}, timeout=10)
    assert waiting in done and waiting.cancelled()


async def test_set_within_says_whether_the_event_came() -> None:
    event = asyncio.Event()
    assert await set_within(event, 0.01) is False
    event.set()
    assert await set_within(event, 60) is True


class CountingReads:
    """The real run store, counting the reads of a run that have returned: once the count
    moves, the waiting task has gone on to its wait (nothing is awaited in between)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.returned = 0

    async def get(self, run_id: str) -> StoredRun | None:
        stored: StoredRun | None = await self.store.get(run_id)
        self.returned += 1
        return stored


async def test_waiting_for_another_replicas_run_ends_when_cancelled_as_news_arrives(tmp_path: Path) -> None:
    """A run queued behind a run on another replica waits in ``RunCancels.wait_end``;
    the feed's news and the run's cancel (a user's, or the shutdown's) in the same turn:
    the wait ends cancelled. With ``wait_for`` it went on waiting - the run would then
    have executed although cancelled, and a drain waiting for it would wait for ever."""
    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    try:
        await storage.runs.create(NewRun("elsewhere", "c", "alice", "knowledge", orjson.dumps({"message": "hi"}),
                                         lease_owner="replica-b", lease_s=600))  # fmt: skip
        reads = CountingReads(storage.runs)
        feed = RunWatchers(logging.getLogger("test"))
        cancels = RunCancels(reads, local=lambda _: None, live=list, feed=feed)  # type: ignore[arg-type]
        waiting = asyncio.create_task(cancels.wait_end("elsewhere"))
        async with asyncio.timeout(10):
            while reads.returned < 1:
                await asyncio.sleep(0.01)
        feed.read_all()  # news of the run (every watcher woken)...
        waiting.cancel()  # ...and the cancel, in the same turn
        done, _ = await asyncio.wait({waiting}, timeout=10)  # not wait_for: its cancel would end the wait
        try:
            assert waiting in done, "the wait went on after its cancel"
            assert waiting.cancelled()
        finally:
            waiting.cancel()
    finally:
        await storage.close()


class PoolLikeReads:
    """The real run store behind a wait the test answers through ``asyncio.wait_for``, as
    psycopg's pool hands out a connection: the answer can land with the reader's cancel,
    which Python 3.11's ``wait_for`` then loses inside the store read."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.asked: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    async def get(self, run_id: str) -> StoredRun | None:
        connection: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.asked.put_nowait(connection)
        await asyncio.wait_for(connection, 60)
        stored: StoredRun | None = await self.store.get(run_id)
        return stored


async def test_waiting_for_another_replicas_run_ends_when_a_store_read_swallowed_the_cancel(tmp_path: Path) -> None:
    """The cancel lost inside a store read (a pooled connection handed over as it lands):
    the wait ends at its next turn instead of going on until the other run ends."""
    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    try:
        await storage.runs.create(NewRun("elsewhere", "c", "alice", "knowledge", orjson.dumps({"message": "hi"}),
                                         lease_owner="replica-b", lease_s=600))  # fmt: skip
        reads = PoolLikeReads(storage.runs)
        cancels = RunCancels(reads, local=lambda _: None, live=list, feed=None, poll_s=0.01)  # type: ignore[arg-type]
        waiting = asyncio.create_task(cancels.wait_end("elsewhere"))
        (await asyncio.wait_for(reads.asked.get(), 10)).set_result(None)  # a first read, answered
        connection = await asyncio.wait_for(reads.asked.get(), 10)
        connection.set_result(None)  # the next read's connection...
        waiting.cancel()  # ...and the cancel, in the same turn
        done, _ = await asyncio.wait({waiting}, timeout=10)
        try:
            assert waiting in done, "the wait went on after its cancel"
            assert waiting.cancelled()
        finally:
            waiting.cancel()
            while not reads.asked.empty():
                reads.asked.get_nowait().set_result(None)
    finally:
        await storage.close()


async def test_a_follower_of_another_replicas_run_ends_when_cancelled_as_news_arrives(tmp_path: Path) -> None:
    """A follower (``RemoteRuns.follow_events``) waits for its run's tail to change; the
    change and the follower's cancel (its client gone, the shutdown) in the same turn:
    the follower ends. With ``wait_for`` it went on waiting for the run."""
    from app.runs.remote import RemoteRuns

    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    try:
        await storage.runs.create(NewRun("elsewhere", "c", "alice", "knowledge", orjson.dumps({"message": "hi"}),
                                         lease_owner="replica-b", lease_s=600))  # fmt: skip
        remote = RemoteRuns(storage.runs, RunWatchers(logging.getLogger("test")), poll_s=3600)
        steps: list[object] = []

        async def follow() -> None:
            async for batch in remote.follow_events("elsewhere", 0, idle=3600):
                steps.append(batch)

        following = asyncio.create_task(follow())
        tail = None
        async with asyncio.timeout(10):  # the reader has looked at the (empty) log: the follower waits
            while tail is None or tail.watch is None or tail.watch.must_read or tail.watch.woke.is_set():
                tail = remote._tails.get("elsewhere")
                await asyncio.sleep(0.01)
        await asyncio.sleep(0)
        tail.publish()  # news of the run...
        following.cancel()  # ...and the follower's cancel, in the same turn
        done, _ = await asyncio.wait({following}, timeout=10)
        try:
            assert following in done, "the follower went on after its cancel"
            assert following.cancelled() and steps == []
        finally:
            following.cancel()
    finally:
        await storage.close()


async def test_a_leader_job_cancelled_while_it_stops_with_the_lead_stays_cancelled(tmp_path: Path) -> None:
    """``Leader._while_leading``: the lead is lost and the job, cancelled for it, takes a
    moment to stop; the close cancels the job's task meanwhile. The task ends cancelled
    with its job - it used to swallow that cancel with the job's and go back to wait for
    the lead, for ever (the close waited ``STOP_S`` and left it running)."""
    from app.ops.leader import FileLeader

    leader = FileLeader(tmp_path / "leader.lock", retry_s=3600)
    assert await leader.lock.try_acquire()
    started, stopping, release = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopping.set()
            await release.wait()  # a job slow to stop: the close's cancel lands meanwhile
            raise

    leader._take_lead()
    task = leader.when_leading(job, name="slow-to-stop")
    try:
        await asyncio.wait_for(started.wait(), 10)
        leader._step_down()  # the lead is lost: the job is cancelled and stops, slowly
        await asyncio.wait_for(stopping.wait(), 10)
        task.cancel()  # the close
        done, _ = await asyncio.wait({task}, timeout=10)
        assert task in done, "the job's task went back to wait for the lead after its own cancel"
        assert task.cancelled()
    finally:
        release.set()
        await leader.aclose()
    assert all(t.done() for t in leader._jobs)
