"""Stored external answers on PostgreSQL (table ``external_results``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from storage.keyword_records import Citation, ExternalResult
from storage.postgres.database import PostgresDatabase

RESULT_COLUMNS = (
    "result_id, provider, query, answer, citations, model, query_id, conversation_id, created_at, owner"
)


class PostgresExternalResultStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def save(self, result: ExternalResult) -> None:
        await self._db.execute(
            [
                (
                    "INSERT INTO external_results (result_id, provider, query, answer, citations, model,"
                    " query_id, conversation_id, created_at, owner) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        result.id,
                        result.provider,
                        result.query,
                        result.answer,
                        orjson.dumps([c.to_dict() for c in result.citations]).decode(),
                        result.model,
                        result.query_id,
                        result.conversation_id,
                        result.created_at,
                        result.owner,
                    ),
                )
            ]
        )

    async def get(self, result_id: str, *, owner: str | None) -> ExternalResult | None:
        found = await self.get_many([result_id], owner=owner)
        return found[0] if found else None

    async def get_many(self, result_ids: Sequence[str], *, owner: str | None) -> list[ExternalResult]:
        ids = list(dict.fromkeys(result_ids))
        if not ids:
            return []
        rows = await self._db.fetchall(
            f"SELECT {RESULT_COLUMNS} FROM external_results"
            " WHERE result_id = ANY(%s) AND (%s::text IS NULL OR owner = %s)",
            (ids, owner, owner),
        )
        by_id = {row[0]: row_to_result(row) for row in rows}
        return [by_id[i] for i in ids if i in by_id]


def row_to_result(row: Sequence[Any]) -> ExternalResult:
    return ExternalResult(
        id=row[0],
        provider=row[1],
        query=row[2],
        answer=row[3],
        citations=tuple(Citation.from_dict(c) for c in orjson.loads(row[4] or "[]")),
        model=row[5],
        query_id=row[6],
        conversation_id=row[7],
        created_at=float(row[8]),
        owner=str(row[9]),
    )
