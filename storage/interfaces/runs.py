"""The stores of runs: each run and its replayable event log, checkpoints, leases and
approvals (``RunStore``), the compaction of old logs (``RetentionStore``), the tool-call
log (``ToolCallLog``).

Why apart: what the durable run engine (``app/runs``) relies on, read together when a
resume, a lease or a cancel misbehaves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from storage.records import (
    Admitted,
    NewRun,
    RunEvent,
    RunWrite,
    StoredRun,
    ToolCallRecord,
)


class RunStore(Protocol):
    """Runs and their replayable event log, with the checkpoints of durable execution."""

    async def create(self, run: NewRun, *, deadline: float | None = None) -> Admitted:
        """Store the run (status ``queued``) and claim its conversation for the user, in
        one transaction. Returns the ids of the user's conversation's other unfinished
        runs, oldest first, and whether the run's ``title`` became the conversation's
        (only a conversation without a title takes it). Raises ``ConversationBusy``
        when the policy is ``reject`` and another run is unfinished, and
        ``ApprovalPending`` (naming it) when one waits for an approval and the policy is
        not ``interrupt``. A run with an
        ``idempotency_key`` the user already used is not stored: ``IdempotencyKeyUsed``
        names the run that has it (checked first, and atomically with the insert). With
        ``max_unfinished_per_user``, the user's unfinished runs are counted in the same
        transaction, atomically across processes: ``TooManyRuns`` at the cap. With the
        ``interrupt`` policy, the other unfinished runs get a cancel request (as
        ``request_cancel``) in the same transaction."""
        ...

    async def get(self, run_id: str) -> StoredRun | None: ...

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        """Mark a cancel on the run if it has not ended (idempotent) and signal the
        process executing it (a notification where the engine has them); the run as
        stored afterwards, ``None`` if there is no such run."""
        ...

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` have not ended and have a cancel request (the owner's
        look for cancels asked for on other replicas)."""
        ...

    async def find_by_idempotency_key(self, user_id: str, key: str) -> StoredRun | None:
        """The run ``user_id`` started with ``Idempotency-Key: key``, if it is stored."""
        ...

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]: ...

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Queue a step; it commits after every step queued before it."""
        ...

    async def commit(self, step: RunWrite) -> None:
        """Queue a step and wait until it is durable (raises ``StorageUnavailable``)."""
        ...

    async def unfinished(self) -> list[StoredRun]:
        """Runs that have not ended (queued, running, interrupted), oldest first."""
        ...

    async def set_status(self, run_ids: Sequence[str], status: str) -> None: ...

    # Leases: the process executing a run holds it for ``lease_s`` and renews it; a run
    # whose lease expired (its process died) is claimed by another. A step written with
    # ``RunWrite.lease_owner`` by a process that lost the lease fails with ``LeaseLost``.

    async def claim(
        self, owner: str, lease_s: float, *, expired_only: bool = True, limit: int = 100
    ) -> list[StoredRun]:
        """Atomically take the unfinished runs whose lease expired or that never had one
        (every unfinished run when not ``expired_only``) for ``owner``; oldest first. A
        run another process held counts one more resume (``resumes``), in the claim."""
        ...

    async def count_resume(self, run_id: str) -> None:
        """One more resume of a run carried on without a claim (a process without leases)."""
        ...

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases of ``run_ids``; returns the ones it still holds."""
        ...

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> int:
        """Let other processes take these runs at once (shutdown); how many ``owner``
        still held (those are the leases handed back)."""
        ...

    # Approvals: a run parked ``waiting_approval`` is held by nobody; a decision, a cancel
    # or the expiry makes it claimable (``storage.stores.approval_waits``).

    async def decide(self, run_id: str, user_id: str, checkpoint_seq: int, checkpoint: bytes) -> bool:
        """Store the checkpoint carrying a decision if the run still waits at
        ``checkpoint_seq``; False when something else came first."""
        ...

    async def expire_waits(self) -> list[str]:
        """Make the parked runs whose deadline passed claimable; their ids."""
        ...

    async def claim_one(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take one unfinished run that nobody holds for ``owner``."""
        ...

    async def claim_one_epoch(self, run_id: str, owner: str, lease_s: float) -> int | None:
        """``claim_one``, returning the lease epoch the claim holds the run under (every
        step of the run must carry it), or ``None`` when it was not taken."""
        ...


class RetentionStore(Protocol):
    """Compaction of long-finished runs' event logs (``storage.event_folding``)."""

    async def compactable(self, finished_before: float, limit: int) -> list[str]: ...

    async def compact(self, run_ids: Sequence[str]) -> tuple[bool, int]:
        """(whether this process held the retention lock, event rows removed)."""
        ...


class ToolCallLog(Protocol):
    def record(self, entry: ToolCallRecord) -> None:
        """Queue an entry (never blocks the stream)."""
        ...
