"""The run store on SQLite, with the lease check several processes on one file need.

One process per file (the default) needs no check: nobody else can take its runs over.
Several processes on one file (``agentchat serve --workers``) are replicas of each other:
a worker that falls behind renewing its leases (a loaded machine, a long pause) may see
a sibling claim its runs, and then every step it still writes must fail with
``LeaseLost`` and store nothing — else both write the same event ids. PostgreSQL does
that with ``agentchat_hold_lease``; SQLite has no way to raise an error from plain SQL,
only from a trigger, so the check is a temporary trigger of the writer's connection
(created with the step, a no-op once it exists): inserting ``(run, owner, lease_s)``
into a temporary table aborts with ``run_lease_lost`` unless ``owner`` holds the run,
and otherwise renews the lease and inserts nothing. It runs inside the step's own
transaction, on the file's one write lock, so a claim cannot slip between the check and
the step's events.
"""

from __future__ import annotations

from storage.dialect import Statement
from storage.errors import LeaseLost
from storage.records import RunWrite
from storage.stores.runs import SqlRunStore

LEASE_LOST = "run_lease_lost"
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_GUARD: list[Statement] = [
    (
        "CREATE TEMP TABLE IF NOT EXISTS agentchat_lease_holds (run_id TEXT NOT NULL, owner TEXT NOT NULL, "
        "lease_s REAL NOT NULL)",
        (),
    ),
    (
        "CREATE TEMP TRIGGER IF NOT EXISTS agentchat_hold_lease BEFORE INSERT ON agentchat_lease_holds BEGIN "
        f"SELECT RAISE(ABORT, '{LEASE_LOST}') WHERE NOT EXISTS "
        "(SELECT 1 FROM runs WHERE id = NEW.run_id AND lease_owner = NEW.owner); "
        f"UPDATE runs SET lease_until = {_NOW} + NEW.lease_s WHERE id = NEW.run_id; "
        "SELECT RAISE(IGNORE); END",
        (),
    ),
]
_HOLD = "INSERT INTO agentchat_lease_holds (run_id, owner, lease_s) VALUES (?, ?, ?)"


class SqliteRunStore(SqlRunStore):
    #: Set when several processes share the file (the app's wiring does, for
    #: ``--workers``): every leased step checks its lease first.
    guard_leases: bool = False

    def checks_lease(self, step: RunWrite) -> bool:
        return self.guard_leases and step.lease_owner is not None

    def step_around(self, step: RunWrite) -> tuple[list[Statement], list[Statement]]:
        if not self.checks_lease(step):
            return [], []
        return [*_GUARD, (_HOLD, (step.run_id, step.lease_owner, float(step.lease_s)))], []

    def failure(self, step: RunWrite, exc: BaseException) -> BaseException:
        if step.lease_owner is None or LEASE_LOST not in str(exc):
            return exc
        lost = LeaseLost(f"run {step.run_id} is held by another process now")
        lost.__cause__ = exc
        return lost
