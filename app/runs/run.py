"""A live run: its ordered event log, shown to followers only once it is durable.

Events are appended with a per-run sequence (the SSE ``id:``) and queued to the run
store; a follower is shown an event only after the store committed it, so every event
a client ever saw can be replayed. A step's events and its checkpoint go in one write
(``emit_step``), which is what lets another process carry the run on after a crash.

If the store gives up on PostgreSQL (the database away past the retry window), the run
is let go without an ending (``_suspend``): its lease lapses and a claim carries it on
from its last checkpoint once the database is back, here or on another replica. Else
(SQLite: its file locked, unwritable, removed or replaced), the run ends loudly: the
events that were never shown are dropped, ``error`` (``storage_unavailable``) and
``message_complete`` take the next ids and their write is retried in the background
until the database is back (under the run's lease). They are not shown under those ids
before they are stored: another process may claim the run when the database is back and
give those ids to its own events. Followers end at once with an id-less ``error``
(``app.runs.follow``) and read on by ``Last-Event-ID`` from whatever the log holds once
it is back.

Followers read the log up to ``durable`` and wait on ``next_change``
(``app.runs.live_reader``): they never own a queue, so a slow reader costs O(1) memory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from app.runs.step_queue import QueuedStep, RunEventLog
from events import Error, Event, MessageComplete, RunEnding, TokenUsage
from llm.types import Message
from storage.errors import DatabaseLost, StorageError, StorageUnavailable
from storage.records import RunEvent, RunStatus, RunSummary, RunWrite, StoredRun

log = logging.getLogger("agentchat.runs")

__all__ = ["Run", "RunEvent", "terminal_event"]


def terminal_event(run: Run, status: RunEnding, *, turns: int = 0, usage: TokenUsage | None = None) -> MessageComplete:
    """The ``message_complete`` of ``run``: every ending of a run builds it here."""
    return MessageComplete(
        status=status,
        run_id=run.id,
        conversation_id=run.conversation_id,
        turns=turns,
        usage=usage if usage is not None else TokenUsage(input_tokens=0, output_tokens=0),
    )


@dataclass(slots=True)
class Run:
    id: str
    conversation_id: str
    user_id: str
    context_type: str
    created_at: float = field(default_factory=time.time)
    status: RunStatus = "queued"
    events: list[RunEvent] = field(default_factory=list)
    #: ``events[:durable]`` are committed; followers see only those.
    durable: int = 0
    task: asyncio.Task[None] | None = None
    finished_at: float | None = None
    followers: int = 0
    last_detached_at: float | None = None
    #: A chat's run (no ``Idempotency-Key``; AI SDK, streamed OpenAI) whose own client
    #: left once: from then on it is cancelled whenever its last follower leaves, of
    #: whatever kind (a reader of ``/events`` too), and none comes back, on any replica,
    #: within ``AGENT_CHAT_REATTACH_S`` (``app/server/run_streams``). Before, a reader
    #: that came and went after the chat's client stood the chat's timer down for good.
    cancel_when_alone: bool = False
    log: RunEventLog | None = None
    max_events: int = 100_000
    #: Set when the server releases the run at shutdown: followers end cleanly (no
    #: ``message_complete``) and the next process carries the run on.
    released: bool = False
    interrupting: bool = False
    storage_error: str | None = None
    #: The user's message, stored with the run's first step — or with its ending, when
    #: the run is cancelled before it started (queued behind another), so it is never lost.
    question: str | None = None
    #: The run's admission created its conversation (no id was sent): the conversation
    #: holds nothing before this run, so the agent skips the history query (issue 23).
    #: False for a run read back after a restart (its own first step may be stored).
    new_conversation: bool = False
    #: The client sent a title (``ChatInput.title``): the conversation has one from the
    #: admission on (that one, stored in its transaction, or the one it had), so the
    #: titler (``app/history.py``) asks no model. False for a run read back after a
    #: restart (its conversation was titled at admission all the same).
    client_titled: bool = False
    on_storage_failure: Callable[[Run, list[RunEvent]], None] | None = None
    #: Told when the run may have entered or left ``ending_unwritten`` (its ending
    #: appended, stored, refused, or dropped at a take-over): the registry keeps its
    #: per-user index of such runs by it, so admission never walks the user's runs.
    on_ending_state: Callable[[Run], None] | None = None
    #: Told when the run is abandoned here (another process took it over: ``/metrics``).
    on_abandon: Callable[[Run], None] | None = None
    #: A write the store gave up on (the database away past the writer's retry window)
    #: lets the run go instead of ending it: nothing acknowledged is lost. Set where a
    #: lapsed lease is claimed once the database is back (``PostgresRunStore.outage_passes``).
    survives_outage: bool = False
    #: Told when the run is let go for an outage (``/metrics``).
    on_suspend: Callable[[Run], None] | None = None
    #: The lease this process holds on the run: every step it writes checks it.
    lease_owner: str | None = None
    lease_s: float = 0.0
    #: The claim this copy of the run holds the lease under (``runs.lease_epoch``): every
    #: step carries it, so a copy left behind by a later claim — another process's, or
    #: this one's own taking a lapsed lease back — stores nothing more (issue 23).
    lease_epoch: int = 0
    #: Another process took the run over (this one lost its lease): nothing more is
    #: written or shown here; followers end without a terminal event and reconnect.
    lost: bool = False
    #: Let go because the store gave up on a write during an outage (``_suspend``), not
    #: taken over: this process still holds its lease until it lapses or is handed back.
    suspended: bool = False
    #: The run waits for a user's decision (``waiting_approval``), stored and held by no
    #: process: its followers end without a terminal event and it is forgotten here.
    parked: bool = False
    #: The runs of its conversation this one's turn waits for (``RunLauncher.start``): a
    #: claim carrying one of them on here must not wait for this one in turn.
    turn_after: frozenset[str] = frozenset()
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    #: Plain events emitted in this turn of the event loop, written as one step.
    _pending: list[RunEvent] = field(default_factory=list)
    _flush_scheduled: bool = False
    #: The typed event behind each appended ``RunEvent`` (by seq), so the faces that
    #: translate a live run (OpenAI, AI SDK) never decode what this process encoded.
    _typed: dict[int, Event] = field(default_factory=dict)

    @classmethod
    def restore(cls, stored: StoredRun, events: Sequence[RunEvent], log: RunEventLog | None, max_events: int) -> Run:
        """A run read back from the store after a restart; its log is durable as read."""
        run = cls(
            id=stored.id,
            conversation_id=stored.conversation_id,
            user_id=stored.user_id,
            context_type=stored.context_type,
            created_at=stored.created_at,
            status="running" if stored.status == "interrupted" else stored.status,  # type: ignore[arg-type]
            events=list(events),
            log=log,
            max_events=max_events,
        )
        run.durable = len(run.events)
        return run

    # --- writing ------------------------------------------------------------------

    def emit(self, event: Event) -> RunEvent | None:
        """Append one event. Events emitted in one turn of the event loop (a burst of
        tokens) are stored as one write; each is shown once that write commits."""
        written = self._append((event,))
        if not written:
            return None
        if isinstance(event, MessageComplete):
            self._flush_pending()
            self._queue(RunWrite(self.id, self.conversation_id, self.user_id, events=written), terminal=True)
            return written[-1]
        self._pending.extend(written)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_pending)
        return written[-1]

    def _flush_pending(self) -> None:
        self._flush_scheduled = False
        if self._pending:
            events, self._pending = self._pending, []
            # Built with the lease here (not copied in ``_queue``): this runs once per
            # burst of tokens, and ``dataclasses.replace`` costs more than the rest of it.
            leased = self.lease_owner is not None
            step = RunWrite(
                self.id,
                self.conversation_id,
                self.user_id,
                events=events,
                lease_owner=self.lease_owner,
                lease_s=self.lease_s if leased else 0.0,
                lease_epoch=self.lease_epoch if leased else 0,
            )
            self._queue(step, terminal=False)

    def emit_step(
        self,
        events: Sequence[Event] = (),
        *,
        checkpoint: bytes | None = None,
        messages: Sequence[Message] = (),
        status: RunStatus | None = None,
        finished: bool = False,
        summary: RunSummary | None = None,
        wait_s: float | None = None,
    ) -> asyncio.Future[None]:
        """Append events and store them together with the step's checkpoint, messages
        and status in one write. The returned future resolves when it is durable (it
        raises ``StorageUnavailable`` when it never will be)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.finished or self.storage_error is not None or self.lost:
            fut.set_exception(_Ended(self.storage_error or ("run taken over" if self.lost else "run already ended")))
            fut.exception()  # mark retrieved: callers may not await it
            return fut
        self._flush_pending()  # earlier plain events go first
        written = self._append(events)
        if status is not None and not finished:
            self.status = status
        step = RunWrite(
            self.id,
            self.conversation_id,
            self.user_id,
            events=written,
            checkpoint=checkpoint,
            checkpoint_seq=len(self.events) if checkpoint is not None else None,
            messages=messages,
            status=status,
            finished=finished,
            summary=summary,
            wait_s=wait_s,
        )
        self._queue(step, terminal=bool(written) and written[-1].event == MessageComplete.name, future=fut)
        return fut

    def _append(self, events: Sequence[Event]) -> list[RunEvent]:
        written: list[RunEvent] = []
        if self.lost:
            return written
        for event in events:
            if self.finished_at is not None:
                break
            if len(self.events) >= self.max_events and not isinstance(event, MessageComplete):
                continue
            ev = RunEvent(seq=len(self.events) + 1, event=event.name, data=event.to_json().decode())
            self.events.append(ev)
            self._typed[ev.seq] = event
            written.append(ev)
            if isinstance(event, MessageComplete):
                self.finished_at = time.time()
                self.status = event.status
                self._ending_changed()
        return written

    def _queue(self, step: RunWrite, *, terminal: bool, future: asyncio.Future[None] | None = None) -> None:
        upto = len(self.events)
        if self.lease_owner is not None and (step.lease_owner, step.lease_s, step.lease_epoch) != (
            self.lease_owner,
            self.lease_s,
            self.lease_epoch,
        ):
            step = dataclasses.replace(
                step, lease_owner=self.lease_owner, lease_s=self.lease_s, lease_epoch=self.lease_epoch
            )
        if terminal:
            step = dataclasses.replace(step, status=self.status, finished=True)
        queued = QueuedStep(self, upto, future)
        if self.log is None:
            queued.committed()
            return
        self.log.write(step, on_commit=queued.committed, on_fail=queued.failed)

    def mark_durable(self, upto: int) -> None:
        """The store committed this run's events up to ``upto`` (``QueuedStep``)."""
        if upto > self.durable and self.storage_error is None:
            self.durable = min(upto, len(self.events))
            if self.finished_at is not None:  # its ending may be stored now
                self._ending_changed()
            if not self._changed.is_set():
                self.notify()

    def _storage_failed(self, exc: BaseException) -> None:
        """End the run loudly, in order, with what followers have seen so far. Not a run
        taken over (``lost``): its log is its new owner's now, and an ending made up here
        would be shown to this process's followers under ids the log gives to other
        events (a step it queued before the take-over can still fail later, e.g. one the
        writer retried one by one after a sibling's lease refusal)."""
        if self.storage_error is not None or self.lost:
            return
        if self.survives_outage and isinstance(exc, StorageUnavailable) and not isinstance(exc, DatabaseLost):
            self._suspend(exc)
            return
        self.storage_error = str(exc)[:300]
        log.error("run ends: its events could not be stored", extra={"run_id": self.id, "error": self.storage_error})
        del self.events[self.durable :]
        self._pending.clear()
        self.finished_at = None
        tail: list[Event] = [
            Error(
                message="The service could not store this run's progress; it was stopped.", code="storage_unavailable"
            ),
            terminal_event(self, "failed"),
        ]
        written = []
        for event in tail:
            ev = RunEvent(seq=len(self.events) + 1, event=event.name, data=event.to_json().decode())
            self.events.append(ev)
            self._typed[ev.seq] = event
            written.append(ev)
        self.finished_at = time.time()
        self.status = "failed"
        # Not shown under its ids until stored (``ending_stored``): followers end now with
        # an id-less error (``app.runs.follow``); the rescue writer below stores it.
        self._ending_changed()
        self.notify()
        if self.on_storage_failure is not None:
            self.on_storage_failure(self, written)
        if self.task is not None and not self.task.done() and self.task is not asyncio.current_task():
            self.task.cancel()

    def ending_stored(self) -> None:
        """The rescue writer stored the ending ``_storage_failed`` made: it is the run's
        ending in the log now, shown under its ids to whoever reads the run from here on."""
        if self.lost or self.storage_error is None:
            return
        self.durable = len(self.events)
        self._ending_changed()
        self.notify()

    def storage_lost(self, exc: BaseException) -> None:
        """The database went away under this process (its file removed or replaced):
        end now, exactly as when a write of this run fails, not at its next write."""
        self._storage_failed(exc)

    def abandon(self) -> None:
        """Another process holds the run now: drop what was never stored, stop the agent
        without emitting anything, and let followers go: they read the run on from the
        store, where its new owner carries it on (``app.runs.follow`` hands them over on
        replicas and workers; elsewhere they reconnect)."""
        if self.lost or self.parked:  # a parked run's lease was handed back on purpose
            return
        log.warning("run taken over by another process; abandoned here", extra={"run_id": self.id})
        if self.on_abandon is not None:
            self.on_abandon(self)
        self._let_go()

    def _suspend(self, exc: BaseException) -> None:
        """The store gave up on a write of this run while the database was away: not an
        ending — the run was acknowledged, so it must not be lost. Let go exactly as a run
        taken over is (what was never stored dropped, the agent stopped, nothing emitted,
        followers handed to the store): its lease is no longer renewed, lapses, and once
        the database is back a claim — this process's or another replica's — carries it
        on from its last checkpoint to its one ending, as after a SIGKILL. Before, it
        ended ``storage_unavailable`` (4 of 8 runs in one 40 s PostgreSQL stop)."""
        if self.lost or self.parked:
            return
        log.warning(
            "run let go: its events could not be stored; it is carried on once the database is back",
            extra={"run_id": self.id, "error": str(exc)[:300]},
        )
        if self.on_suspend is not None:
            self.on_suspend(self)
        self.suspended = True
        self._let_go()

    def _let_go(self) -> None:
        self.lost = True
        del self.events[self.durable :]
        self._pending.clear()
        if self.finished_at is not None and not (self.events and self.events[-1].event == MessageComplete.name):
            # Its ending was dropped unstored: this copy did not end, the claim carrying
            # the run on ends it. Left ``finished`` (and ``completed``), the run cap's
            # read before a write (``RunRegistry.finished_here``) did not count it while
            # the store holds it unfinished, and the census counted it ended.
            self.finished_at = None
            self.status = "running"
        self.released = True
        self._ending_changed()  # an ending never stored is dropped with the rest
        self.notify()
        if self.task is not None and not self.task.done() and self.task is not asyncio.current_task():
            self.task.cancel()

    def park(self) -> None:
        """The run waits for a decision, stored: no longer this process's (followers end
        without a terminal event and read it from the store from now on)."""
        self.parked = True
        self.release()

    def release(self) -> None:
        """Stop following (server shutdown): followers end without a terminal event."""
        self.released = True
        self.notify()

    def notify(self) -> None:
        """Wake whoever waits on the run's next change (``next_change``): its followers
        and ``wait_*``, and a follower's idle clock (``app.runs.idle``) wakes them so."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def next_change(self) -> Coroutine[Any, Any, Literal[True]]:
        """Wait until the run changes next (an event made durable, its ending, a release,
        a take-over, a storage failure): what a follower (``app.runs.live_reader``)
        sleeps on between batches."""
        return self._changed.wait()

    def _ending_changed(self) -> None:
        if self.on_ending_state is not None:
            self.on_ending_state(self)

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    @property
    def ending_unwritten(self) -> bool:
        """Ended here with its ending not stored yet (still in the write queue, or
        refused and being written again by the rescue): the store still counts the run
        unfinished, the per-user run cap must not."""
        return self.finished_at is not None and self.durable < len(self.events)

    @property
    def last_seq(self) -> int:
        return len(self.events)

    # --- reading ------------------------------------------------------------------

    def typed(self, seq: int) -> Event | None:
        """The event appended here as ``seq`` (``None`` for one read back from the store)."""
        return self._typed.get(seq)

    async def wait_settled(self) -> None:
        """Until the run has ended *and its ending is stored* (or it was released): the
        next run of the conversation loads its history from the store."""
        while not (
            self.released
            or self.lost
            or self.storage_error is not None
            or (self.finished and self.durable >= len(self.events))
        ):
            await self.next_change()

    async def wait_finished(self) -> None:
        while not (self.finished or self.released):
            await self.next_change()


class _Ended(StorageError):
    """A step was emitted after the run ended (storage failure): nothing was written."""
