"""Workflow drafts (table ``workflow_drafts``), on either engine.

``insert``'s purge-count-insert is one write transaction. SQLite's one writer runs it
alone; on PostgreSQL it first takes a transaction-scoped advisory lock on the owner, so
concurrent inserts for one owner — from any replica — are counted one after another
and never overshoot the limit, while other owners do not wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from storage.draft_records import Draft, DraftAction
from storage.sql import SqlEngine, Tx, take_lock

_COLUMNS = "id, owner, name, entity, trigger_type, description, trigger_conditions, actions, created_at, last_access"


class SqlDraftStore:
    def __init__(self, sql: SqlEngine) -> None:
        self._db = sql

    async def insert(self, draft: Draft, *, live_after: float, max_per_owner: int) -> bool:
        row = (
            draft.id,
            draft.owner,
            draft.name,
            draft.entity,
            draft.trigger_type,
            draft.description,
            orjson.dumps(draft.trigger_conditions).decode() if draft.trigger_conditions is not None else None,
            _encode_actions(draft),
            draft.created_at,
            draft.last_access,
        )

        async def run(tx: Tx) -> bool:
            await take_lock(tx, "workflow_drafts:" + draft.owner)
            await tx.execute("DELETE FROM workflow_drafts WHERE last_access <= ?", (live_after,))
            count = await tx.fetchone("SELECT COUNT(*) FROM workflow_drafts WHERE owner = ?", (draft.owner,))
            if count is not None and int(count[0]) >= max_per_owner:
                return False
            await tx.execute(f"INSERT INTO workflow_drafts({_COLUMNS}) VALUES ({tx.dialect.marks(len(row))})", row)
            return True

        return await self._db.transact(run)

    async def load(self, owner: str, draft_id: str, *, live_after: float) -> Draft | None:
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM workflow_drafts WHERE id = ? AND owner = ? AND last_access > ?",
            (draft_id, owner, live_after),
        )
        return _row_to_draft(row) if row is not None else None

    async def save(self, draft: Draft) -> None:
        await self._db.execute(
            [
                (
                    "UPDATE workflow_drafts SET actions = ?, last_access = ? WHERE id = ? AND owner = ?",
                    (_encode_actions(draft), draft.last_access, draft.id, draft.owner),
                )
            ]
        )

    async def purge(self, *, live_after: float) -> int:
        async def run(tx: Tx) -> int:
            return await tx.execute("DELETE FROM workflow_drafts WHERE last_access <= ?", (live_after,))

        return await self._db.transact(run)


def _encode_actions(draft: Draft) -> str:
    return orjson.dumps([a.to_dict() for a in draft.actions]).decode()


def _row_to_draft(row: Sequence[Any]) -> Draft:
    return Draft(
        id=row[0],
        owner=row[1],
        name=row[2],
        entity=row[3],
        trigger_type=row[4],
        description=row[5] or "",
        trigger_conditions=orjson.loads(row[6]) if row[6] else None,
        actions=[DraftAction.from_dict(a) for a in orjson.loads(row[7] or "[]")],
        created_at=float(row[8]),
        last_access=float(row[9]),
    )
