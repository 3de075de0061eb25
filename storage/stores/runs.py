"""Runs, their replayable event log and their checkpoints, on either engine.

A step of a run (its events, its checkpoint, the messages it adds to the conversation,
a status change) is one item of the engine's ordered writer, so it commits as a whole
or not at all, after every step queued before it: the log never holds an event whose
step state was lost, nor a checkpoint ahead of its events.

Admission (``create``) is one transaction written once as a plan (``storage.sql.Plan``):
SQLite runs it whole on its one writer's thread (``BEGIN IMMEDIATE``, one hop), which
every process on the file takes one at a time; PostgreSQL claims the user's conversation
(conversations are keyed by user and id) with its row locked, so two replicas admitting
runs on one conversation see each other, and
counts the user's unfinished runs under a per-user advisory lock. What only PostgreSQL
does — lease checks inside each step, notifications, ``SKIP LOCKED`` claims — is its
subclass (``storage.postgres.runs``).

How a run is a row and what a step writes are ``storage.stores.run_rows``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from storage.dialect import Dialect, Statement
from storage.errors import ApprovalPending, ConversationBusy, IdempotencyKeyUsed, TooManyRuns
from storage.event_folding import unfold_after
from storage.records import NOT_ENDED, WAITING_APPROVAL, Admitted, NewRun, RunEvent, RunWrite, StoredRun
from storage.sql import Plan, SqlEngine
from storage.stores.approval_waits import EPOCH_AFTER_CLAIM, ApprovalWaits, unpark_cancelled_statement
from storage.stores.conversations import claim_ops
from storage.stores.event_log import event_log
from storage.stores.run_rows import NOT_ENDED_SQL, UNFINISHED_SQL, columns, step_statements, stored_run

_IN_CHUNK = 500
#: A claim's new ``resumes`` (the one parameter: the claimer), in the claim's own
#: statement: a run another process held (its lease expired: the process died or was cut
#: off; or it was handed back at shutdown) is taken over, one more resume for
#: ``RunInfo.resumes``. Not counted: a run nobody held (a decided or expired approval:
#: parking hands the lease back) and a process taking back its own lapsed lease (its copy
#: still runs). ``lease_owner`` is the row's value before this update (SQL's ``SET``).
RESUMES_AFTER_CLAIM = "resumes + CASE WHEN lease_owner IS NOT NULL AND lease_owner <> ? THEN 1 ELSE 0 END"
_KEY_SQL = "SELECT id FROM runs WHERE user_id = ? AND idempotency_key = ?"


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for i in range(0, len(items), _IN_CHUNK):
        yield items[i : i + _IN_CHUNK]


class SqlRunStore(ApprovalWaits):
    """The run store; SQLite's as is. PostgreSQL's subclass fills the hooks below."""

    def __init__(self, sql: SqlEngine) -> None:
        self.sql = sql
        self.db = sql.db
        # Rows in the order they were inserted: SQLite's rowid, PostgreSQL's seq.
        self.order = "rowid" if sql.dialect.name == "sqlite" else "seq"
        #: Where the engine keeps a run's events (``storage.stores.event_log``).
        self.log = event_log(sql.dialect)
        self.columns = columns(sql.dialect)

    # --- engine hooks ---------------------------------------------------------------------

    def step_around(self, step: RunWrite) -> tuple[list[Statement], list[Statement]]:
        """Statements before and after a step's own (none on SQLite)."""
        return [], []

    def checks_lease(self, step: RunWrite) -> bool:
        """Whether ``step``'s statements check its lease first (``step_around``): only such
        a step can fail as ``LeaseLost`` (``failure``). None does on SQLite's one process."""
        return False

    def cap_lock(self, user_id: str) -> Statement | None:
        """The lock that makes count-then-insert of a user's runs atomic (SQLite: its one
        writer already does)."""
        return None

    def cancel_notice(self, run_id: str) -> Statement | None:
        """Sent when a run's cancel is marked (SQLite has no notifications: the owner
        finds the mark on its next look, every fraction of a second)."""
        return None

    def failure(self, step: RunWrite, exc: BaseException) -> BaseException:
        """A failed step's error as the caller sees it."""
        return exc

    # --- admission ------------------------------------------------------------------------

    def _mark_cancelled(self, dialect: Dialect, run_ids: Sequence[str]) -> Plan[None]:
        # A run parked for an approval is held by nobody: marked, it becomes claimable,
        # and whoever claims it ends it ``cancelled``.
        yield ("execute", *unpark_cancelled_statement(dialect, run_ids))
        rows = yield (
            "fetchall",
            f"UPDATE runs SET cancel_requested_at = COALESCE(cancel_requested_at, {dialect.now}) "
            f"WHERE id IN ({dialect.marks(len(run_ids))}) AND status IN {UNFINISHED_SQL} RETURNING id",
            tuple(run_ids),
        )
        for row in rows:
            notice = self.cancel_notice(str(row[0]))
            if notice is not None:
                yield ("execute", *notice)

    def _admission(self, dialect: Dialect, run: NewRun) -> Plan[Admitted]:
        if run.idempotency_key is not None:  # checked first; the insert below settles races
            row = yield ("fetchone", _KEY_SQL, (run.user_id, run.idempotency_key))
            if row is not None:
                raise IdempotencyKeyUsed(str(row[0]))
        yield from claim_ops(dialect, run.conversation_id, run.user_id)  # PostgreSQL: locks its row
        rows = yield (
            "fetchall",
            f"SELECT id, status FROM runs WHERE user_id = ? AND conversation_id = ? AND status IN {NOT_ENDED_SQL} "
            f"ORDER BY {self.order}",
            (run.user_id, run.conversation_id),
        )
        others = [str(r[0]) for r in rows]
        parked = [str(r[0]) for r in rows if r[1] == WAITING_APPROVAL]
        if parked and run.multitask != "interrupt":  # queued, it would wait for the decision (docs/approvals.md)
            raise ApprovalPending(parked[0])
        if others and run.multitask == "reject":
            raise ConversationBusy(run.conversation_id)
        cap = run.max_unfinished_per_user
        if cap is not None:
            lock = self.cap_lock(run.user_id)
            if lock is not None:
                yield ("execute", *lock)
            rows = yield (
                "fetchall",
                f"SELECT id FROM runs WHERE user_id = ? AND status IN {UNFINISHED_SQL} LIMIT ?",
                (run.user_id, cap + len(run.ending_unwritten)),
            )
            ending = set(run.ending_unwritten)
            if sum(1 for r in rows if str(r[0]) not in ending) >= cap:
                raise TooManyRuns(run.user_id)
        if others and run.multitask == "interrupt":  # their owners end them (``cancel_requests``)
            yield from self._mark_cancelled(dialect, others)
        # Two replicas admitting one key at once: the unique index lets one insert win;
        # the other inserts nothing, waits for the winner's commit and names its run.
        inserted = yield (
            "fetchone",
            "INSERT INTO runs(id, conversation_id, user_id, context_type, status, input, multitask, "
            "idempotency_key, request_fingerprint, lease_owner, lease_until) "
            f"VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, CASE WHEN ? THEN {dialect.now} + ? END) "
            "ON CONFLICT (user_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING id",
            (
                run.id,
                run.conversation_id,
                run.user_id,
                run.context_type,
                run.input,
                run.multitask,
                run.idempotency_key,
                run.request_fingerprint,
                run.lease_owner,
                run.lease_owner is not None,
                float(run.lease_s),
            ),
        )
        if inserted is None:
            row = yield ("fetchone", _KEY_SQL, (run.user_id, run.idempotency_key))
            raise IdempotencyKeyUsed(str(row[0]) if row else "")
        titled = False
        if run.title is not None:  # the client's title, in this transaction: no model call, no later write
            titled = bool(
                (
                    yield (
                        "execute",
                        "UPDATE conversations SET title = ? WHERE user_id = ? AND id = ? AND title IS NULL",
                        (dialect.text(run.title), run.user_id, run.conversation_id),
                    )
                )
            )
        return Admitted(others, titled)

    async def create(self, run: NewRun, *, deadline: float | None = None) -> Admitted:
        """``deadline``: the request's storage budget (its client has no run id yet)."""
        return await self.sql.transact_plan(lambda dialect: self._admission(dialect, run), deadline=deadline)

    async def request_cancel(self, run_id: str) -> StoredRun | None:
        """Mark the run's cancel if it has not ended (and tell its owner at commit where
        the engine can); the run as stored afterwards."""
        await self.sql.transact_plan(lambda dialect: self._mark_cancelled(dialect, [run_id]))
        return await self.get(run_id)

    # --- reads ----------------------------------------------------------------------------

    async def cancel_requests(self, run_ids: Sequence[str]) -> set[str]:
        out: set[str] = set()
        for chunk in _chunks(list(run_ids)):
            rows = await self.sql.fetchall(
                f"SELECT id FROM runs WHERE id IN ({self.sql.dialect.marks(len(chunk))}) "
                f"AND cancel_requested_at IS NOT NULL AND status IN {UNFINISHED_SQL}",
                tuple(chunk),
            )
            out.update(str(r[0]) for r in rows)
        return out

    async def get(self, run_id: str) -> StoredRun | None:
        row = await self.sql.fetchone(f"SELECT {self.columns} FROM runs r WHERE r.id = ?", (run_id,))
        return stored_run(row) if row else None

    async def find_by_idempotency_key(self, user_id: str, key: str) -> StoredRun | None:
        row = await self.sql.fetchone(
            f"SELECT {self.columns} FROM runs r WHERE r.user_id = ? AND r.idempotency_key = ?", (user_id, key)
        )
        return stored_run(row) if row else None

    async def events_after(self, run_id: str, after: int, limit: int = 10_000) -> list[RunEvent]:
        rows = await self.sql.fetchall(*self.log.after(run_id, after, limit))
        # A compacted run's text stretch is one row; a reader resuming inside it gets the
        # rest of its text (``storage.event_folding``).
        return [RunEvent(int(s), str(e), unfold_after(after, str(d), f)) for s, e, d, f in rows]

    async def unfinished(self) -> list[StoredRun]:
        rows = await self.sql.fetchall(
            f"SELECT {self.columns} FROM runs r WHERE r.status IN {UNFINISHED_SQL} ORDER BY r.{self.order}"
        )
        return [stored_run(r) for r in rows]

    # --- writes ---------------------------------------------------------------------------

    def statements(self, step: RunWrite) -> list[Statement]:
        before, after = self.step_around(step)
        return [*before, *step_statements(self.sql.dialect, step), *after]

    def write(
        self,
        step: RunWrite,
        *,
        on_commit: Callable[[], None] | None = None,
        on_fail: Callable[[BaseException], None] | None = None,
    ) -> None:
        # Only a step whose lease is checked gets a wrapper that maps its failure: the
        # wrapper holds the step until it commits, and under load thousands of steps wait
        # in the writer's queue (issue 22: wrapping every leased step on SQLite cost
        # ~0.35 KiB per queued step, +25-30 % peak RSS per stream).
        fail = on_fail
        if on_fail is not None and self.checks_lease(step):

            def fail(exc: BaseException) -> None:
                on_fail(self.failure(step, exc))

        self.sql.enqueue(self.statements(step), on_commit=on_commit, on_fail=fail)

    async def commit(self, step: RunWrite, *, on_commit: Callable[[], None] | None = None) -> None:
        try:
            await self.sql.commit(self.statements(step), on_commit=on_commit)
        except Exception as exc:
            mapped = self.failure(step, exc)
            if mapped is exc:
                raise
            raise mapped from exc

    async def settle_log(self, *, everything: bool = False) -> None:
        """Move the events of runs ended since into ``run_events`` and trim the live log
        (``storage.stores.event_log``; a no-op on PostgreSQL), after every step queued
        before. ``everything``: every unfinished run's events too (``migrate-db``'s
        copy reads ``run_events`` alone)."""
        statements = self.log.settle(everything=everything)
        if statements:
            await self.sql.commit(statements)

    async def set_status(self, run_ids: Sequence[str], status: str) -> None:
        # An ending is an ending however it is written: it forgets the caller's credentials
        # (``input``) and records when the run ended — once, the first ending's time — as a
        # stored ending does, so the retention pass finds it (``storage.stores.retention``).
        ended = f"COALESCE(finished_at, {self.sql.dialect.now})"
        ending = "" if status in NOT_ENDED else f", input = NULL, checkpoint = NULL, finished_at = {ended}"
        statements: list[Statement] = [
            (f"UPDATE runs SET status = ?{ending} WHERE id IN ({self.sql.dialect.marks(len(c))})", (status, *c))
            for c in _chunks(list(run_ids))
        ]
        if statements:
            await self.sql.execute(statements)

    async def count_resume(self, run_id: str) -> None:
        """One more resume of ``run_id`` where it is carried on without a claim (a process
        without leases, which carries on every unfinished run at start-up); a claim counts
        its own (``RESUMES_AFTER_CLAIM``)."""
        await self.sql.execute([("UPDATE runs SET resumes = resumes + 1 WHERE id = ?", (run_id,))])

    # --- leases: which process executes which run -------------------------------------------

    def _expired(self, expired_only: bool) -> str:
        return f"AND (lease_until IS NULL OR lease_until < {self.sql.dialect.now})" if expired_only else ""

    def _claim(
        self, dialect: Dialect, owner: str, lease_s: float, expired: str, limit: int
    ) -> Plan[dict[str, tuple[Any, int]]]:
        rows = yield (
            "fetchall",
            f"SELECT id, lease_until FROM runs WHERE status IN {UNFINISHED_SQL} {expired} "
            f"ORDER BY {self.order} LIMIT ?",
            (limit,),
        )
        taken: dict[str, tuple[Any, int]] = {}
        for rid, until in rows:
            row = yield (
                "fetchone",
                f"UPDATE runs SET lease_owner = ?, lease_until = {dialect.now} + ?, lease_epoch = {EPOCH_AFTER_CLAIM}, "
                f"resumes = {RESUMES_AFTER_CLAIM} WHERE id = ? RETURNING lease_epoch",
                (owner, float(lease_s), owner, owner, rid),
            )
            taken[str(rid)] = (until, int(row[0]))
        return taken

    async def claimed(self, owner: str, lease_s: float, expired_only: bool, limit: int) -> dict[str, tuple[Any, int]]:
        """Run id -> (its old lease end, the lease epoch of this claim), for the runs
        taken (one writer: atomic)."""
        expired = self._expired(expired_only)
        return await self.sql.transact_plan(lambda dialect: self._claim(dialect, owner, lease_s, expired, limit))

    async def claim(
        self, owner: str, lease_s: float, *, expired_only: bool = True, limit: int = 100
    ) -> list[StoredRun]:
        """Take unfinished runs whose lease expired (or that never had one) — all of them
        when not ``expired_only`` — for ``owner``, atomically: of processes claiming at
        once, each run goes to exactly one. Oldest first."""
        claimed = await self.claimed(owner, lease_s, expired_only, limit)
        out: list[StoredRun] = []
        for chunk in _chunks(list(claimed)):
            rows = await self.sql.fetchall(
                f"SELECT {self.columns} FROM runs r WHERE r.id IN ({self.sql.dialect.marks(len(chunk))}) "
                f"ORDER BY r.{self.order}",
                tuple(chunk),
            )
            out += [
                replace(run, lease_expired_at=claimed[run.id][0], lease_epoch=claimed[run.id][1])
                for run in map(stored_run, rows)
            ]
        return out

    def _renew(self, dialect: Dialect, owner: str, run_ids: Sequence[str], lease_s: float) -> Plan[set[str]]:
        held: set[str] = set()
        for rid in run_ids:
            changed = yield (
                "execute",
                f"UPDATE runs SET lease_until = {dialect.now} + ? WHERE id = ? AND lease_owner = ?",
                (float(lease_s), rid, owner),
            )
            if changed:
                held.add(rid)
        return held

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases; returns the runs it still holds."""
        if not run_ids:
            return set()
        return await self.sql.transact_plan(lambda dialect: self._renew(dialect, owner, run_ids, lease_s))

    def _release(self, dialect: Dialect, owner: str, run_ids: Sequence[str]) -> Plan[int]:
        released = 0
        for chunk in _chunks(list(run_ids)):
            released += yield (
                "execute",
                f"UPDATE runs SET lease_until = NULL WHERE id IN ({dialect.marks(len(chunk))}) AND lease_owner = ?",
                (*chunk, owner),
            )
        return released

    async def release_leases(self, owner: str, run_ids: Sequence[str]) -> int:
        """Give runs up at once (shutdown): the next process that looks takes them. How
        many ``owner`` still held (a run another process took over meanwhile is left alone
        and not counted)."""
        if not run_ids:
            return 0
        return await self.sql.transact_plan(lambda dialect: self._release(dialect, owner, run_ids))


__all__ = ["EPOCH_AFTER_CLAIM", "RESUMES_AFTER_CLAIM", "SqlRunStore"]
