"""Runs of this process: admission, conversation order, cancellation, shutdown, recovery.

* **Admission** stores the run (and its user's message, in the run's input) and claims
  the conversation in one transaction before the client gets its 2xx.
* **Conversations are serialised**: a run starts only when the conversation's earlier
  runs have ended, per the request's ``multitask`` policy — ``enqueue`` (wait, then see
  their turns), ``reject`` (409 while one is live) or ``interrupt`` (cancel them).
* **Shutdown** stops admission, lets live runs go on for a grace period, then releases
  the rest as *interrupted* (their last checkpoint stands; followers reconnect).
* **Recovery** at start-up, before serving: every run that had not ended — after a
  SIGTERM or a SIGKILL — is carried on from its last checkpoint, with its event ids
  continuing where the log stops.
* **Leases** (``lease_s`` > 0, the hand-over bound): the process executing a run holds a
  lease on it from admission that lives ``0.7 × lease_s`` and is renewed every third of
  that; every step it writes checks the lease. Every ``lease_s / 10`` each process claims
  (atomically, in the store) the unfinished runs whose lease expired — their replica
  died — and carries them on like a restart would, so a dead replica's runs resume
  within about ``0.8 × lease_s`` plus the time to load their checkpoint. A
  process that finds its lease gone (it was paused past the lease) abandons the run
  without emitting anything: the new owner continues it.
* **Cancels from elsewhere**: a cancel (or an ``interrupt`` turn) that reaches a process
  not executing the run marks it in the store (``RunStore.request_cancel``). The owner
  learns at once through the engine's feed (PostgreSQL ``NOTIFY``), and otherwise on its
  next look at the store for its live runs (every ``cancel_poll_s``: processes sharing a
  SQLite file have no notifications); a run nobody held at that moment is ended
  ``cancelled`` by whoever claims it next.
* **Per-user cap**: the user's unfinished runs are counted in the transaction that stores
  the run (``NewRun.max_unfinished_per_user``), so concurrent admissions on any number of
  replicas cannot all take the last slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from app.ops.log_context import bind_run, note_run
from app.runs.cancels import RunCancels
from app.runs.records import Caller, ChatInput, Sealer, decode_run_input, encode_run_input
from app.runs.run import Run, RunEvent, terminal_event
from app.runs.state import RunState
from events import (
    Discarded,
    Error,
    Event,
    EventDecodeError,
    MessageComplete,
    RunResumed,
    RunStarted,
    parse_event,
)
from llm.types import Message
from storage.errors import LeaseLost, StorageUnavailable
from storage.interfaces import RunStore
from storage.records import UNFINISHED, NewRun, RunWrite, StoredRun
from storage.run_feed import RunFeed

log = logging.getLogger("agentchat.runs")

#: A written lease lives this share of ``lease_s``; others look for expired ones every
#: ``LEASE_CLAIM_SHARE × lease_s``: expiry plus one look stays within ``lease_s``.
LEASE_TTL_SHARE = 0.7
LEASE_CLAIM_SHARE = 0.1

#: ``agent(run, chat, caller, state=None, resumed=None)``: the agent loop.
AgentFn = Callable[..., Awaitable[None]]


@dataclass(slots=True)
class RunCounters:
    started: int = 0
    resumed: int = 0
    interrupted: int = 0
    storage_failures: int = 0
    rescued_writes: int = 0
    #: Run ownership across replicas (``/metrics``): renewals that failed, runs another
    #: replica took from this one, runs taken over here, leases handed back at shutdown.
    lease_renewals_failed: int = 0
    leases_lost: int = 0
    taken_over: int = 0
    leases_released: int = 0
    #: Copies of a run stopped here because a later claim (another replica's, then this
    #: one's again) left them behind while they still ran (issue 23's fencing).
    stale_copies_stopped: int = 0
    #: New runs refused because this replica carried ``max_live`` runs (503).
    refused_full: int = 0
    #: Runs parked here for an approval; decisions taken here, by kind; approvals this
    #: replica found expired.
    parked: int = 0
    approval_decisions: dict[str, int] = field(default_factory=dict)
    approvals_expired: int = 0


class ReplicaFull(Exception):
    """This replica carries as many live runs as it may (``AGENT_MAX_LIVE_RUNS``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"this replica carries {limit} live runs, its limit")
        self.limit = limit


