"""Shutdown: stop, let live runs finish for a grace period, hand the rest on.

A run still live after the grace period is cancelled as *interrupted*: it writes no
ending, its last checkpoint stands, and its followers reconnect to whichever process
carries it on next (this one after a restart, or a sibling through an expired lease —
released here at once, so a sibling need not wait for it to lapse). Runs queued behind
a released run never started: they are stored ``interrupted`` too.
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

    async def __call__(self, grace_s: float) -> None:
        tasks = [r.task for r in self.registry.active() if r.task is not None and not r.task.done()]
        if tasks and grace_s > 0:
            await asyncio.wait(tasks, timeout=grace_s)
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
            mine = [r.id for r in self.registry.runs.values() if r.released and not r.lost and not r.finished]
            with contextlib.suppress(StorageUnavailable):
                await self.store.release_leases(self.leases.owner_id, mine)
                self.counters.leases_released += len(mine)
