"""Admission's per-replica gate: at most ``max_live`` runs live here (``AGENT_MAX_LIVE_RUNS``).

A run past the cap is refused (``ReplicaFull``, a 503 with ``Retry-After`` at the edge)
instead of slowing every live stream down. Admission awaits the store between its slot
check and the run's registration, so the runs being admitted count with the live ones:
concurrent requests cannot all pass the check at once. The per-user cap is not here: it
is counted by the store in the transaction that stores the run
(``NewRun.max_unfinished_per_user``), so replicas sharing a database agree on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.runs.counters import RunCounters


class ReplicaFull(Exception):
    """This replica carries as many live runs as it may (``AGENT_MAX_LIVE_RUNS``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"this replica carries {limit} live runs, its limit")
        self.limit = limit


@dataclass(slots=True)
class AdmissionSlots:
    #: Live runs this replica carries at most (0: no cap).
    max_live: int
    live: Callable[[], int]
    counters: RunCounters
    admitting: int = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot while a run is admitted; raises ``ReplicaFull``. The check and the
        claim happen before the caller's first await: one step of the event loop."""
        if self.max_live and self.live() + self.admitting >= self.max_live:
            self.counters.refused_full += 1
            raise ReplicaFull(self.max_live)
        self.admitting += 1
        try:
            yield
        finally:
            self.admitting -= 1
