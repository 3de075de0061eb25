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

        def plan(dialect: Dialect) -> Plan[bool]:
            changed = yield (
                "execute",
                f"UPDATE runs SET lease_owner = ?, lease_until = {dialect.now} + ? WHERE id = ? "
                f"AND status IN {_UNFINISHED_SQL} AND (lease_until IS NULL OR lease_until < {dialect.now})",
                (owner, float(lease_s), run_id),
            )
            return bool(changed)

        return await self.sql.transact_plan(plan)
