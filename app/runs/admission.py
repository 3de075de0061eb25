"""Admission's per-replica gate: at most ``max_live`` runs live here (``AGENT_MAX_LIVE_RUNS``),
and no more than the model pool has connections (``model_pool``: ``AGENT_LLM_MAX_CONNECTIONS``
when the provider streams through that pool) — a live run holds at most one model
connection at a time, so a run admitted past the pool's size would wait at its gate for
another run's whole answer before its first token.

A run past either cap is refused (``ReplicaFull``, a 503 with ``Retry-After`` at the edge)
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
    """This replica carries as many live runs as it may: ``AGENT_MAX_LIVE_RUNS``
    (``reason`` ``live_runs``) or as many as its model pool has connections
    (``model_pool``)."""

    def __init__(self, limit: int, reason: str = "live_runs") -> None:
        if reason == "model_pool":
            why = (
                f"this replica carries {limit} live runs, one for each of its model connections "
                "(AGENT_LLM_MAX_CONNECTIONS)"
            )
        else:
            why = f"this replica carries {limit} live runs, its limit"
        super().__init__(why)
        self.limit, self.reason = limit, reason


@dataclass(slots=True)
class AdmissionSlots:
    #: Live runs this replica carries at most (0: no cap).
    max_live: int
    live: Callable[[], int]
    counters: RunCounters
    admitting: int = 0
    #: The model pool's connections when the provider streams through it (0: no cap).
    model_pool: int = 0

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold a slot while a run is admitted; raises ``ReplicaFull``. The check and the
        claim happen before the caller's first await: one step of the event loop."""
        carried = self.live() + self.admitting
        if self.max_live and carried >= self.max_live:
            self.counters.refused_full += 1
            raise ReplicaFull(self.max_live)
        if self.model_pool and carried >= self.model_pool:
            raise ReplicaFull(self.model_pool, "model_pool")
        self.admitting += 1
        try:
            yield
        finally:
            self.admitting -= 1
