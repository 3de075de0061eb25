"""The run store on SQLite, with the lease check several processes on one file need.

One process per file (the default) needs no check: nobody else can take its runs over.
Several processes on one file (``agentchat serve --workers``) are replicas of each other:
a worker that falls behind renewing its leases (a loaded machine, a long pause) may see
a sibling claim its runs, and then every step it still writes must fail with
``LeaseLost`` and store nothing — else both write the same event ids. PostgreSQL does
that with ``agentchat_hold_lease``; SQLite has no way to raise an error from plain SQL,
only from a trigger, so the check is a temporary trigger of the writer's connection
(created with the step, a no-op once it exists): inserting ``(run, owner, epoch,
lease_s)`` into a temporary table aborts with ``run_lease_lost`` unless ``owner`` holds
the run under that claim (``lease_epoch``: a stale copy of the run in the owner's own
process is refused too, issue 23), and otherwise renews the lease and inserts nothing. It runs inside the step's own
transaction, on the file's one write lock, so a claim cannot slip between the check and
the step's events.

Events go to the live log (``storage.stores.event_log``); its ``settler`` moves the
events of runs ended since into ``run_events`` and trims the log, every ``SETTLE_ROWS``
events this store writes, on a timer when it is quiet, and at close
(``storage.sqlite.log_settler``).

The same processes tell each other what they committed (``worker_feed``): a step's
events after its commit, a cancel after it is stored — so a follower or the run's owner
on a sibling worker is woken at once instead of reading the file on a timer.
"""

from __future__ import annotations

from collections.abc import Callable

from storage.dialect import Statement
from storage.errors import LeaseLost
from storage.records import Admitted, NewRun, RunWrite, StoredRun
from storage.sql import SqlEngine
from storage.sqlite.log_settler import LogSettler
from storage.sqlite.worker_feed import WorkerFeed
from storage.stores.runs import SqlRunStore

LEASE_LOST = "run_lease_lost"
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
_GUARD: list[Statement] = [
    (
        "CREATE TEMP TABLE IF NOT EXISTS agentchat_lease_holds (run_id TEXT NOT NULL, owner TEXT NOT NULL, "
        "epoch INTEGER NOT NULL, lease_s REAL NOT NULL)",
        (),
    ),
    (
        "CREATE TEMP TRIGGER IF NOT EXISTS agentchat_hold_lease BEFORE INSERT ON agentchat_lease_holds BEGIN "
        f"SELECT RAISE(ABORT, '{LEASE_LOST}') WHERE NOT EXISTS "
        "(SELECT 1 FROM runs WHERE id = NEW.run_id AND lease_owner = NEW.owner AND lease_epoch = NEW.epoch); "
        f"UPDATE runs SET lease_until = {_NOW} + NEW.lease_s WHERE id = NEW.run_id; "
        "SELECT RAISE(IGNORE); END",
        (),
    ),
]
_HOLD = "INSERT INTO agentchat_lease_holds (run_id, owner, epoch, lease_s) VALUES (?, ?, ?, ?)"


class SqliteRunStore(SqlRunStore):
    #: Set when several processes share the file (the app's wiring does, for
    #: ``--workers``): every leased step checks its lease first.
    guard_leases: bool = False
    #: The sibling workers' feed (set with ``guard_leases``): committed steps and stored
    #: cancels are announced to them.
    feed: WorkerFeed | None = None

    def __init__(self, sql: SqlEngine) -> None:
        super().__init__(sql)
        #: Settles the live log (``storage.sqlite.log_settler``); started with the writer.
        self.settler = LogSettler(sql, self.log)

    def checks_lease(self, step: RunWrite) -> bool:
        return self.guard_leases and step.lease_owner is not None

    def step_around(self, step: RunWrite) -> tuple[list[Statement], list[Statement]]:
        if not self.checks_lease(step):
            return [], []
        return [*_GUARD, (_HOLD, (step.run_id, step.lease_owner, step.lease_epoch, float(step.lease_s)))], []

    def failure(self, step: RunWrite, exc: BaseException) -> BaseException:
        if step.lease_owner is None or LEASE_LOST not in str(exc):
            return exc
        lost = LeaseLost(f"run {step.run_id} is held by another process now")
        lost.__cause__ = exc
        return lost

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        super().write(step, on_commit=self._announcing(step, on_commit), on_fail=on_fail)
        self._count(step)

    async def commit(self, step: RunWrite, *, on_commit: Callable[[], None] | None = None) -> None:
        await super().commit(step, on_commit=self._announcing(step, on_commit))
        self._count(step)

    def _count(self, step: RunWrite) -> None:
        """Tell the settler (a settle is due every ``SETTLE_ROWS`` events)."""
        if step.events:
            self.settler.note(len(step.events))

    async def settle_log(self, *, everything: bool = False) -> None:
        """Settle now, through the settler (a run with conflicting rows is reconciled
        and reported, never a settle refused for good)."""
        await self.settler.settle(everything=everything)

    def _announcing(self, step: RunWrite, on_commit: Callable[[], None] | None) -> Callable[[], None] | None:
        """``on_commit`` that also tells the sibling workers (only with siblings)."""
        feed = self.feed
        if feed is None or not step.events:
            return on_commit
        run_id, events = step.run_id, step.events

        def committed() -> None:
            if on_commit is not None:
                on_commit()
            feed.announce_events(run_id, events)

        return committed

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        stored = await super().request_cancel(run_id)
        if self.feed is not None:
            self.feed.announce_cancels([run_id])
        return stored

    async def create(self, run: NewRun, *, deadline: float | None = None) -> Admitted:
        admitted = await super().create(run, deadline=deadline)
        if self.feed is not None and admitted.others and run.multitask == "interrupt":
            self.feed.announce_cancels(admitted.others)  # their owners end them now
        return admitted
