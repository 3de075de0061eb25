"""Shutdown: stop, let live runs finish for a grace period, hand the rest on.

A run still live after the grace period is cancelled as *interrupted*: it writes no
ending, its last checkpoint stands, and its followers reconnect to whichever process
carries it on next (this one after a restart, or a sibling through an expired lease —
released here at once, so a sibling need not wait for it to lapse; so is the lease of a
run let go for a database outage, when the database answers again by then). Runs queued behind
a released run never started: they are stored ``interrupted`` too.

``cut`` ends the grace early: ``agentchat serve``'s second SIGTERM/SIGINT sets it (an
operator who will not wait the grace out), and the live runs are released then - the
same hand-over, only sooner; the close after it is unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from app.ops.close_budget import INTERRUPTED_RUNS_S
from app.runs.cancels import RunCancels
from app.runs.counters import RunCounters
from app.runs.leases import LeaseKeeper
from app.runs.registry import RunRegistry
from app.runs.rescue import EndingRescue
from storage.errors import StorageUnavailable
from storage.interfaces import RunStore

log = logging.getLogger("agentchat.runs")


@dataclass(slots=True)
class Drain:
    store: RunStore
    registry: RunRegistry
    counters: RunCounters
    rescue: EndingRescue
    cancels: RunCancels
    leases: LeaseKeeper

    async def __call__(self, grace_s: float, cut: asyncio.Event | None = None) -> None:
        tasks = [r.task for r in self.registry.active() if r.task is not None and not r.task.done()]
        if tasks and grace_s > 0:
            await _grace(tasks, grace_s, cut)
        left = [r for r in self.registry.active() if r.task is not None and not r.task.done()]
        for run in left:
            run.interrupting = True
            assert run.task is not None
            run.task.cancel()
        if left:
            await asyncio.wait([r.task for r in left if r.task is not None], timeout=INTERRUPTED_RUNS_S)
            self.counters.interrupted += len(left)
            log.info("released live runs for the next process", extra={"runs": len(left)})
        for run in left:
            run.release()
        queued = [r.id for r in self.registry.runs.values() if r.released and r.status == "queued"]
        with contextlib.suppress(StorageUnavailable):
            await self.store.set_status(queued, "interrupted")
        self.rescue.cancel_all()
        self.cancels.close()
        await self.leases.stop()
        if self.leases.lease_s > 0:
            runs = list(self.registry.runs.values())
            mine = [r.id for r in runs if r.released and not r.lost and not r.finished]
            if self.leases.store_answers():
                # Copies let go for an outage (``Run._suspend``; their ending, if any,
                # not stored): nobody renews their leases, and another replica would
                # wait for them to lapse. Handed back only when the database answers
                # again (else the attempt would wait the outage out). Not the copies of
                # runs another process took over (``abandon``: not our lease). A copy let
                # go whose lease lapsed and was claimed elsewhere meanwhile is not ours
                # either: only the rows still ours are handed back, and counted.
                mine += [r.id for r in runs if r.suspended and r.released and not r.finished]
            with contextlib.suppress(StorageUnavailable):
                self.counters.leases_released += await self.store.release_leases(self.leases.owner_id, mine)


async def _grace(tasks: list[asyncio.Task[None]], grace_s: float, cut: asyncio.Event | None) -> None:
    """Until every task has ended, ``grace_s`` has passed or ``cut`` is set. The tasks
    themselves are left running: what is still live then is released by the caller."""
    if cut is None:
        await asyncio.wait(tasks, timeout=grace_s)
        return
    if cut.is_set():
        return
    ended = asyncio.ensure_future(asyncio.wait(tasks))
    cut_set = asyncio.ensure_future(cut.wait())
    try:
        await asyncio.wait([ended, cut_set], timeout=grace_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ended.cancel()  # only the waits: cancelling ``asyncio.wait`` leaves the tasks it watched alone
        cut_set.cancel()