@dataclass(slots=True)
class RunManager:
    store: RunStore
    agent: AgentFn
    grace_s: float = 600.0
    #: A finished run stays in memory this long (fast replays for clients that reconnect
    #: at once); after that its replay is read from the store and its memory is freed.
    finished_memory_s: float = 60.0
    max_events: int = 100_000
    rescue_retry_s: float = 2.0
    #: Run leases (0: none — every unfinished run is this process's at start-up).
    lease_s: float = 0.0
    #: At start-up, take every unfinished run, leased or not (one process per database,
    #: as with the embedded SQLite engine); later claims take expired leases only.
    exclusive: bool = False
    owner_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}")
    counters: RunCounters = field(default_factory=RunCounters)
    #: Called with the seconds from a dead replica's lease expiry to its run resumed here.
    on_take_over: Callable[[float], None] | None = None
    #: The engine's feed, where it has one (PostgreSQL): cancels asked for on other
    #: replicas arrive through it, and it wakes a run waiting for another replica's run.
    feed: RunFeed | None = None
    #: How often the store is asked whether a live run here was cancelled elsewhere: the
    #: only signal without a feed (several processes on one SQLite file); with one, a
    #: fallback at the lease-claim pace.
    cancel_poll_s: float = 0.25
    #: Encrypts the stored run input (the caller's ``Authorization``): ``app.keyring``.
    input_sealer: Sealer | None = None
    #: Live runs this replica carries at most (``AGENT_MAX_LIVE_RUNS``; 0: no cap). A run
    #: past it is refused (``ReplicaFull``) instead of slowing every live stream down.
    max_live: int = 0
    #: Admissions between their slot check and their registration (``submit`` awaits the
    #: store in between): counted with the live runs so concurrent requests cannot all
    #: pass the check at once.
    _admitting: int = 0
    _runs: dict[str, Run] = field(default_factory=dict)
    #: The same runs by user: admission asks about one user's runs (live, ending still
    #: unwritten, recent) and must not walk every run of the replica for it (issue 23:
    #: at 500 live runs that was four scans of them per admission).
    _by_user: dict[str, dict[str, Run]] = field(default_factory=dict)
    #: Runs here by their conversation, keyed by (user, conversation id): ids are a
    #: namespace per user, so two users' same-named conversations never order each other.
    _by_conversation: dict[tuple[str, str], list[Run]] = field(default_factory=dict)
    _closing: bool = False
    _rescues: set[asyncio.Task[None]] = field(default_factory=set)
    _lease_task: asyncio.Task[None] | None = None
    #: When this process last failed to reach the store (epoch seconds): a lease that
    #: lapsed around then lapsed because of the outage, not because its replica died.
    _store_unreachable_at: float | None = None
    #: Runs carried on here whose cut-off model turn was discarded: (from_seq, to_seq),
    #: known before their ``run_resumed`` is written (readers that cannot take text back).
    _discarded: dict[str, tuple[int, int]] = field(default_factory=dict)
    cancels: RunCancels = field(init=False)

    def __post_init__(self) -> None:
        self.cancels = RunCancels(self.store, self._runs.get, self.active, feed=self.feed, poll_s=self.cancel_poll_s)

    # --- admission --------------------------------------------------------------------

    async def submit(
        self, chat: ChatInput, caller: Caller, *, idempotency_key: str | None = None, run_cap: int | None = None
    ) -> Run:
        """Store and start a run (in the caller's own conversation of that id). Raises
        ``ConversationBusy`` (policy ``reject``), ``IdempotencyKeyUsed`` (the caller's
        key already names a run), ``TooManyRuns`` (the user has ``run_cap`` unfinished
        runs, counted atomically with the insert), ``ReplicaFull`` (this replica carries
        ``max_live`` runs: the slot is claimed before the first await, so the check and
        the claim are one step of the event loop) or ``StorageUnavailable``."""
        if self.max_live and len(self.active()) + self._admitting >= self.max_live:
            self.counters.refused_full += 1
            raise ReplicaFull(self.max_live)
        self._admitting += 1
        try:
            return await self._submit(chat, caller, idempotency_key, run_cap)
        finally:
            self._admitting -= 1

    async def _submit(
        self, chat: ChatInput, caller: Caller, idempotency_key: str | None, run_cap: int | None
    ) -> Run:
        run_id = f"run_{uuid.uuid4().hex}"
        conversation_id = chat.conversation_id or f"conv_{uuid.uuid4().hex}"
        others = await self.store.create(
            NewRun(
                id=run_id,
                conversation_id=conversation_id,
                user_id=caller.user_id,
                context_type=chat.context_type,
                input=encode_run_input(chat, caller, self.input_sealer),
                multitask=chat.multitask,
                idempotency_key=idempotency_key,
                lease_owner=self.owner_id if self.lease_s > 0 else None,
                lease_s=self.lease_ttl_s,
                max_unfinished_per_user=run_cap,
                ending_unwritten=self._ending_unwritten(caller.user_id) if run_cap is not None else (),
            )
        )
        run = self._new_run(run_id, conversation_id, caller.user_id, chat.context_type)
        run.question = chat.message
        run.new_conversation = chat.conversation_id is None
        note_run(run_id, conversation_id)  # the request's log lines name the run from here on
        earlier = self._live_in(caller.user_id, conversation_id)
        here = {r.id for r in self._by_conversation.get((caller.user_id, conversation_id), [])}
        # Unfinished runs of the conversation on other replicas: this one waits for their
        # endings too (with ``interrupt``, the store asked their owners to cancel them).
        elsewhere = [rid for rid in others if rid not in here]
        if chat.multitask == "interrupt":
            for other in earlier:
                if other.task is not None and not other.task.done():
                    log.info(
                        "interrupting an earlier run of the conversation", extra={"run_id": other.id, "by": run_id}
                    )
                    other.task.cancel()
        self._register(run)
        self.counters.started += 1
        chat = ChatInput(chat.message, chat.context_type, chat.context, conversation_id, chat.multitask)
        self._start(run, earlier, lambda: self.agent(run, chat, caller), elsewhere=elsewhere)
        return run

    def _ending_unwritten(self, user_id: str) -> tuple[str, ...]:
        """The user's runs that ended here whose ending the writer has not stored yet:
        the store still counts them unfinished, the cap must not."""
        return tuple(
            r.id for r in self._by_user.get(user_id, {}).values()
            if r.finished and (r.durable < len(r.events) or r.storage_error is not None)
        )

    def _new_run(self, run_id: str, conversation_id: str, user_id: str, context_type: str) -> Run:
        run = Run(
            id=run_id,
            conversation_id=conversation_id,
            user_id=user_id,
            context_type=context_type,
            log=self.store,
            max_events=self.max_events,
        )
        run.on_storage_failure = self._rescue
        run.on_abandon = self._lost
        if self.lease_s > 0:
            run.lease_owner, run.lease_s = self.owner_id, self.lease_ttl_s
        return run

    def _register(self, run: Run) -> None:
        self._runs[run.id] = run
        self._by_user.setdefault(run.user_id, {})[run.id] = run
        self._by_conversation.setdefault((run.user_id, run.conversation_id), []).append(run)

    def _forget(self, run_id: str) -> None:
        run = self._runs.pop(run_id)
        mine = self._by_user.get(run.user_id)
        if mine is not None:
            mine.pop(run_id, None)
            if not mine:
                del self._by_user[run.user_id]

    def _live_in(self, user_id: str, conversation_id: str) -> list[Run]:
        return [r for r in self._by_conversation.get((user_id, conversation_id), []) if not r.finished]

    def _start(
        self, run: Run, earlier: list[Run], body: Callable[[], Awaitable[None]], *, elsewhere: Sequence[str] = ()
    ) -> None:
        async def go() -> None:
            bind_run(run.id, run.conversation_id, run.user_id)  # every log line of the run names it
            for other in earlier:  # the conversation's turns run one after another
                await other.wait_settled()
            for other_id in elsewhere:
                await self.cancels.wait_end(other_id)
            await body()

        task = asyncio.create_task(go(), name=f"agent:{run.id}")
        run.task = task
        task.add_done_callback(lambda t: self._on_done(run, t))

    def _on_done(self, run: Run, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("agent task crashed", exc_info=task.exception(), extra={"run_id": run.id})
        if not run.finished and not run.released:
            # Cancelled before the agent began (a queued run), or a crash past the
            # agent's own handlers: the run still ends with exactly one terminal event.
            status: Literal["cancelled", "failed"] = "cancelled" if task.cancelled() else "failed"
            # The contract: ``run_started`` comes first, even for a run that never began.
            events: list[Event] = [] if run.events else [RunStarted(run_id=run.id, conversation_id=run.conversation_id)]
            if status == "failed":
                events.append(Error(message="internal error", code="internal_error"))
            events.append(terminal_event(run, status))
            never_started = run.status == "queued" and run.question is not None
            messages = [Message("user", run.question)] if never_started and run.question else []
            run.emit_step(events, messages=messages, finished=True)
        if run.parked and not run.finished:  # waits for a decision, stored: whoever claims it next carries it on
            self.counters.parked += 1
            if self._runs.get(run.id) is run:
                self._forget(run.id)
            # Later runs of the conversation then wait for its stored ending (``wait_end``),
            # wherever it is carried on, not for this released copy.
            mine = self._by_conversation.get((run.user_id, run.conversation_id), [])
            if run in mine:
                mine.remove(run)
        convo = self._by_conversation.get((run.user_id, run.conversation_id))
        if convo is not None and all(r.finished or r.released for r in convo):
            self._by_conversation.pop((run.user_id, run.conversation_id), None)

    # --- reading ------------------------------------------------------------------------

    def get(self, run_id: str) -> Run | None:
        """The run as this process knows it (``None`` for one another process took over:
        read it from the store)."""
        run = self._runs.get(run_id)
        return None if run is None or run.lost else run

    def discarded_at_recovery(self, run_id: str) -> tuple[int, int] | None:
        """The event ids a recovery here discarded from ``run_id`` (a cut-off model turn),
        or ``None``."""
        return self._discarded.get(run_id)

    def active(self) -> list[Run]:
        return [r for r in self._runs.values() if not r.finished and not r.released]

    def recent(self, user_id: str) -> list[Run]:
        """The user's runs still in memory (live, or finished within ``finished_memory_s``
        or still followed), newest first."""
        return sorted(self._by_user.get(user_id, {}).values(), key=lambda r: r.created_at, reverse=True)

    def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        """Drop this process's finished runs of a conversation its user deleted (issue 25):
        nothing replays them from memory after the store has forgotten them. Live ones
        were cancelled and ended before the delete; any left are kept (they end as usual)."""
        gone = [r.id for r in self._runs.values()
                if r.user_id == user_id and r.conversation_id == conversation_id and r.finished]
        for run_id in gone:
            self._forget(run_id)
            self._discarded.pop(run_id, None)
        return len(gone)

    def count_active(self, user_id: str) -> int:
        return sum(1 for r in self._by_user.get(user_id, {}).values() if not r.finished and not r.released)

    def census(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for run in self._runs.values():
            out[run.status] = out.get(run.status, 0) + 1
        return out

    @property
    def closing(self) -> bool:
        return self._closing

    # --- cancellation and housekeeping ----------------------------------------------------

    async def cancel(self, run: Run) -> None:
        """Cancel a run's task and wait (bounded) for its terminal event."""
        if run.task is not None and not run.task.done():
            run.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                await asyncio.wait_for(asyncio.shield(run.task), timeout=5)

    async def cancel_elsewhere(self, run_id: str, wait_s: float = 5.0) -> str:
        """Cancel a run this process does not execute (``app/runs/cancels.py``): its
        status once its ending is stored within ``wait_s``, else ``cancelling``."""
        return await self.cancels.request(run_id, wait_s)

    def sweep(self, now: float | None = None) -> int:
        """Forget finished runs nobody follows after ``finished_memory_s`` (their log is in
        the store); cancel running ones abandoned for ``grace_s``."""
        now = time.time() if now is None else now
        removed = 0
        for run_id, run in list(self._runs.items()):
            if run.lost and run.followers == 0:
                self._forget(run_id)
                self._discarded.pop(run_id, None)
                removed += 1
            elif (
                run.finished
                and run.finished_at is not None
                and now - run.finished_at > self.finished_memory_s
                and run.followers == 0
            ):
                if run.durable < len(run.events) or run.storage_error is not None:
                    continue  # its tail is still being written
                self._forget(run_id)
                self._discarded.pop(run_id, None)  # its run_resumed is in the log now
                removed += 1
            elif (
                not run.finished
                and run.followers == 0
                and run.last_detached_at is not None
                and now - run.last_detached_at > self.grace_s
                and run.task is not None
            ):
                log.info("cancelling abandoned run", extra={"run_id": run_id})
                run.task.cancel()
        if removed:
            release_free_memory()
        return removed

    # --- storage failure: the loud ending must reach the log eventually ----------------------

    def _rescue(self, run: Run, events: list[RunEvent]) -> None:
        self.counters.storage_failures += 1
        task = asyncio.get_running_loop().create_task(self._write_until_stored(run, events))
        self._rescues.add(task)
        task.add_done_callback(self._rescues.discard)

    async def _write_until_stored(self, run: Run, events: list[RunEvent]) -> None:
        # Under its lease: if another replica took the run over meanwhile, its ending is
        # that replica's to write, and this one must not overwrite the log with a failure.
        step = RunWrite(
            run.id, run.conversation_id, run.user_id, events=events, status="failed", finished=True,
            lease_owner=run.lease_owner, lease_s=run.lease_s, lease_epoch=run.lease_epoch,
        )
        while True:
            try:
                await self.store.commit(step)
            except StorageUnavailable:
                self._store_unreachable_at = time.time()
                await asyncio.sleep(self.rescue_retry_s)
                continue
            except LeaseLost:
                log.info("a failed run was taken over by another replica; it ends there", extra={"run_id": run.id})
                return
            except Exception as exc:  # e.g. a key another owner's write took: nothing to retry
                log.error("could not store a failed run's ending", extra={"run_id": run.id, "error": str(exc)[:300]})
                return
            self.counters.rescued_writes += 1
            log.info("stored the ending of a run that storage had failed", extra={"run_id": run.id})
            return

    # --- shutdown ---------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new runs from now on (503 with Retry-After)."""
        self._closing = True

    async def shutdown(self, grace_s: float) -> None:
        """Let live runs go on for ``grace_s``, then release the rest as interrupted."""
        self._closing = True
        tasks = [r.task for r in self.active() if r.task is not None and not r.task.done()]
        if tasks and grace_s > 0:
            await asyncio.wait(tasks, timeout=grace_s)
        left = [r for r in self.active() if r.task is not None and not r.task.done()]
        for run in left:
            run.interrupting = True
            assert run.task is not None
            run.task.cancel()
        if left:
            await asyncio.wait([r.task for r in left if r.task is not None], timeout=10)
            self.counters.interrupted += len(left)
            log.info("released live runs for the next process", extra={"runs": len(left)})
        for run in left:
            run.release()
        # Runs queued behind a released run were never started: mark them interrupted too.
        queued = [r.id for r in self._runs.values() if r.released and r.status == "queued"]
        with contextlib.suppress(StorageUnavailable):
            await self.store.set_status(queued, "interrupted")
        for task in list(self._rescues):
            task.cancel()
        self.cancels.close()
        if self._lease_task is not None:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lease_task
            self._lease_task = None
        if self.lease_s > 0:
            mine = [r.id for r in self._runs.values() if r.released and not r.lost and not r.finished]
            with contextlib.suppress(StorageUnavailable):
                await self.store.release_leases(self.owner_id, mine)
                self.counters.leases_released += len(mine)

    # --- recovery -----------------------------------------------------------------------------

    async def recover(self) -> int:
        """Carry on every run that had not ended when the last process stopped (with
        leases: every run whose lease expired, or all of them when ``exclusive``), then
        keep renewing this process's leases and taking over runs whose lease expires."""
        if self.lease_s <= 0:
            stored_runs = await self.store.unfinished()
        else:
            stored_runs = await self.store.claim(self.owner_id, self.lease_ttl_s, expired_only=not self.exclusive)
        for stored in stored_runs:
            await self._recover_one(stored)
            if not self.exclusive and self.lease_s > 0:
                self._taken_over(stored)  # a replica's leases expired: it died
        if stored_runs:
            log.info("carrying on runs from the previous process", extra={"runs": len(stored_runs)})
        if self.lease_s > 0 and self._lease_task is None and not self._closing:
            self._lease_task = asyncio.create_task(self._keep_leases(), name="run-leases")
        return len(stored_runs)

    def note_decision(self, decision: str) -> None:
        """A decision on a parked run was stored here (``/metrics``)."""
        self.counters.approval_decisions[decision] = self.counters.approval_decisions.get(decision, 0) + 1

    async def resume_decided(self, run_id: str) -> bool:
        """Carry on here a parked run whose approval was just decided (stored): claimed
        like a dead replica's run, so if another replica's periodic claim takes it first,
        that one carries it on instead. False when this process did not take it."""
        if self._closing:
            return False
        epoch = 0
        if self.lease_s > 0:
            claimed = await self.store.claim_one_epoch(run_id, self.owner_id, self.lease_ttl_s)
            if claimed is None:
                return False
            epoch = claimed
        stored = await self.store.get(run_id)
        if stored is None or stored.status not in UNFINISHED:
            return False
        await self._recover_one(replace(stored, lease_epoch=epoch))
        return True

    async def expire_approvals(self) -> int:
        """Make the parked runs whose approval deadline passed claimable (the claim ends
        them ``cancelled``); how many."""
        expired = await self.store.expire_waits()
        self.counters.approvals_expired += len(expired)
        if expired:
            log.info("approvals expired", extra={"runs": len(expired)})
        return len(expired)

    async def take_over(self) -> int:
        """Claim and carry on the runs whose lease expired (their process died)."""
        stored_runs = await self.store.claim(self.owner_id, self.lease_ttl_s, expired_only=True)
        taken = 0
        for stored in stored_runs:
            if self._closing:
                break
            mine = self._runs.get(stored.id)
            if mine is not None and not mine.lost and not mine.released:
                if mine.lease_epoch == stored.lease_epoch:
                    continue  # still running here (the lease lapsed while this loop was busy)
                # Another process claimed the run in between: this copy is stale. It stops
                # without an ending of its own (its queued steps are refused by the epoch
                # check) and the run resumes from its checkpoint under this claim.
                self._supersede(mine)
            if stored.lease_expired_at is None and _parked_account(stored) is not None:
                await self._recover_one(stored)  # a decided (or expired) approval, not a dead replica
                continue
            await self._recover_one(stored, reason=self._take_over_reason(stored))
            self._taken_over(stored)
            taken += 1
        if taken:
            log.info("took over runs whose lease expired", extra={"runs": taken, "owner": self.owner_id})
        return taken

    def _supersede(self, stale: Run) -> None:
        """Stop a copy of a run that a later claim left behind (issue 23): like a run taken
        over (nothing more written or shown, followers let go to re-read the log), and out
        of its conversation's turn order so the new copy does not wait for it."""
        self.counters.stale_copies_stopped += 1
        stale.abandon()
        convo = self._by_conversation.get((stale.user_id, stale.conversation_id), [])
        if stale in convo:
            convo.remove(stale)

    def _take_over_reason(self, stored: StoredRun) -> str:
        """Why a run with an expired lease is carried on here, for ``run_resumed``. A
        lease lapses when its replica stops renewing it: because it died, or because it
        could not reach the database. This process cannot see the other replica, but it
        can tell whether it was itself cut off from the database while that lease was
        last alive or since (one lease lifetime before its expiry): then an outage, not
        a death, is the honest account."""
        outage_at, expired_at = self._store_unreachable_at, stored.lease_expired_at
        if outage_at is not None and (expired_at is None or outage_at >= expired_at - self.lease_ttl_s):
            return "its lease lapsed while the database was unreachable; it was taken over"
        return "its replica stopped; another took it over"

    def _taken_over(self, stored: StoredRun) -> None:
        self.counters.taken_over += 1
        if self.on_take_over is not None and stored.lease_expired_at is not None:
            self.on_take_over(max(0.0, time.time() - stored.lease_expired_at))

    def _held(self) -> list[Run]:
        return [
            r for r in self._runs.values()
            if not r.lost and not r.released and (not r.finished or r.durable < len(r.events))
        ]

    @property
    def lease_ttl_s(self) -> float:
        """How long a written lease lives: short enough that expiry plus the next look
        for expired leases stays within ``lease_s`` (``AGENT_RUN_LEASE_S`` is the
        hand-over bound), long enough to survive two missed renewals."""
        return self.lease_s * LEASE_TTL_SHARE

    def leases_held(self) -> int:
        """Runs this process holds a lease on (0 without leases)."""
        return len(self._held()) if self.lease_s > 0 else 0

    async def renew_leases(self) -> int:
        """Renew this process's leases; abandon the runs another process took. Returns
        how many were abandoned."""
        held = self._held()
        if not held:
            return 0
        try:
            still = await self.store.renew(self.owner_id, [r.id for r in held], self.lease_ttl_s)
        except Exception:
            self.counters.lease_renewals_failed += 1
            raise
        lost = [r for r in held if r.id not in still and not r.finished]
        for run in lost:
            run.abandon()  # counted by ``_lost``
        return len(lost)

    def _lost(self, run: Run) -> None:
        """A run of this process was taken over by another (found by a renewal, or by a
        step whose write the lease refused)."""
        self.counters.leases_lost += 1

    async def _keep_leases(self) -> None:
        """Look for expired leases every tenth of ``lease_s``, so a dead replica's runs are
        carried on within ``lease_s``; renew this process's own in a task of their own
        (``_renew_leases``), so a claim or a cancel check that is slow under load cannot
        hold a renewal back until the leases lapse."""
        claim_every = self.lease_s * LEASE_CLAIM_SHARE
        # Cancels asked for on another process: the feed brings them at once; without one
        # (SQLite) this look is the signal, so it comes often — one indexed read, only
        # while runs are live here.
        cancel_every = self.cancel_poll_s if self.feed is None else max(self.cancel_poll_s, claim_every)
        renewer = asyncio.create_task(self._renew_leases(), name="run-lease-renewal")
        next_claim = next_cancel = time.monotonic()
        try:
            while not self._closing:
                now = time.monotonic()
                try:
                    if now >= next_claim and not self._closing:
                        next_claim = now + claim_every
                        await self.expire_approvals()
                        await self.take_over()
                    if now >= next_cancel and not self._closing:
                        next_cancel = now + cancel_every
                        await self.cancels.check()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the database is away: try again next tick
                    self._store_unreachable_at = time.time()
                    log.warning("run lease upkeep failed", extra={"error": str(exc)[:300]})
                await asyncio.sleep(max(0.05, min(next_claim, next_cancel) - time.monotonic()))
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew_leases(self) -> None:
        """Renew every third of the lease's lifetime, whatever else the upkeep waits on.
        Under load with ``--workers 2`` (300 paced runs) 2 runs lapsed when this waited in
        one loop behind the claims and the cancel checks — reads queued behind the
        followers' — and a sibling took them over mid-stream."""
        renew_every = self.lease_ttl_s / 3
        while not self._closing:
            started = time.monotonic()
            try:
                await self.renew_leases()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: try again next round
                self._store_unreachable_at = time.time()
                log.warning("run lease renewal failed", extra={"error": str(exc)[:300]})
            await asyncio.sleep(max(0.05, renew_every - (time.monotonic() - started)))

    async def _recover_one(self, stored: StoredRun, *, reason: str = "the service restarted") -> None:
        events = await self.store.events_after(stored.id, 0, limit=self.max_events)
        run = Run.restore(stored, events, self.store, self.max_events)
        run.on_storage_failure = self._rescue
        run.on_abandon = self._lost
        if self.lease_s > 0:
            run.lease_owner, run.lease_s, run.lease_epoch = self.owner_id, self.lease_ttl_s, stored.lease_epoch
        earlier = self._live_in(run.user_id, run.conversation_id)
        self._register(run)
        self.counters.resumed += 1
        if events and events[-1].event == MessageComplete.name:
            # It ended, but the process died before its status was written.
            run.finished_at = time.time()
            status = _status_of(events[-1])
            run.status = status  # type: ignore[assignment]
            await self.store.set_status([run.id], status)
            return
        cannot = _cannot_resume(stored, events)  # not ``reason``: that one goes into run_resumed
        if cannot is not None:
            log.warning("run cannot be carried on", extra={"run_id": run.id, "reason": cannot})
            run.emit_step(
                [
                    Error(
                        message=f"The run was interrupted and cannot be carried on: {cannot}.", code="run_interrupted"
                    ),
                    terminal_event(run, "failed"),
                ],
                finished=True,
            )
            return
        assert stored.input is not None
        try:
            chat, caller = decode_run_input(
                stored.input, conversation_id=stored.conversation_id, user_id=stored.user_id, sealer=self.input_sealer
            )
        except ValueError as exc:  # sealed under a key no longer configured
            log.warning("run cannot be carried on", extra={"run_id": run.id, "reason": str(exc)})
            run.emit_step(
                [Error(message=f"The run was interrupted and cannot be carried on: {exc}.", code="run_interrupted"),
                 terminal_event(run, "failed")],
                finished=True,
            )
            return
        run.question = chat.message
        if stored.checkpoint is None:  # admitted, never started: start it now
            self._start(run, earlier, lambda: self.agent(run, chat, caller))
            if stored.cancel_requested:  # asked while nobody held it: it ends cancelled
                self.cancels.cancel_here(run)
            return
        state = RunState.decode(stored.checkpoint)
        parked_cancel = state.awaiting is not None and stored.cancel_requested
        if state.awaiting is not None:
            # Carried on after its approval: it was admitted before any run of the
            # conversation here, and those wait for its ending — it must not wait for them.
            if parked_cancel:
                state.cancel_waiting()  # ended by its agent, the waiting call answered
            reason, earlier = state.approval_account() or reason, []
        discarded = (
            Discarded(
                from_seq=stored.checkpoint_seq + 1,
                to_seq=stored.last_seq,
                reason="a model turn was cut off; it is run again",
            )
            if stored.last_seq > stored.checkpoint_seq
            else None
        )
        resumed = RunResumed(
            run_id=run.id,
            reason=reason,
            checkpoint_seq=stored.checkpoint_seq,
            discarded=discarded,
            pending_tool_calls=len(state.pending.calls) - len(state.pending.results) if state.pending else 0,
        )
        if discarded is not None:
            self._discarded[run.id] = (discarded.from_seq, discarded.to_seq)
            log.info(
                "discarding a partial model turn",
                extra={"run_id": run.id, "from_seq": discarded.from_seq, "to_seq": discarded.to_seq},
            )
        self._start(run, earlier, lambda: self.agent(run, chat, caller, state=state, resumed=resumed))
        if stored.cancel_requested and not parked_cancel:  # asked while nobody held it: it ends cancelled
            self.cancels.cancel_here(run)


def release_free_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them otherwise, so RSS stays at
    its peak long after a burst of runs is gone). A no-op where there is no glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    with contextlib.suppress(AttributeError):
        libc.malloc_trim(0)


def _cannot_resume(stored: StoredRun, events: list[RunEvent]) -> str | None:
    if stored.input is None:
        return "its input was not kept"
    if stored.checkpoint is None and events:
        return "it has no checkpoint"
    if stored.checkpoint is not None:
        try:
            RunState.decode(stored.checkpoint)
        except (ValueError, KeyError, TypeError) as exc:
            return f"its checkpoint is unreadable ({exc})"
    return None


def _parked_account(stored: StoredRun) -> str | None:
    """Why a claimed run was parked for an approval, if it was (its checkpoint says)."""
    if stored.checkpoint is None:
        return None
    try:
        return RunState.decode(stored.checkpoint).approval_account()
    except (ValueError, KeyError, TypeError):
        return None


def _status_of(event: RunEvent) -> str:
    """The status a stored ``message_complete`` names (``failed`` if it cannot be read)."""
    try:
        ended = parse_event(event.event, event.data)
    except EventDecodeError:
        return "failed"
    return ended.status if isinstance(ended, MessageComplete) else "failed"
