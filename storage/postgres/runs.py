"""Runs on PostgreSQL: the shared run store (``storage.stores.runs``) with what only
replicas need. Each step first checks that this process still holds the run's lease
(``agentchat_hold_lease``, in the step's own transaction) and, when it has events,
notifies followers on other replicas at commit; a cancel is notified to the replica
executing the run; a user's admissions take turns on a per-user advisory lock; claims
and renewals skip rows another transaction holds (``FOR UPDATE SKIP LOCKED``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from storage.dialect import Statement
from storage.errors import LeaseLost
from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.dialect import POSTGRES, PostgresSql
from storage.postgres.notify_payload import encode_payload
from storage.records import UNFINISHED, RunWrite
from storage.stores.runs import EPOCH_AFTER_CLAIM, RESUMES_AFTER_CLAIM, SqlRunStore

_NOW = POSTGRES.now


#: Channel of the notification every committed step with events sends (payload
#: ``run_id:last_seq`` and, when they fit, the events: ``notify_payload``): followers on
#: other replicas get the new events without reading the log.
NOTIFY_CHANNEL = "run_events"
_NOTIFY_SQL = f"SELECT pg_notify('{NOTIFY_CHANNEL}', ?)"
#: The owner *and* the claim (``lease_epoch``): a stale copy of the run in the owner's
#: own process is refused too (issue 23).
_HOLD_LEASE_SQL = "SELECT agentchat_hold_lease_epoch(?, ?, CAST(? AS BIGINT), ?)"
#: Channel of a cancel asked for on any replica (payload: the run id), sent in the
#: transaction that marks ``cancel_requested_at``: the replica executing the run cancels
#: it at once (``notify.RunEventsListener``); a replica that missed it finds the mark on
#: its next look (``cancel_requests``) or when it claims the run.
CANCEL_CHANNEL = "run_cancels"
#: ``pg_advisory_xact_lock(RUN_CAP_LOCK, hashtext(user_id))``: one admission per user at a
#: time counts the user's unfinished runs ("RUNS").
RUN_CAP_LOCK = 0x52554E53


def lease_lost(exc: BaseException) -> bool:
    """Whether a failed write was refused by ``agentchat_hold_lease``."""
    return isinstance(exc, psycopg.errors.RaiseException) and "run_lease_lost" in str(exc)


def _as_lease_lost(step: RunWrite, exc: BaseException) -> BaseException:
    """``LeaseLost`` (caused by ``exc``) when a leased step was refused because another
    process holds the run now; any other failure as it is. One mapping for the queued
    writes and the direct commits (the rescue of a failed run's ending)."""
    if step.lease_owner is None or not lease_lost(exc):
        return exc
    lost = LeaseLost(f"run {step.run_id} is held by another process now")
    lost.__cause__ = exc
    return lost


class PostgresRunStore(SqlRunStore):
    #: A write given up means a server away that comes back, with every replica's claims
    #: for the lapsed leases waiting on it (``app.runs.run.Run.survives_outage``); not,
    #: as on SQLite, this process's own file locked or replaced.
    outage_passes = True
    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(PostgresSql(db))
        self._pg = db

    def checks_lease(self, step: RunWrite) -> bool:
        return step.lease_owner is not None

    def step_around(self, step: RunWrite) -> tuple[list[Statement], list[Statement]]:
        before: list[Statement] = []
        if self.checks_lease(step):  # first: a run taken over stores nothing more
            before.append((_HOLD_LEASE_SQL, (step.run_id, step.lease_owner, step.lease_epoch, float(step.lease_s))))
        after: list[Statement] = []
        if step.events:  # delivered at commit, in commit order, only if it commits
            after.append((_NOTIFY_SQL, (encode_payload(step.run_id, step.events),)))
        return before, after

    def cap_lock(self, user_id: str) -> Statement | None:
        """One admission per user at a time: the next one counts after this one committed."""
        return ("SELECT pg_advisory_xact_lock(?, hashtext(?))", (RUN_CAP_LOCK, user_id))

    def cancel_notice(self, run_id: str) -> Statement | None:
        return (f"SELECT pg_notify('{CANCEL_CHANNEL}', ?)", (run_id,))

    def failure(self, step: RunWrite, exc: BaseException) -> BaseException:
        return _as_lease_lost(step, exc)

    async def claimed(self, owner: str, lease_s: float, expired_only: bool, limit: int) -> dict[str, tuple[Any, int]]:
        """Of replicas claiming at once, each run goes to exactly one: the sub-select locks
        the rows (skipping those another claim holds) and keeps each one's old lease end
        (returned: the take-over latency starts when the dead replica's lease expired),
        with the lease epoch the claiming statement left (``EPOCH_AFTER_CLAIM``)."""
        sql = POSTGRES.render(
            f"UPDATE runs SET lease_owner = ?, lease_until = {_NOW} + ?, lease_epoch = {EPOCH_AFTER_CLAIM}, "
            f"resumes = {RESUMES_AFTER_CLAIM} FROM ("
            f"SELECT id, lease_until FROM runs WHERE status = ANY(?) {self._expired(expired_only)} "
            "ORDER BY seq LIMIT ? FOR UPDATE SKIP LOCKED) AS old WHERE runs.id = old.id "
            "RETURNING runs.id, old.lease_until, runs.lease_epoch"
        )

        async def tx(conn: Conn) -> dict[str, tuple[Any, int]]:
            cur = await conn.execute(sql, (owner, float(lease_s), owner, owner, list(UNFINISHED), limit))
            return {str(r[0]): (r[1], int(r[2])) for r in await cur.fetchall()}

        return await self._pg.transact(tx)

    async def renew(self, owner: str, run_ids: Sequence[str], lease_s: float) -> set[str]:
        """Extend ``owner``'s leases; returns the runs it still holds (the others were
        taken over, or ended).

        Never waits for a row lock: a run whose row is locked right now is in the middle of
        a step of this process's writer (``agentchat_hold_lease`` renews it in that very
        transaction) or of a claim (which only takes expired leases). Waiting instead
        deadlocked with the writer — a multi-row update and a batch of steps lock the same
        rows in different orders — and PostgreSQL broke each one after its 1 s
        ``deadlock_timeout``: that second reached followers as token delay. A skipped run
        counts as held when its committed owner is ``owner``; a step that finds it lost
        still fails with ``LeaseLost``."""
        if not run_ids:
            return set()
        ids = list(run_ids)
        sql = POSTGRES.render(
            f"WITH renewed AS (UPDATE runs SET lease_until = {_NOW} + ? WHERE id IN ("
            "SELECT id FROM runs WHERE id = ANY(?) AND lease_owner = ? FOR UPDATE SKIP LOCKED)) "
            "SELECT id FROM runs WHERE id = ANY(?) AND lease_owner = ?"
        )

        async def tx(conn: Conn) -> set[str]:
            cur = await conn.execute(sql, (float(lease_s), ids, owner, ids, owner))
            return {str(r[0]) for r in await cur.fetchall()}

        return await self._pg.transact(tx)
