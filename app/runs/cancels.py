"""Cancels that cross processes: a cancel asked for where the run does not execute.

Several replicas share one database, and a cancel (``POST …/cancel``, or an
``interrupt`` turn of the conversation) may reach any of them. The one that receives it
marks the run in the store (``RunStore.request_cancel``), and the process executing the
run cancels its task:

* at once through the engine's feed where there is one (PostgreSQL ``NOTIFY`` on
  ``run_cancels``, sent in the marking transaction; workers on one SQLite file tell
  each other after the commit, ``storage.sqlite.worker_feed``);
* otherwise on its next look at the store for its live runs, every ``poll_s`` (one
  process per SQLite file), and at the lease-claim pace as a fallback with a feed (a
  notification missed while the listener reconnected);
* a run nobody held at that moment (between hand-overs) is ended ``cancelled`` by the
  process that claims it next (``RunCarrier.carry_on`` reads the mark).

The process that asked waits, bounded, for the run's ending to be stored and answers
with its status, or ``cancelling`` when it has not ended yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.runs.run import Run
from storage.interfaces import RunStore
from storage.records import NOT_ENDED, UNFINISHED
from storage.run_feed import RunFeed, raise_if_cancel_lost

log = logging.getLogger("agentchat.runs")

#: Ids per ``cancel_requests`` read (well under SQLite's bound on parameters).
BATCH = 500


@dataclass(slots=True)
class RunCancels:
    store: RunStore
    #: This process's run by id (``None``: not here).
    local: Callable[[str], Run | None]
    #: This process's live runs.
    live: Callable[[], list[Run]]
    feed: RunFeed | None = None
    poll_s: float = 0.25
    #: Runs of this process cancelled because a cancel was asked for elsewhere.
    cancelled: int = 0
    _checks: set[asyncio.Task[int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.feed is not None:
            self.feed.subscribe_cancels(self._signalled)

    async def request(self, run_id: str, wait_s: float = 5.0) -> str:
        """Cancel a run this process does not execute; the status once its ending is
        stored within ``wait_s``, else ``cancelling``."""
        stored = await self.store.request_cancel(run_id)
        if stored is None or stored.status not in UNFINISHED:
            return stored.status if stored is not None else "cancelled"
        mine = self.local(run_id)
        if mine is not None:  # claimed here meanwhile
            self.cancel_here(mine)
        status = await self.wait_end(run_id, wait_s)
        return status if status is not None else "cancelling"

    async def wait_end(self, run_id: str, timeout_s: float | None = None, *, parked_ends: bool = False) -> str | None:
        """The status ``run_id`` ended with, once its ending is stored by whichever
        process executes it; ``None`` if it has not ended within ``timeout_s``. Woken by
        the run's committed events where the engine has a feed (its ending commits with
        its last event), else a look every ``poll_s``. ``parked_ends``: a run parked for
        an approval ends the wait too (its status, ``waiting_approval``, is returned)."""
        waiting = UNFINISHED if parked_ends else NOT_ENDED
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        watching = self.feed.watch(run_id) if self.feed is not None else contextlib.nullcontext(None)
        with watching as watch:
            while True:
                if watch is not None:
                    watch.take()  # before the read: an ending committed after it wakes the wait
                stored = await self.store.get(run_id)
                raise_if_cancel_lost()  # a store read may have swallowed this task's cancel
                if stored is None or stored.status not in waiting:  # a parked run has not ended
                    return stored.status if stored is not None else None
                pause = self.poll_s if watch is None else 1.0
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    pause = min(pause, left)
                if watch is None:
                    await asyncio.sleep(pause)
                else:
                    await watch.wait(pause)

    def cancel_here(self, run: Run) -> bool:
        """Cancel a live run of this process because a cancel was asked for elsewhere
        (its agent ends it with ``message_complete`` ``cancelled``)."""
        if run.finished or run.lost or run.released or run.task is None or run.task.done():
            return False
        log.info("cancelling a run: a cancel was asked for on another replica", extra={"run_id": run.id})
        self.cancelled += 1
        run.task.cancel()
        return True

    async def check(self) -> int:
        """Cancel this process's live runs that have a cancel request in the store;
        returns how many were cancelled."""
        live = [r for r in self.live() if not r.lost and r.task is not None and not r.task.done()]
        cancelled = 0
        for i in range(0, len(live), BATCH):
            batch = live[i : i + BATCH]
            asked = await self.store.cancel_requests([r.id for r in batch])
            cancelled += sum(1 for r in batch if r.id in asked and self.cancel_here(r))
        return cancelled

    def _signalled(self, run_id: str | None) -> None:
        """The feed's word that a cancel was asked for (``None``: one may have been
        missed while it reconnected — look in the store)."""
        if run_id is not None:
            run = self.local(run_id)
            if run is not None:
                self.cancel_here(run)
            return
        task = asyncio.get_running_loop().create_task(self.check())
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)

    def close(self) -> None:
        for task in list(self._checks):
            task.cancel()
