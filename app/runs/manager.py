"""The runs of this process: admission, conversation order, cancellation, shutdown,
and carrying on the runs of a previous process.

* **Admission** stores the run (and its user's message, in the run's input) and claims
  the conversation in one transaction before the client gets its 2xx; this replica's cap
  on live runs is ``admission``'s, the per-user cap is counted by the store in the same
  transaction (``NewRun.max_unfinished_per_user``), so concurrent admissions on any
  number of replicas cannot all take the last slot.
* **Conversations are serialised**: a run starts only when the conversation's earlier
  runs have ended, per the request's ``multitask`` policy — ``enqueue`` (wait, then see
  their turns), ``reject`` (409 while one is live) or ``interrupt`` (cancel them).
* **Shutdown** stops admission, lets live runs go on for a grace period, then releases
  the rest as *interrupted* (their last checkpoint stands; followers reconnect).
* **Recovery** at start-up, before serving: every run that had not ended — after a
  SIGTERM or a SIGKILL — is carried on from its last checkpoint, with its event ids
  continuing where the log stops; what to do with each is ``recovery``'s decision.
* **Leases** across replicas, their renewal, take-over and epoch fencing: ``leases``.
* **Cancels from elsewhere**: ``cancels``; a run nobody held when its cancel was asked is
  ended ``cancelled`` by whoever claims it next.

The runs in memory are ``registry``'s; a run ending the store refused is ``rescue``'s;
how a stored run is carried on here, once found, is ``carry_on``'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from app.ops.log_context import note_run
from app.runs.admission import AdmissionSlots
from app.runs.cancels import RunCancels
from app.runs.carry_on import AgentFn, RunCarrier
from app.runs.counters import RunCounters
from app.runs.drain import Drain
from app.runs.launch import RunLauncher
from app.runs.leases import LEASE_CLAIM_SHARE, LeaseKeeper
from app.runs.records import Caller, ChatInput, Sealer, encode_run_input, request_fingerprint
from app.runs.registry import RunRegistry
from app.runs.rescue import EndingRescue
from app.runs.run import Run
from storage.interfaces import RunStore
from storage.records import UNFINISHED, NewRun, StoredRun
from storage.run_feed import RunFeed

log = logging.getLogger("agentchat.runs")


def new_replica_id() -> str:
    """``host:pid:random``: unique per process start, and readable - the host and pid say
    where to look. Stored as the owner of this replica's run leases, shown by ``/readyz``
    (``load.replica``) and carried by every log line of the app (``app.ops.logs``)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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
    #: This replica's id, its leases' owner (``new_replica_id``; the app's log lines carry it).
    owner_id: str = field(default_factory=new_replica_id)
    counters: RunCounters = field(default_factory=RunCounters)
    #: Called with the seconds from a dead replica's lease expiry to its run resumed here.
    on_take_over: Callable[[float], None] | None = None
    #: Called when a run's admission made the client's title its conversation's (issue 23).
    on_client_title: Callable[[], None] | None = None
    #: The engine's feed, where it has one (PostgreSQL): cancels asked for on other
    #: replicas arrive through it, and it wakes a run waiting for another replica's run.
    feed: RunFeed | None = None
    #: How often the store is asked whether a live run here was cancelled elsewhere: the
    #: only signal without a feed (several processes on one SQLite file); with one, a
    #: fallback at the lease-claim pace.
    cancel_poll_s: float = 0.25
    #: Encrypts the stored run input (the caller's ``Authorization``): ``app.keyring``.
    input_sealer: Sealer | None = None
    #: Live runs this replica carries at most (``AGENT_MAX_LIVE_RUNS``; 0: no cap).
    max_live: int = 0
    #: Live runs at most as the model pool has connections (``AdmissionSlots``; 0: no cap).
    model_pool: int = 0
    #: Whether a client reads the run through another replica now (``app.runs.presence``,
    #: set by the wiring where replicas share a feed): the sweep does not cancel it as
    #: abandoned; when that client leaves, the run's ``last_detached_at`` is reset.
    held_elsewhere: Callable[[str], bool] | None = None
    registry: RunRegistry = field(default_factory=RunRegistry)
    _closing: bool = False
    cancels: RunCancels = field(init=False)
    leases: LeaseKeeper = field(init=False)
    rescue: EndingRescue = field(init=False)
    admission: AdmissionSlots = field(init=False)
    launcher: RunLauncher = field(init=False)
    carrier: RunCarrier = field(init=False)

    def __post_init__(self) -> None:
        self.cancels = RunCancels(
            self.store, self.registry.runs.get, self.active, feed=self.feed, poll_s=self.cancel_poll_s
        )
        # Cancels asked for on another process: the feed brings them at once; without one
        # (SQLite) the lease upkeep's look is the signal, so it comes often — one indexed
        # read, only while runs are live here.
        claim_every = self.lease_s * LEASE_CLAIM_SHARE
        self.leases = LeaseKeeper(
            store=self.store,
            owner_id=self.owner_id,
            lease_s=self.lease_s,
            registry=self.registry,
            counters=self.counters,
            carry_on=self._carry_on_claimed,
            is_closing=lambda: self._closing,
            before_claim=self.expire_approvals,
            check_cancels=self.cancels.check,
            cancel_every_s=self.cancel_poll_s if self.feed is None else max(self.cancel_poll_s, claim_every),
            on_take_over=self.on_take_over,
        )
        self.rescue = EndingRescue(self.store, self.counters, self.rescue_retry_s, self.leases.note_unreachable)
        self.admission = AdmissionSlots(
            self.max_live, lambda: len(self.active()), self.counters, model_pool=self.model_pool
        )
        self.launcher = RunLauncher(
            self.store,
            self.max_events,
            self.registry,
            self.counters,
            self.cancels,
            self.rescue,
            lease_owner=self.owner_id if self.lease_s > 0 else None,
            lease_ttl_s=self.lease_ttl_s,
        )
        self.carrier = RunCarrier(
            self.store,
            lambda: self.agent,
            self.launcher,
            self.registry,
            self.counters,
            self.cancels,
            self.max_events,
            self.input_sealer,
        )

    @property
    def _runs(self) -> dict[str, Run]:
        """Every run in memory by id (tests look at it)."""
        return self.registry.runs

    # --- admission --------------------------------------------------------------------

    async def submit(
        self,
        chat: ChatInput,
        caller: Caller,
        *,
        idempotency_key: str | None = None,
        run_cap: int | None = None,
        deadline: float | None = None,
    ) -> Run:
        """Store and start a run (in the caller's own conversation of that id). Raises
        ``ConversationBusy`` (policy ``reject``), ``IdempotencyKeyUsed`` (the caller's
        key already names a run), ``TooManyRuns`` (the user has ``run_cap`` unfinished
        runs, counted atomically with the insert), ``ReplicaFull`` (this replica carries
        ``max_live`` runs) or ``StorageUnavailable`` — at the latest by ``deadline``
        (``time.monotonic()``: the request's storage budget) when one is given."""
        with self.admission.slot():
            return await self._submit(chat, caller, idempotency_key, run_cap, deadline)

    async def _submit(
        self, chat: ChatInput, caller: Caller, idempotency_key: str | None, run_cap: int | None, deadline: float | None
    ) -> Run:
        run_id = f"run_{uuid.uuid4().hex}"
        conversation_id = chat.conversation_id or f"conv_{uuid.uuid4().hex}"
        admitted = await self.store.create(
            NewRun(
                id=run_id,
                conversation_id=conversation_id,
                user_id=caller.user_id,
                context_type=chat.context_type,
                input=encode_run_input(chat, caller, self.input_sealer),
                multitask=chat.multitask,
                idempotency_key=idempotency_key,
                request_fingerprint=request_fingerprint(chat) if idempotency_key is not None else None,
                lease_owner=self.owner_id if self.lease_s > 0 else None,
                lease_s=self.lease_ttl_s,
                max_unfinished_per_user=run_cap,
                ending_unwritten=self.registry.ending_unwritten(caller.user_id) if run_cap is not None else (),
                title=chat.title,
            ),
            deadline=deadline,
        )
        others = admitted.others
        if admitted.titled and self.on_client_title is not None:
            self.on_client_title()
        run = self.launcher.new_run(run_id, conversation_id, caller.user_id, chat.context_type)
        run.question = chat.message
        run.new_conversation = chat.conversation_id is None
        run.client_titled = chat.title is not None
        note_run(run_id, conversation_id)  # the request's log lines name the run from here on
        earlier = self.registry.live_in(caller.user_id, conversation_id)
        here = self.registry.ids_in(caller.user_id, conversation_id)
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
        self.registry.register(run)
        self.counters.started += 1
        chat = replace(chat, conversation_id=conversation_id)
        self.launcher.start(run, earlier, lambda: self.agent(run, chat, caller), elsewhere=elsewhere)
        return run

    # --- reading ------------------------------------------------------------------------

    def get(self, run_id: str) -> Run | None:
        """The run as this process knows it (``None`` for one another process took over:
        read it from the store)."""
        run = self.registry.runs.get(run_id)
        return None if run is None or run.lost else run

    async def arrival(self, run_id: str, timeout: float) -> Run | None:
        """``get`` once the run is registered here (a claim of this process carrying it
        on), or ``None`` after ``timeout`` seconds (never a copy marked lost:
        ``RunRegistry.arrival`` waits past one)."""
        return await self.registry.arrival(run_id, timeout)

    def discarded_at_recovery(self, run_id: str) -> tuple[int, int] | None:
        """The event ids a recovery here discarded from ``run_id`` (a cut-off model turn),
        or ``None``."""
        return self.registry.discarded.get(run_id)

    def active(self) -> list[Run]:
        return self.registry.active()

    def recent(self, user_id: str) -> list[Run]:
        """The user's runs still in memory (live, or finished within ``finished_memory_s``
        or still followed), newest first."""
        return self.registry.recent(user_id)

    def forget_conversation(self, user_id: str, conversation_id: str) -> int:
        """Drop this process's finished runs of a conversation its user deleted."""
        return self.registry.forget_conversation(user_id, conversation_id)

    def count_active(self, user_id: str) -> int:
        return self.registry.count_active(user_id)

    def census(self) -> dict[str, int]:
        return self.registry.census()

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
        the store); cancel running ones abandoned for ``grace_s`` — not one a client reads
        through another replica (``held_elsewhere``)."""
        now = time.time() if now is None else now
        removed = self.registry.sweep(now, self.finished_memory_s)
        for run_id, run in list(self.registry.runs.items()):
            if (
                not run.finished
                and run.followers == 0
                and run.last_detached_at is not None
                and now - run.last_detached_at > self.grace_s
                and run.task is not None
                and not (self.held_elsewhere is not None and self.held_elsewhere(run_id))
            ):
                log.info("cancelling abandoned run", extra={"run_id": run_id})
                run.task.cancel()
        return removed

    # --- shutdown ---------------------------------------------------------------------------

    def begin_shutdown(self) -> None:
        """Refuse new runs from now on (503 with Retry-After)."""
        self._closing = True

    async def shutdown(self, grace_s: float, cut: asyncio.Event | None = None) -> None:
        """Let live runs go on for ``grace_s`` (less once ``cut`` is set), then release the
        rest as interrupted (``app/runs/drain.py``)."""
        self._closing = True
        await Drain(self.store, self.registry, self.counters, self.rescue, self.cancels, self.leases)(grace_s, cut)

    # --- leases (``app/runs/leases.py``) ------------------------------------------------------

    @property
    def lease_ttl_s(self) -> float:
        """How long a written lease lives (``LeaseKeeper.ttl_s``)."""
        return self.leases.ttl_s

    def leases_held(self) -> int:
        """Runs this process holds a lease on (0 without leases)."""
        return self.leases.held() if self.lease_s > 0 else 0

    async def renew_leases(self) -> int:
        """Renew this process's leases; abandon the runs another process took."""
        return await self.leases.renew()

    async def take_over(self) -> int:
        """Claim and carry on the runs whose lease expired (their process died)."""
        return await self.leases.take_over()

    # --- recovery -----------------------------------------------------------------------------

    async def recover(self) -> int:
        """Carry on every run that had not ended when the last process stopped (with
        leases: every run whose lease expired, or all of them when ``exclusive``), then
        keep renewing this process's leases and taking over runs whose lease expires."""
        if self.lease_s <= 0:
            stored_runs = await self.store.unfinished()
            for stored in stored_runs:  # no claim to count them (``RESUMES_AFTER_CLAIM``)
                await self.store.count_resume(stored.id)
        else:
            stored_runs = await self.store.claim(self.owner_id, self.lease_ttl_s, expired_only=not self.exclusive)
        for stored in stored_runs:
            await self.carrier.carry_on(stored)
            if not self.exclusive and self.lease_s > 0:
                self.leases.note_taken_over(stored)  # a replica's leases expired: it died
        if stored_runs:
            log.info("carrying on runs from the previous process", extra={"runs": len(stored_runs)})
        if self.lease_s > 0:
            self.leases.start()
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
        await self.carrier.carry_on(replace(stored, lease_epoch=epoch))
        return True

    async def expire_approvals(self) -> int:
        """Make the parked runs whose approval deadline passed claimable (the claim ends
        them ``cancelled``); how many."""
        expired = await self.store.expire_waits()
        self.counters.approvals_expired += len(expired)
        if expired:
            log.info("approvals expired", extra={"runs": len(expired)})
        return len(expired)

    async def _carry_on_claimed(self, stored: StoredRun, reason: str | None) -> None:
        if reason is None:
            await self.carrier.carry_on(stored)
        else:
            await self.carrier.carry_on(stored, reason=reason)
