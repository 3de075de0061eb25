"""Following runs that execute in another process (another replica).

The run's log in the store is the source of truth, but reading it per token per
follower does not scale: with a few dozen live runs each follower held a pooled
connection on every wake-up, and tokens reached followers a second late at p99 (see
``bench/results/scaleout_probe_pool30.json``). So each replica keeps **one tail per
followed run**: a single reader that takes the run's new events from the store's feed
(PostgreSQL notifications, or the sibling workers' frames on one SQLite file, carry them
when they fit), reads the log only when it must (the
first look, a gap, an oversized step, a reconnect, a slow poll against a lost
notification), and fans the events out to every local follower of that run. A follower
that starts behind the tail's window catches up from the log on its own, then joins.

Ids are the stored ones and a tail never skips a gap (it waits for the missing step to
commit or reads the log), so a client resumes with ``Last-Event-ID`` on any replica.
Each follower is told to ``presence`` as it starts and leaves: the replica executing a
chat does not cancel it as abandoned while a client reads it here.

While the log cannot be read (the database away: ``StorageUnavailable``), a follower is
kept, not ended: heartbeats go on and the log is read again every ``outage_pause_s``,
until it answers; the run's events then come on, the ending of whichever process carries
it on included. Ending the stream instead told the client to reconnect, and a browser
``EventSource`` reconnecting while the database was still away was answered 503, which
it never retries: it closed for good, though the run was carried on to its end once the
database was back. A lost SQLite file (``DatabaseLost``) does not come back without a
restart: that ends the follower, as before; so does a run found deleted once the store
answers again (its conversation deleted meanwhile: its log would never grow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field

from app.runs.presence import FollowerPresence
from events import MessageComplete
from storage.errors import DatabaseLost, StorageUnavailable
from storage.interfaces import RunStore
from storage.records import RunEvent
from storage.run_feed import RunFeed, RunWatch, set_within

log = logging.getLogger("agentchat.runs")

TERMINAL_EVENT = MessageComplete.name


@dataclass(slots=True)
class _Tail:
    """The recent events of one run, as this replica's reader has them."""

    run_id: str
    #: Seq of the event just before ``events[0]`` (``events`` = base+1 .. last_seq).
    base: int
    events: list[RunEvent] = field(default_factory=list)
    done: bool = False
    error: BaseException | None = None
    followers: int = 0
    closed: bool = False
    #: Replaced on every change; followers wait on the one they saw.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    watch: RunWatch | None = None
    task: asyncio.Task[None] | None = None

    @property
    def last_seq(self) -> int:
        return self.base + len(self.events)

    def extend(self, events: Sequence[RunEvent]) -> tuple[int, bool]:
        """Append the events that continue the tail; (how many, whether a gap stopped it)."""
        added = 0
        for ev in events:
            if ev.seq <= self.last_seq:
                continue  # already here (read from the log and carried by a notification)
            if ev.seq != self.last_seq + 1:
                return added, True
            self.events.append(ev)
            added += 1
            if ev.event == TERMINAL_EVENT:
                self.done = True
                break
        return added, False

    def trim(self, window: int) -> None:
        if len(self.events) > 2 * window:
            drop = len(self.events) - window
            del self.events[:drop]
            self.base += drop

    def publish(self) -> None:
        old, self.changed = self.changed, asyncio.Event()
        old.set()


def _continuing(events: Sequence[RunEvent], pos: int) -> tuple[list[RunEvent], int, bool]:
    """The events that continue ``pos``, the new position, and whether the terminal event
    was among them."""
    out: list[RunEvent] = []
    for ev in events:
        if ev.seq <= pos:
            continue
        if ev.seq != pos + 1:  # never skip: wait for the gap to commit
            break
        out.append(ev)
        pos = ev.seq
        if ev.event == TERMINAL_EVENT:
            return out, pos, True
    return out, pos, False


