"""A run whose ending the store refused: the loud ending must reach the log eventually.

When a run's writes fail (the database is away), its followers here were shown an
id-less ``error`` and the run made its ending (``error`` + ``message_complete`` failed);
this writes that ending until the store takes it, and only then is it shown under its
ids (``Run.ending_stored``). The write is made under the run's lease: if another replica
took the run over meanwhile, its ending is that replica's to write, and this one must
not overwrite the log with a failure; the run is abandoned here (``Run.abandon``), so a
follower that comes back reads the new owner's events from the store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from app.runs.counters import RunCounters
from app.runs.run import Run, RunEvent
from storage.errors import LeaseLost, StorageUnavailable
from storage.interfaces import RunStore
from storage.records import RunWrite

log = logging.getLogger("agentchat.runs")


@dataclass(slots=True)
class EndingRescue:
    store: RunStore
    counters: RunCounters
    retry_s: float
    #: Told each time the store could not be reached (the lease upkeep's outage account).
    on_unreachable: Callable[[], None]
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def rescue(self, run: Run, events: list[RunEvent]) -> None:
        """``Run.on_storage_failure``: write ``events`` (the run's ending) until stored."""
        self.counters.storage_failures += 1
        task = asyncio.get_running_loop().create_task(self._write_until_stored(run, events))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def _write_until_stored(self, run: Run, events: list[RunEvent]) -> None:
        step = RunWrite(
            run.id,
            run.conversation_id,
            run.user_id,
            events=events,
            status="failed",
            finished=True,
            lease_owner=run.lease_owner,
            lease_s=run.lease_s,
            lease_epoch=run.lease_epoch,
        )
        while True:
            try:
                await self.store.commit(step)
            except StorageUnavailable:
                self.on_unreachable()
                await asyncio.sleep(self.retry_s)
                continue
            except LeaseLost:
                log.info("a failed run was taken over by another replica; it ends there", extra={"run_id": run.id})
                run.abandon()
                return
            except Exception as exc:  # e.g. a key another owner's write took: nothing to retry
                log.error("could not store a failed run's ending", extra={"run_id": run.id, "error": str(exc)[:300]})
                return
            run.ending_stored()
            self.counters.rescued_writes += 1
            log.info("stored the ending of a run that storage had failed", extra={"run_id": run.id})
            return
