"""One way to follow a run, wherever it is: live in this process, live on another replica,
or finished (its log in the store). Every face (the native SSE, the OpenAI chunks, the AI
SDK parts) reads a run through ``follow`` and gets the same thing: batches of
``Followed`` events, each with its id, its typed event and its stored encoding.

Why one pipeline: the choice of where a run is read from used to be made in three places,
and the OpenAI and AI SDK faces re-parsed the native face's SSE bytes into untyped pairs.
Here the choice is made once, inside ``follow``; the native face sends each event's stored
frame (encoded once, when the run emitted it, and shared by every follower), and the other
faces dispatch on the typed event — kept from emission for a run of this process, decoded
once from the log otherwise. SSE framing (``retry:``, heartbeats) stays at the HTTP edge.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Literal, Protocol, cast

from app.runs.live_reader import read_durable
from app.runs.remote import RemoteRuns
from app.runs.run import Run
from events import AnyEvent, Error, Event, parse_event
from storage.errors import StorageUnavailable
from storage.interfaces import RunStore
from storage.records import TERMINAL_EVENT, UNFINISHED, RunEvent

__all__ = [
    "UNREADABLE",
    "UNSTORED",
    "Batches",
    "Followed",
    "Following",
    "LiveRuns",
    "follow",
    "follow_here",
    "unreadable",
]

log = logging.getLogger("agentchat.runs")

#: What a follower reading a run from the store shows when the store stops answering.
UNREADABLE = Error(
    message=(
        "The service cannot read this run from its database right now; the run was not stopped: "
        "reconnect with Last-Event-ID to follow it on."
    ),
    code="storage_unavailable",
)

#: What a follower of a run of this process shows when the run's writes failed for good
#: (``Run._storage_failed``) and its ending is not stored yet: not that ending under its
#: ids, which another process claiming the run once the database is back may give to
#: events of its own (the rescue write is refused then), but this, without an id.
UNSTORED = Error(
    message=(
        "The service could not store this run's progress and stopped it here; its ending is not stored yet: "
        "reconnect with Last-Event-ID once the service is back to read how the run ended."
    ),
    code="storage_unavailable",
)


class Followed:
    """One event of a run as a follower receives it.

    ``record`` is the stored event (``seq``, wire ``name``, compact JSON ``data``, the SSE
    ``wire`` frame); ``event`` is the typed event, decoded from ``data`` only when a face
    asks for it and the run did not keep it (so native followers never decode)."""

    __slots__ = ("_event", "record")

    def __init__(self, record: RunEvent, event: Event | None = None) -> None:
        self.record = record
        # Every event a run emits is one of the union's classes (``events.EVENT_TYPES``).
        self._event = cast(AnyEvent | None, event)

    @property
    def seq(self) -> int:
        return self.record.seq

    @property
    def name(self) -> str:
        return self.record.event

    @property
    def data(self) -> str:
        """The event's ``data`` as compact JSON, exactly as it went on the wire and into the log."""
        return self.record.data

    @property
    def wire(self) -> bytes:
        return self.record.wire

    @property
    def kept(self) -> bool:
        """True when the typed event is the one the run emitted (not decoded from the log):
        its numbers are exactly what was encoded (a JSON ``1`` read into a ``float`` field
        comes back as ``1.0``)."""
        return self._event is not None

    @property
    def event(self) -> AnyEvent:
        if self._event is None:
            self._event = cast(AnyEvent, parse_event(self.record.event, self.record.data))
        return self._event


#: Batches of events in commit order; ``None`` is an idle tick (no event for ``idle`` seconds).
Batches = AsyncGenerator[list[Followed] | None, None]


class LiveRuns(Protocol):
    """The part of the run manager ``follow`` needs: the runs of this process."""

    def get(self, run_id: str) -> Run | None: ...

    async def arrival(self, run_id: str, timeout: float) -> Run | None: ...


