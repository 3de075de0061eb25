"""What the run engine counts for ``/metrics``: one object per manager, shared by its
parts (admission, leases, recovery, the storage rescue), read by ``app/ops``' exporter."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RunCounters:
    started: int = 0
    #: Unfinished runs whose work goes on here after a restart or a take-over: from a
    #: checkpoint, from their request again, or begun when admitted but never started.
    #: Not one found already ended (its ``message_complete`` logged, only its status
    #: unwritten: the status is written and nothing runs), which this counted as well.
    resumed: int = 0
    #: Unfinished runs found at a start or a take-over that could not be carried on (a
    #: crash loop's cap, an unreadable checkpoint, an input sealed under another key):
    #: ended ``run_interrupted``. Not counted in ``resumed``.
    not_resumable: int = 0
    interrupted: int = 0
    storage_failures: int = 0
    #: Runs whose writes the store gave up on while the database was away (PostgreSQL),
    #: let go here without an ending: their lease lapses and they are carried on from
    #: their last checkpoint, here or on another replica, once it is back.
    outage_suspended: int = 0
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
