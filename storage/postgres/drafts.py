"""Workflow drafts on PostgreSQL (table ``workflow_drafts``).

``insert``'s purge-count-insert holds a transaction-scoped advisory lock on the owner,
so concurrent inserts for one owner — from any replica — are counted one after another
and never overshoot the limit; other owners do not wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from storage.draft_records import Draft, DraftAction
from storage.postgres.database import Conn, PostgresDatabase

_COLUMNS = "id, owner, name, entity, trigger_type, description, trigger_conditions, actions, created_at, last_access"


class PostgresDraftStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

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

        async def run(conn: Conn) -> bool:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('workflow_drafts:' || %s, 0))",
                               (draft.owner,))
            await conn.execute("DELETE FROM workflow_drafts WHERE last_access <= %s", (live_after,))
            cur = await conn.execute("SELECT COUNT(*) FROM workflow_drafts WHERE owner = %s", (draft.owner,))
            count = await cur.fetchone()
            if count is not None and int(count[0]) >= max_per_owner:
                return False
            await conn.execute(
                f"INSERT INTO workflow_drafts({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)", row
            )
            return True

        return await self._db.transact(run)

    async def load(self, owner: str, draft_id: str, *, live_after: float) -> Draft | None:
        row = await self._db.fetchone(
            f"SELECT {_COLUMNS} FROM workflow_drafts WHERE id = %s AND owner = %s AND last_access > %s",
            (draft_id, owner, live_after),
        )
        return _row_to_draft(row) if row is not None else None

    async def save(self, draft: Draft) -> None:
        await self._db.execute(
            [
                (
                    "UPDATE workflow_drafts SET actions = %s, last_access = %s WHERE id = %s AND owner = %s",
                    (_encode_actions(draft), draft.last_access, draft.id, draft.owner),
                )
            ]
        )

    async def purge(self, *, live_after: float) -> int:
        async def run(conn: Conn) -> int:
            cur = await conn.execute("DELETE FROM workflow_drafts WHERE last_access <= %s", (live_after,))
            return int(cur.rowcount)

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
