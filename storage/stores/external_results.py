"""Stored external answers (table ``external_results``), on either engine.

Many ids are read ``IN (?, …)`` lists of at most ``_IN_CHUNK`` (SQLite caps the bound
parameters of one statement; PostgreSQL takes the same lists)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from storage.keyword_records import Citation, ExternalResult
from storage.sql import SqlEngine

_IN_CHUNK = 500
RESULT_COLUMNS = "result_id, provider, query, answer, citations, model, query_id, conversation_id, created_at, owner"


class SqlExternalResultStore:
    def __init__(self, sql: SqlEngine) -> None:
        self._db = sql

    async def save(self, result: ExternalResult) -> None:
        await self._db.execute(
            [
                (
                    "INSERT INTO external_results (result_id, provider, query, answer, citations, model,"
                    " query_id, conversation_id, created_at, owner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
        by_id: dict[str, ExternalResult] = {}
        mine = "" if owner is None else " AND owner = ?"
        for i in range(0, len(ids), _IN_CHUNK):
            chunk = ids[i : i + _IN_CHUNK]
            rows = await self._db.fetchall(
                f"SELECT {RESULT_COLUMNS} FROM external_results"
                f" WHERE result_id IN ({self._db.dialect.marks(len(chunk))}){mine}",
                [*chunk, *(() if owner is None else (owner,))],
            )
            by_id.update((row[0], row_to_result(row)) for row in rows)
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
