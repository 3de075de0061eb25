"""A follower on a sibling worker gets the run's log exactly, whatever the feed does.

Issue 23 item 3: one bench pass with ``--workers 2`` under heavy load reported runs that
ended ``complete`` with 2 of 60 tokens missing. The contract: a follower sees every
stored event exactly once, in order, and the log is the only truth — the worker feed
(``storage.sqlite.worker_feed``) only says when to look and what was committed. So here
a real follower (``RemoteRuns``, the one reader per followed run) on one SQLite store is
fed by hand-made frames written on a real Unix socket to its worker's feed, while the
steps commit through a second store on the same file that tells nobody: frames out of
commit order, duplicated, dropped, several in one write, one cut off mid-frame with its
connection, and one arriving before the follower's first look. The safety poll is out
of the way (an hour), so only the feed and the gap check by sequence number can bring
each event; the follower's stream must equal the stored log, event for event.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from pathlib import Path

import orjson

from app.runs.remote import RemoteRuns
from storage.feed_payload import encode_payload
from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite import open_sqlite_storage
from storage.sqlite.runs import SqliteRunStore
from storage.sqlite.worker_feed import WorkerFeed, runtime_dir

RUN = "run-1"


def ev(seq: int, name: str = "content_chunk") -> RunEvent:
    data = {"chunk": f"{seq - 1}@{seq};"} if name == "content_chunk" else {"status": "completed"}
    return RunEvent(seq, name, orjson.dumps(data).decode())


def frame(events: list[RunEvent]) -> bytes:
    """An ``E`` frame as a sibling sends it after the step committed."""
    body = b"E" + encode_payload(RUN, events).encode()
    return struct.pack(">I", len(body)) + body


async def settled(condition: Callable[[], bool], what: str) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), 10)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


class Follower:
    """One client of the run on the sibling: every event it was given, in order."""

    def __init__(self, remote: RemoteRuns, after: int) -> None:
        self.got: list[RunEvent] = []
        self.task = asyncio.create_task(self._follow(remote, after))

    async def _follow(self, remote: RemoteRuns, after: int) -> None:
        async with aclosing(remote.follow_events(RUN, after, idle=3600)) as batches:
            async for batch in batches:
                self.got.extend(batch or [])

    @property
    def last(self) -> int:
        return self.got[-1].seq if self.got else 0


@asynccontextmanager
async def sibling_of_a_silent_writer(tmp_path: Path) -> AsyncIterator[tuple[SqliteRunStore, RemoteRuns, WorkerFeed]]:
    """(the writing worker's run store, which announces nothing; the follower side's
    ``RemoteRuns`` with no safety poll to speak of; its worker feed)."""
    db = tmp_path / "agent.sqlite3"
    writing = await open_sqlite_storage(db)
    following = await open_sqlite_storage(db)
    feed = WorkerFeed(runtime_dir(db), scan_s=3600)
    await feed.start()
    try:
        await writing.runs.create(
            NewRun(id=RUN, conversation_id="c1", user_id="u1", context_type="knowledge", input=b"{}")
        )
        assert isinstance(writing.runs, SqliteRunStore)
        yield writing.runs, RemoteRuns(following.runs, feed, poll_s=3600), feed
    finally:
        await feed.close()
        await following.close()
        await writing.close()


async def test_the_followers_stream_equals_the_log_whatever_order_the_frames_come_in(tmp_path: Path) -> None:
    async with sibling_of_a_silent_writer(tmp_path) as (store, remote, feed):
        assert feed.path is not None

        async def commit(*events: RunEvent) -> None:
            await store.commit(RunWrite(RUN, "c1", "u1", events=list(events)))

        await commit(ev(1, "run_started"), ev(2))
        _, sibling = await asyncio.open_unix_connection(str(feed.path))
        # Subscribe-then-read: a frame for step 3 arrives before anyone follows the run.
        await commit(ev(3))
        sibling.write(frame([ev(3)]))
        await sibling.drain()
        first = Follower(remote, 0)
        await settled(lambda: first.last == 3, "the first look read the log")

        # Out of commit order: step 5's frame before step 4's.
        await commit(ev(4))
        await commit(ev(5))
        sibling.write(frame([ev(5)]))
        sibling.write(frame([ev(4)]))
        await sibling.drain()
        await settled(lambda: first.last == 5, "the gap before 5 was read from the log")

        # A duplicated frame, then two steps coalesced in one write.
        await commit(ev(6), ev(7))
        sibling.write(frame([ev(6), ev(7)]))
        sibling.write(frame([ev(6), ev(7)]))
        await commit(ev(8))
        await commit(ev(9))
        sibling.write(frame([ev(8)]) + frame([ev(9)]))
        await sibling.drain()
        await settled(lambda: first.last == 9, "the coalesced steps arrived")

        # A follower joining mid-run (a client resuming with Last-Event-ID 4).
        second = Follower(remote, 4)
        await settled(lambda: second.last == 9, "the resumed follower caught up")

        # A dropped frame (step 10 never announced): step 11's frame shows the gap.
        await commit(ev(10))
        await commit(ev(11))
        sibling.write(frame([ev(11)]))
        await sibling.drain()
        await settled(lambda: first.last == 11 and second.last == 11, "the dropped step was read")

        # A frame cut off mid-way with its connection: the feed says "read the log".
        await commit(ev(12))
        cut = frame([ev(12)])
        sibling.write(cut[: len(cut) // 2])
        await sibling.drain()
        sibling.close()
        await settled(lambda: first.last == 12 and second.last == 12, "the cut frame's step was read")

        # A new connection, and the run's end.
        _, sibling = await asyncio.open_unix_connection(str(feed.path))
        await commit(ev(13), ev(14, "message_complete"))
        sibling.write(frame([ev(13), ev(14, "message_complete")]))
        await sibling.drain()
        await asyncio.wait_for(asyncio.gather(first.task, second.task), 10)
        sibling.close()

        log = await store.events_after(RUN, 0)
        assert [e.seq for e in log] == list(range(1, 15))
        assert first.got == log
        assert second.got == log[4:]
