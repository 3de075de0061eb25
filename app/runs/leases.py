"""Run ownership across replicas: leases, their renewal, take-over and epoch fencing.

With ``lease_s`` > 0 (the hand-over bound), the process executing a run holds a lease on
it from admission that lives ``0.7 × lease_s`` and is renewed every third of that; every
step it writes checks the lease. Every ``lease_s / 10`` each process claims (atomically,
in the store) the unfinished runs whose lease expired — their replica died — and carries
them on like a restart would, so a dead replica's runs resume within about
``0.8 × lease_s`` plus the time to load their checkpoint. A process that finds its lease
gone (it was paused past the lease) abandons the run without emitting anything: the new
owner continues it.

Each claim that changes hands mints a new epoch (issue 23's fencing token). A claim that
finds a copy of the run still running here continues that copy only while its epoch is
still current; otherwise another process claimed the run in between, and the copy here
is *superseded*: stopped without an ending of its own (its queued steps are refused by
the epoch check) while the run is carried on from the store under the new claim.

What carrying a run on means (restart from its input or its checkpoint) is the
manager's; this module decides when and why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from app.runs.counters import RunCounters
from app.runs.recovery import parked_account
from app.runs.registry import RunRegistry
from app.runs.run import Run
from storage.interfaces import RunStore
from storage.records import StoredRun

log = logging.getLogger("agentchat.runs")

#: A written lease lives this share of ``lease_s``; others look for expired ones every
#: ``LEASE_CLAIM_SHARE × lease_s``: expiry plus one look stays within ``lease_s``.
LEASE_TTL_SHARE = 0.7
LEASE_CLAIM_SHARE = 0.1

#: ``carry_on(stored, reason)``: carry a claimed run on here; ``reason`` is the account
#: for its ``run_resumed`` (``None``: the run's own, e.g. a decided approval's).
CarryOn = Callable[[StoredRun, str | None], Awaitable[None]]


@dataclass(slots=True)
class LeaseKeeper:
    store: RunStore
    owner_id: str
    lease_s: float
    registry: RunRegistry
    counters: RunCounters
    carry_on: CarryOn
    #: The manager stopped admitting (shutdown): no more claims or renewals.
    is_closing: Callable[[], bool]
    #: The other upkeep done at the claims' pace (approvals whose deadline passed).
    before_claim: Callable[[], Awaitable[object]]
    #: The look for cancels asked on other processes, at ``cancel_every_s``.
    check_cancels: Callable[[], Awaitable[object]]
    cancel_every_s: float
    #: Called with the seconds from a dead replica's lease expiry to its run resumed here.
    on_take_over: Callable[[float], None] | None = None
    #: When this process last failed to reach the store (epoch seconds): a lease that
    #: lapsed around then lapsed because of the outage, not because its replica died.
    store_unreachable_at: float | None = None
    #: When the upkeep last reached the store (epoch seconds): a claim's look, a renewal.
    store_reached_at: float | None = None
    _task: asyncio.Task[None] | None = field(default=None)

    @property
    def ttl_s(self) -> float:
        """How long a written lease lives: short enough that expiry plus the next look
        for expired leases stays within ``lease_s`` (``AGENT_RUN_LEASE_S`` is the
        hand-over bound), long enough to survive two missed renewals."""
        return self.lease_s * LEASE_TTL_SHARE

    def note_unreachable(self) -> None:
        self.store_unreachable_at = time.time()

    def store_answers(self) -> bool:
        """Whether the store answered the upkeep since it last failed to: what the drain
        asks before it hands back the leases of runs let go for an outage."""
        reached, failed = self.store_reached_at, self.store_unreachable_at
        return reached is not None and (failed is None or reached > failed)

    # --- take-over ------------------------------------------------------------------------

    async def take_over(self) -> int:
        """Claim and carry on the runs whose lease expired (their process died)."""
        stored_runs = await self.store.claim(self.owner_id, self.ttl_s, expired_only=True)
        taken = 0
        for stored in stored_runs:
            if self.is_closing():
                break
            mine = self.registry.runs.get(stored.id)
            if mine is not None and not mine.lost and not mine.released:
                if mine.lease_epoch == stored.lease_epoch:
                    continue  # still running here (the lease lapsed while this loop was busy)
                self.supersede(mine)
            if stored.lease_expired_at is None and parked_account(stored) is not None:
                await self.carry_on(stored, None)  # a decided (or expired) approval, not a dead replica
                continue
            await self.carry_on(stored, self.take_over_reason(stored))
            self.note_taken_over(stored)
            taken += 1
        if taken:
            log.info("took over runs whose lease expired", extra={"runs": taken, "owner": self.owner_id})
        return taken

    def supersede(self, stale: Run) -> None:
        """Stop a copy of a run that a later claim left behind (issue 23): like a run taken
        over (nothing more written or shown, followers let go to re-read the log), and out
        of its conversation's turn order so the new copy does not wait for it."""
        self.counters.stale_copies_stopped += 1
        stale.abandon()
        self.registry.leave_turn_order(stale)

    def take_over_reason(self, stored: StoredRun) -> str:
        """Why a run with an expired lease is carried on here, for ``run_resumed``. A
        lease lapses when its replica stops renewing it: because it died, or because it
        could not reach the database. This process cannot see the other replica, but it
        can tell whether it was itself cut off from the database while that lease was
        last alive or since (one lease lifetime before its expiry): then an outage, not
        a death, is the honest account."""
        outage_at, expired_at = self.store_unreachable_at, stored.lease_expired_at
        if outage_at is not None and (expired_at is None or outage_at >= expired_at - self.ttl_s):
            return "its lease lapsed while the database was unreachable; it was taken over"
        return "its replica stopped; another took it over"

    def note_taken_over(self, stored: StoredRun) -> None:
        self.counters.taken_over += 1
        if self.on_take_over is not None and stored.lease_expired_at is not None:
            self.on_take_over(max(0.0, time.time() - stored.lease_expired_at))

    # --- renewal --------------------------------------------------------------------------

    def held(self) -> int:
        return len(self.registry.held())

    async def renew(self) -> int:
        """Renew this process's leases; abandon the runs another process took. Returns
        how many were abandoned."""
        held = self.registry.held()
        if not held:
            return 0
        try:
            still = await self.store.renew(self.owner_id, [r.id for r in held], self.ttl_s)
        except Exception:
            self.counters.lease_renewals_failed += 1
            raise
        self.store_reached_at = time.time()
        lost = [r for r in held if r.id not in still and not r.finished]
        for run in lost:
            run.abandon()  # counted by the run's ``on_abandon``
        return len(lost)

    # --- the upkeep -----------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None and not self.is_closing():
            self._task = asyncio.create_task(self._keep(), name="run-leases")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _keep(self) -> None:
        """Look for expired leases every tenth of ``lease_s``, so a dead replica's runs are
        carried on within ``lease_s``; renew this process's own in a task of their own
        (``_renew_loop``), so a claim or a cancel check that is slow under load cannot
        hold a renewal back until the leases lapse."""
        claim_every = self.lease_s * LEASE_CLAIM_SHARE
        renewer = asyncio.create_task(self._renew_loop(), name="run-lease-renewal")
        next_claim = next_cancel = time.monotonic()
        try:
            while not self.is_closing():
                now = time.monotonic()
                try:
                    if now >= next_claim and not self.is_closing():
                        next_claim = now + claim_every
                        await self.before_claim()
                        await self.take_over()
                        self.store_reached_at = time.time()
                    if now >= next_cancel and not self.is_closing():
                        next_cancel = now + self.cancel_every_s
                        await self.check_cancels()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the database is away: try again next tick
                    self.note_unreachable()
                    log.warning("run lease upkeep failed", extra={"error": str(exc)[:300]})
                await asyncio.sleep(max(0.05, min(next_claim, next_cancel) - time.monotonic()))
        finally:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer

    async def _renew_loop(self) -> None:
        """Renew every third of the lease's lifetime, whatever else the upkeep waits on.
        Under load with ``--workers 2`` (300 paced runs) 2 runs lapsed when this waited in
        one loop behind the claims and the cancel checks — reads queued behind the
        followers' — and a sibling took them over mid-stream."""
        renew_every = self.ttl_s / 3
        while not self.is_closing():
            started = time.monotonic()
            try:
                await self.renew()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database is away: try again next round
                self.note_unreachable()
                log.warning("run lease renewal failed", extra={"error": str(exc)[:300]})
            await asyncio.sleep(max(0.05, renew_every - (time.monotonic() - started)))
