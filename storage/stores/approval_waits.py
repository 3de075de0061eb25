"""Runs parked for an approval: the writes that park, decide, expire and re-claim them.

A run whose tool call waits for the user's decision is stored ``waiting_approval`` and
held by no process: its lease is handed back (so no replica carries it, and it takes no
live-run slot), and its ``lease_until`` column keeps the approval's deadline instead of a
lease's end. Every way out is one conditional update on the status, so of a decision, a
second decision, a cancel and the expiry racing on any replicas exactly one wins: the run
turns ``interrupted`` with no lease, and the ordinary claim of unfinished runs (the same
one that carries on a dead replica's runs) hands it to whichever process takes it first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from storage.dialect import Dialect, Statement
from storage.records import UNFINISHED, WAITING_APPROVAL
from storage.sql import Plan

if TYPE_CHECKING:
    from storage.sql import SqlEngine

_UNFINISHED_SQL = "(" + ", ".join(f"'{s}'" for s in UNFINISHED) + ")"
#: A claim's new ``lease_epoch`` (the one parameter: the claimer). A claim that changes
#: hands mints a new epoch, so every copy of the run a process held before — its own
#: included, should the run come back to it — is fenced off (issue 23). A process taking
#: back its own lapsed lease that nobody claimed in between keeps the epoch: its copy
#: still running is the current one, and the steps it already queued stay valid.
EPOCH_AFTER_CLAIM = "CASE WHEN lease_owner = ? THEN lease_epoch ELSE lease_epoch + 1 END"


def park_statement(dialect: Dialect, run_id: str, wait_s: float) -> Statement:
    """Hand the lease back and keep the approval's deadline in ``lease_until``."""
    return (
        f"UPDATE runs SET lease_owner = NULL, lease_until = {dialect.now} + ? WHERE id = ?",
        (float(wait_s), run_id),
    )


def unpark_cancelled_statement(dialect: Dialect, run_ids: Sequence[str]) -> Statement:
    """A cancel of a parked run: claimable now (its claimer finds the cancel mark)."""
    return (
        f"UPDATE runs SET status = 'interrupted', lease_owner = NULL, lease_until = NULL "
        f"WHERE id IN ({dialect.marks(len(run_ids))}) AND status = '{WAITING_APPROVAL}'",
        tuple(run_ids),
    )


class ApprovalWaits:
    """The run store's part for parked runs (``storage.stores.runs.SqlRunStore``)."""

    sql: SqlEngine

    async def decide(self, run_id: str, user_id: str, checkpoint_seq: int, checkpoint: bytes) -> bool:
        """Store a decision (the checkpoint that carries it) if the run still waits at the
        checkpoint the decider read; False when another decision, a cancel or the expiry
        came first (or the run has parked again since, at a later call)."""

        def plan(dialect: Dialect) -> Plan[bool]:
            changed = yield (
                "execute",
                "UPDATE runs SET status = 'interrupted', checkpoint = ?, lease_owner = NULL, lease_until = NULL "
                f"WHERE id = ? AND user_id = ? AND status = '{WAITING_APPROVAL}' AND checkpoint_seq = ?",
                (checkpoint, run_id, user_id, checkpoint_seq),
            )
            return bool(changed)

        return await self.sql.transact_plan(plan)

    async def expire_waits(self) -> list[str]:
        """Turn the parked runs whose deadline passed claimable (their claimer ends them
        ``cancelled``, the approval expired); their ids."""

        def plan(dialect: Dialect) -> Plan[list[str]]:
            rows = yield (
                "fetchall",
                "UPDATE runs SET status = 'interrupted', lease_owner = NULL, lease_until = NULL "
                f"WHERE status = '{WAITING_APPROVAL}' AND lease_until < {dialect.now} RETURNING id",
                (),
            )
            return [str(r[0]) for r in rows]

        return await self.sql.transact_plan(plan)

    async def claim_one(self, run_id: str, owner: str, lease_s: float) -> bool:
        """Take one unfinished run nobody holds (a decided approval, at once, by the
        process that took the decision); False when another process took it first."""
        return await self.claim_one_epoch(run_id, owner, lease_s) is not None

    async def claim_one_epoch(self, run_id: str, owner: str, lease_s: float) -> int | None:
        """``claim_one``, returning the lease epoch the claim holds the run under (its
        steps must carry it) or ``None`` when another process took it first."""

        def plan(dialect: Dialect) -> Plan[int | None]:
            row = yield (
                "fetchone",
                f"UPDATE runs SET lease_owner = ?, lease_until = {dialect.now} + ?, "
                f"lease_epoch = {EPOCH_AFTER_CLAIM} WHERE id = ? "
                f"AND status IN {_UNFINISHED_SQL} AND (lease_until IS NULL OR lease_until < {dialect.now}) "
                "RETURNING lease_epoch",
                (owner, float(lease_s), owner, run_id),
            )
            return None if row is None else int(row[0])

        return await self.sql.transact_plan(plan)