@dataclass(frozen=True, slots=True)
class Following:
    """A user's run found for reading after ``after``.

    ``ended``: nothing after ``after`` will ever come (a finished run the reader has
    caught up with, or a stored one with nothing newer); ``batches`` is then empty and a
    face may answer ``204`` instead of streaming."""

    run_id: str
    where: Literal["here", "remote", "stored"]
    ended: bool
    batches: Batches


async def follow(
    runs: LiveRuns,
    store: RunStore,
    remote: RemoteRuns | None,
    run_id: str,
    user_id: str,
    after: int,
    *,
    idle: float,
    on_leave: Callable[[Run], None] | None = None,
    cancels: bool = False,
) -> Following | None:
    """The user's run ``run_id`` from after ``after``: live here, live on another replica
    (this replica's shared tail of it), or replayed from the store; ``None`` when the user
    has no such run. ``on_leave`` is told when a follower of a run of this process leaves;
    ``cancels``: this follower is a chat's own client, whose leaving may cancel the chat
    (told to the run's replica when the run executes elsewhere)."""
    run = runs.get(run_id)
    if run is not None:
        if run.user_id != user_id:
            return None
        if run.finished and run.durable >= len(run.events) and await _deleted(store, run_id):
            return None  # its conversation was deleted (on any replica): not replayed from memory
        return follow_here(run, after, idle=idle, on_leave=on_leave, cancels=cancels, remote=remote)
    stored = await store.get(run_id)
    if stored is None or stored.user_id != user_id:
        return None
    if stored.status in UNFINISHED:
        if remote is not None:
            return Following(run_id, "remote", False, _remote(remote, run_id, after, idle, cancels=cancels))
        # No other process shares this store: an unfinished run not in memory here is one
        # this process is carrying on right now (claimed, read back, not yet registered:
        # a decided approval taken by the periodic claim, a run taken over) or will claim
        # at its next look. Not ended: the follower waits for it here.
        return Following(run_id, "here", False, _arriving(runs, store, run_id, after, idle, on_leave, cancels))
    first = await store.events_after(run_id, after)
    return Following(run_id, "stored", not first, _stored(store, run_id, first))


async def _deleted(store: RunStore, run_id: str) -> bool:
    """Whether a finished run this process still remembers is gone from the store (its
    user deleted its conversation, maybe through another replica). While the store cannot
    answer, the run is served from memory as before."""
    try:
        return await store.get(run_id) is None
    except StorageUnavailable:
        return False


def follow_here(
    run: Run,
    after: int,
    *,
    idle: float,
    on_leave: Callable[[Run], None] | None = None,
    cancels: bool = False,
    remote: RemoteRuns | None = None,
) -> Following:
    """A run of this process, from after ``after``, live (a face that just started it).
    With ``remote`` (replicas, workers), a run taken over by another process meanwhile is
    followed on from the store, as a run of another replica is."""
    ended = run.finished and after >= run.last_seq
    return Following(run.id, "here", ended, _live(run, after, idle, on_leave, cancels, remote))


async def _live(
    run: Run,
    after: int,
    idle: float,
    on_leave: Callable[[Run], None] | None,
    cancels: bool,
    remote: RemoteRuns | None,
) -> Batches:
    # Followers are counted while they read: a keyless chat's run is cancelled when its
    # last follower, of whatever kind, is gone for good (``on_leave``, at the HTTP edge,
    # decides).
    pos, ended = after, False
    run.followers += 1
    try:
        async for batch in read_durable(run, after, idle=idle):
            if batch:
                pos, ended = batch[-1].seq, batch[-1].event == TERMINAL_EVENT
            yield None if batch is None else [Followed(ev, run.typed(ev.seq)) for ev in batch]
    finally:
        run.followers -= 1
        if run.followers == 0:
            run.last_detached_at = time.time()
        if on_leave is not None:
            on_leave(run)
    if run.lost and not ended and remote is not None:
        # Another process took the run over (this one lost its lease, e.g. paused past
        # it): what was stored here is what the follower saw; the rest, ending included,
        # is the new owner's, read from the store under its ids, not made up here.
        async for remote_batch in _remote(remote, run.id, pos, idle, cancels=cancels):
            yield remote_batch
    elif run.storage_error is not None and not run.lost and not ended:
        # The store gave up on the run: its ending (error + message_complete failed) is
        # queued for the log but not in it, and may never be (a claim elsewhere wins).
        yield [_unlogged(UNSTORED)]