class RemoteRuns:
    """This replica's followers of runs executing elsewhere: one reader per run.

    ``poll_s``: how long a quiet run goes without a look at its log. PostgreSQL does not
    drop notifications on a live connection (a reconnect makes every tail read the log),
    so this is a last resort, kept long: a run waiting on a slow tool costs a read per
    replica every ``poll_s``, not one per follower per second.

    Several worker processes on one SQLite file have a feed of their own (the workers
    announce committed steps to each other over sockets, ``storage.sqlite.worker_feed``);
    ``poll_s`` is then their safety net against a wake-up lost with a sibling's
    connection, and kept at a second or so."""

    def __init__(
        self,
        store: RunStore,
        feed: RunFeed | None,
        *,
        poll_s: float = 10.0,
        batch: int = 1000,
        window: int = 2048,
        presence: FollowerPresence | None = None,
        outage_pause_s: float = 2.0,
    ) -> None:
        self.store = store
        self.feed = feed
        #: How often a follower kept through an outage reads the log again.
        self.outage_pause_s = outage_pause_s
        #: Where this replica says which runs it has followers of (and hears the others').
        self.presence = presence
        self.poll_s = poll_s
        self.batch = batch
        self.window = window
        self._tails: dict[str, _Tail] = {}
        #: Reads of the log by tails (not by followers catching up): a figure for tests.
        self.log_reads = 0

    @property
    def followed_runs(self) -> int:
        return len(self._tails)

    async def follow(
        self, run_id: str, after: int, *, idle: float, cancels: bool = False
    ) -> AsyncIterator[bytes | None]:
        """``follow_events`` as SSE bytes (each event's stored frame)."""
        async with contextlib.aclosing(self.follow_events(run_id, after, idle=idle, cancels=cancels)) as batches:
            async for batch in batches:
                yield None if batch is None else b"".join(ev.wire for ev in batch)

    async def follow_events(
        self, run_id: str, after: int, *, idle: float, cancels: bool = False
    ) -> AsyncGenerator[list[RunEvent] | None, None]:
        """The run's events after ``after``, live, until its terminal event; ``None``
        after ``idle`` seconds without events (send a heartbeat), also while the log
        cannot be read (the module's docstring). ``cancels``: this follower is a chat's
        own client, whose leaving cancels the chat when no other client is left (said to
        the replica executing it through ``presence``)."""
        pos = max(0, after)
        tail = self._join(run_id, pos)
        if self.presence is not None:
            self.presence.attached(run_id)
        last_sent = time.monotonic()
        told = False  # that the follower waits for the database: said once
        waited = False  # through an outage: once the store answers, is the run still there?
        try:
            while True:
                changed = tail.changed
                unreadable: BaseException | None = None
                events: Sequence[RunEvent] = ()
                if pos < tail.base:  # behind the shared window: catch up from the log
                    try:
                        events = await self.store.events_after(run_id, pos, limit=min(self.batch, tail.base - pos))
                    except StorageUnavailable as exc:
                        unreadable = exc
                else:
                    events = tail.events[pos - tail.base :]
                frames, pos, done = _continuing(events, pos)
                if frames:
                    yield frames
                    last_sent = time.monotonic()
                if done:
                    return
                if frames:
                    continue
                if unreadable is None and tail.error is not None:
                    unreadable = tail.error
                if unreadable is None and waited:
                    # Its conversation may have been deleted meanwhile (its ending stored,
                    # then the run removed, while this follower was not looking): the log
                    # then never grows, and the follower would wait for ever. It ends
                    # instead, with no ending made up; a reconnect is answered 404.
                    try:
                        if await self.store.get(run_id) is None:
                            return
                        waited = False
                    except StorageUnavailable as exc:
                        unreadable = exc
                if unreadable is not None:
                    if not isinstance(unreadable, StorageUnavailable) or isinstance(unreadable, DatabaseLost):
                        raise unreadable
                    waited = True
                    if not told:
                        told = True
                        log.info(
                            "a followed run's log cannot be read; its follower waits for the database",
                            extra={"run_id": run_id, "error": str(unreadable)[:300]},
                        )
                    await asyncio.sleep(min(idle, self.outage_pause_s))
                    if time.monotonic() - last_sent >= idle:
                        yield None
                        last_sent = time.monotonic()
                    if tail.error is not None:  # a new tail reads the log again
                        self._leave(tail)
                        tail = self._join(run_id, pos)
                    continue
                if tail.done and pos >= tail.last_seq:
                    return  # resumed past the end
                wait = max(0.05, idle - (time.monotonic() - last_sent))
                await set_within(changed, wait)  # not wait_for: a cancel landing with a change is kept
                if not changed.is_set() and time.monotonic() - last_sent >= idle:
                    yield None
                    last_sent = time.monotonic()
        finally:
            self._leave(tail)
            if self.presence is not None:
                self.presence.detached(run_id, cancels=cancels)

    def _join(self, run_id: str, pos: int) -> _Tail:
        tail = self._tails.get(run_id)
        if tail is None or tail.error is not None:
            tail = _Tail(run_id, base=pos)
            self._tails[run_id] = tail
            tail.task = asyncio.create_task(self._read(tail), name=f"run-tail-{run_id}")
        tail.followers += 1
        return tail

    def _leave(self, tail: _Tail) -> None:
        tail.followers -= 1
        if tail.followers > 0:
            return
        tail.closed = True
        if self._tails.get(tail.run_id) is tail:
            del self._tails[tail.run_id]
        if tail.watch is not None:
            tail.watch.woke.set()  # the reader sees ``closed`` and stops

    async def _read(self, tail: _Tail) -> None:
        try:
            watching = self.feed.watch(tail.run_id) if self.feed is not None else contextlib.nullcontext(RunWatch())
            with watching as watch:
                tail.watch = watch
                while not (tail.closed or tail.done):
                    carried, must_read = watch.take()
                    added, gap = tail.extend(carried)
                    if must_read or gap:
                        added += await self._read_log(tail)
                    if added:
                        tail.trim(self.window)
                        tail.publish()
                    if tail.done or tail.closed:
                        break
                    if not await watch.wait(self.poll_s):
                        watch.must_read = True  # a notification may have been lost
        except Exception as exc:
            # The database away: each follower waits and says so once, and looks again
            # through a new tail every ``outage_pause_s`` - a warning per look was a line
            # per follower every 2 s for as long as the outage lasted.
            waited_out = isinstance(exc, StorageUnavailable) and not isinstance(exc, DatabaseLost)
            log.log(
                logging.DEBUG if waited_out else logging.WARNING,
                "reading a run followed here failed",
                extra={"run_id": tail.run_id, "error": str(exc)[:300]},
            )
            tail.error = exc
            if self._tails.get(tail.run_id) is tail:
                del self._tails[tail.run_id]
            tail.publish()

    async def _read_log(self, tail: _Tail) -> int:
        added = 0
        while True:
            self.log_reads += 1
            events = await self.store.events_after(tail.run_id, tail.last_seq, limit=self.batch)
            n, _ = tail.extend(events)
            added += n
            if tail.done or n == 0 or len(events) < self.batch:
                return added
