"""A follower's reading of a live run of this process: the events after its position that
the store has committed, in batches, and an idle tick when none come.

Apart from the run (``app.runs.run``), which appends, writes and ends: a follower only
reads the run's log up to its durable mark and sleeps on its change signal
(``Run.next_change``), so the two sides meet at those two things alone. Followers never
own a queue: each keeps only its position and waits for the next commit, so a slow
reader costs O(1) memory, however many tokens the run emits meanwhile. Events not yet
committed are never shown (a client must be able to replay whatever it saw), and an
ending the store has not taken (``Run.storage_error``) is left to ``app.runs.follow``,
which shows it without an id.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from app.runs.idle import IdleClock
from app.runs.run import Run
from events import MessageComplete
from storage.records import RunEvent

__all__ = ["read_durable"]


async def read_durable(
    run: Run, after: int = 0, *, idle: float | None = None, max_bytes: int = 65536
) -> AsyncIterator[list[RunEvent] | None]:
    """The durable events of ``run`` after ``after``, every event already committed (up to
    ``max_bytes`` of SSE) in one batch; ``None`` after ``idle`` seconds without events
    (the caller sends a heartbeat). Ends after ``message_complete``, when the run is
    released, lost or parked here, or when its writes failed for good."""
    pos = max(0, after)
    clock = IdleClock(idle, run.notify) if idle is not None else None
    #: The next wait starts a new idle period (after a batch or a tick was taken).
    fresh = True
    try:
        while True:
            if pos < run.durable:
                batch: list[RunEvent] = []
                size = 0
                while pos < run.durable and size < max_bytes:
                    ev = run.events[pos]
                    pos += 1
                    batch.append(ev)
                    size += len(ev.data) + len(ev.event) + 24
                    if ev.event == MessageComplete.name:
                        break
                yield batch
                if batch[-1].event == MessageComplete.name:
                    return
                fresh = True
                continue
            if run.released or (run.finished and pos >= run.durable and run.durable == len(run.events)):
                return
            if run.storage_error is not None and pos >= run.durable:
                return  # its ending is not stored (yet): ``app.runs.follow`` shows it without ids
            if clock is None:
                await run.next_change()
                continue
            if fresh:
                clock.start()
                fresh = False
            await run.next_change()
            if pos >= run.durable and not run.released and clock.expired():
                yield None
                fresh = True
    finally:
        if clock is not None:
            clock.close()