async def _arriving(
    runs: LiveRuns,
    store: RunStore,
    run_id: str,
    after: int,
    idle: float,
    on_leave: Callable[[Run], None] | None,
    cancels: bool,
) -> Batches:
    """A run of this store that this process has not registered yet, followed live once
    it is; an idle tick each ``idle`` seconds without it, when the store is asked again
    whether it ended meanwhile (then its log is replayed). Before, such a run was read
    from the store as if it had ended: 204 when nothing newer was stored, else the events
    stored so far and a stream that ended without ``message_complete``."""
    while True:
        run = runs.get(run_id) or await runs.arrival(run_id, idle)
        if run is not None:
            async for batch in _live(run, after, idle, on_leave, cancels, None):
                yield batch
            return
        try:
            stored = await store.get(run_id)
            page = [] if stored is None or stored.status in UNFINISHED else await store.events_after(run_id, after)
        except StorageUnavailable as exc:
            yield unreadable(run_id, exc)
            return
        if stored is None:  # deleted meanwhile
            return
        if stored.status not in UNFINISHED:  # it ended (or parked again) without being carried on here
            async for batch in _stored(store, run_id, page):
                yield batch
            return
        yield None


def _unlogged(error: Error) -> Followed:
    return Followed(_Unlogged(seq=0, event=error.name, data=error.to_json().decode()), error)


@dataclass(frozen=True, slots=True)
class _Unlogged(RunEvent):
    """An event a follower shows that is not in the run's log: its frame has no ``id:``,
    so a client's ``Last-Event-ID`` stays on the last logged event it saw."""

    @property
    def wire(self) -> bytes:
        return b"event: %s\ndata: %s\n\n" % (self.event.encode(), self.data.encode())


def unreadable(run_id: str, exc: StorageUnavailable) -> list[Followed]:
    """The end of a stream whose follower cannot read the run's log: ``error``
    (``storage_unavailable``), then the stream's clean end, as a follower of a run of
    this process ends when the store fails it (``Run._storage_failed``, ``UNSTORED``):
    no ``message_complete``. The run's real ending is decided by the process that owns
    the run and written to the log by its rescue writer (or the run is carried on by
    another process); a follower here knows none, so it makes none up and leaves no id:
    the client resumes with ``Last-Event-ID``. Before,
    the exception cut the connection mid-body (``peer closed connection``) and uvicorn
    logged a traceback."""
    log.warning(
        "a followed run's log cannot be read; its stream ends", extra={"run_id": run_id, "error": str(exc)[:300]}
    )
    return [_unlogged(UNREADABLE)]


async def _remote(remote: RemoteRuns, run_id: str, after: int, idle: float, *, cancels: bool = False) -> Batches:
    """A run read through the log (another replica's, or one let go here): the follower
    is kept through an outage (``RemoteRuns.follow_events``); it ends with ``unreadable``
    only when waiting cannot help (a SQLite file removed or replaced)."""
    batches = remote.follow_events(run_id, after, idle=idle, cancels=cancels)
    try:
        async for batch in batches:
            yield None if batch is None else [Followed(ev) for ev in batch]
    except StorageUnavailable as exc:
        yield unreadable(run_id, exc)
    finally:
        await batches.aclose()  # leave the shared tail now, not when collected


async def _stored(store: RunStore, run_id: str, page: list[RunEvent]) -> Batches:
    """A stored run's events, a page at a time, up to its terminal event."""
    while page:
        yield [Followed(ev) for ev in page]
        if page[-1].event == TERMINAL_EVENT:
            return
        try:
            page = await store.events_after(run_id, page[-1].seq)
        except StorageUnavailable as exc:
            yield unreadable(run_id, exc)
            return
