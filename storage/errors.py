"""Errors every storage engine raises the same way, so callers never catch driver types."""

from __future__ import annotations


class StorageError(Exception):
    """Base of the errors below."""


class StorageUnavailable(StorageError):
    """A write could not be committed within the retry window (database locked by
    another process, disk full, file unwritable). The data was *not* stored."""

    code = "storage_unavailable"


class DatabaseLost(StorageUnavailable):
    """The SQLite file this process opened was removed or replaced under it
    (``storage/sqlite/file_guard.py``). Unlike a busy or unreachable database, waiting
    does not help: nothing is read or written until a restart opens the file now at the
    path, so callers say "restart", not "retry shortly"."""


class SchemaTooNew(StorageError, RuntimeError):
    """The database was migrated by a newer release: its schema has steps this one does
    not know. Opening it anyway would run this release's code on tables it does not
    understand (a newer layout's rows invisible to it, writes that conflict with them),
    so it is refused before anything is read or written."""

    code = "schema_too_new"

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"the database's schema is at version {found}, written by a newer release of agentchat; "
            f"this release knows versions up to {known}: run the newer release (or restore a backup "
            "taken before the upgrade)"
        )
        self.found, self.known = found, known


class ConversationBusy(StorageError):
    """A run of this conversation is still live and the multitask policy is ``reject``."""


class ApprovalPending(StorageError):
    """A run of this conversation waits for its user's decision on a tool call (parked
    ``waiting_approval``) and the new run's policy is not ``interrupt``: queued behind it,
    the new run would wait for that decision as long as the approval lives (a day by
    default), so it is refused instead; ``run_id`` is the waiting run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class TooManyRuns(StorageError):
    """The user already has ``NewRun.max_unfinished_per_user`` unfinished runs (counted
    in the admitting transaction): the run was not stored (callers answer 429)."""


class IdempotencyKeyUsed(StorageError):
    """The user already started a run with this ``Idempotency-Key``: ``run_id`` is it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


class LeaseLost(StorageError):
    """A run's step was not stored: another process holds the run's lease now (this one
    was paused or cut off past the lease), so this process must stop writing the run."""

    code = "run_lease_lost"


class UnknownRun(StorageError):
    """A run id named as a turn of a conversation is no run of it (of its user): the
    caller answers 400 naming it."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id
