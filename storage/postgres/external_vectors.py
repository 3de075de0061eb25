"""Embeddings of saved external answers and of keywords on PostgreSQL (table
``external_vectors``, pgvector's ``vector`` column).

Rows are written once and never updated, and a reader remembers the last ``id`` it
loaded. An identity column hands out ids when rows are inserted, not when they commit,
so two concurrent saves could become visible out of order and a reader would skip the
slower one for good; every save therefore takes one transaction-scoped advisory lock
first (saves are rare: one per external answer), which makes ids visible in order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from storage.keyword_records import ExternalResult, ExternalVector, ExternalVectorKind, NewExternalVector
from storage.postgres.database import Conn, PostgresDatabase
from storage.postgres.external_results import RESULT_COLUMNS, row_to_result

#: ``pg_advisory_xact_lock`` key that orders the saves ("extvecs!").
SAVE_LOCK = 0x6578747665637321


class PostgresExternalVectorStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def save(self, embed_model: str, rows: Sequence[NewExternalVector]) -> None:
        if not rows:
            return
        now = time.time()
        params = []
        for row in rows:
            vec = np.ascontiguousarray(row.vector, dtype=np.float32).reshape(-1)
            params.append((row.kind, row.ref, embed_model, int(vec.shape[0]), vec, now))

        async def run(conn: Conn) -> None:
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (SAVE_LOCK,))
            async with conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO external_vectors (kind, ref, embed_model, dim, vector, created_at)"
                    " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (embed_model, kind, ref) DO NOTHING",
                    params,
                )

        await self._db.transact(run)

    async def after(self, embed_model: str, dim: int, after_id: int, limit: int) -> list[ExternalVector]:
        async with self._db.reading() as conn, conn.cursor(binary=True) as cur:
            await cur.execute(
                "SELECT id, kind, ref, vector FROM external_vectors"
                " WHERE id > %s AND embed_model = %s AND dim = %s ORDER BY id LIMIT %s",
                (after_id, embed_model, dim, limit),
            )
            rows = await cur.fetchall()
        return [
            ExternalVector(int(r[0]), cast(ExternalVectorKind, r[1]), r[2], _array(r[3]))
            for r in rows
        ]

    async def unembedded_results(self, embed_model: str, limit: int) -> list[ExternalResult]:
        rows = await self._db.fetchall(
            f"SELECT {RESULT_COLUMNS} FROM external_results r WHERE NOT EXISTS ("
            " SELECT 1 FROM external_vectors v WHERE v.embed_model = %s AND v.kind = 'answer'"
            " AND v.ref = r.result_id) ORDER BY r.created_at LIMIT %s",
            (embed_model, limit),
        )
        return [row_to_result(r) for r in rows]

    async def unembedded_keywords(self, embed_model: str, limit: int) -> dict[str, str]:
        rows: list[tuple[Any, ...]] = await self._db.fetchall(
            "SELECT k.key, k.display FROM keywords k WHERE NOT EXISTS ("
            " SELECT 1 FROM external_vectors v WHERE v.embed_model = %s AND v.kind = 'keyword'"
            " AND v.ref = k.key) ORDER BY k.created_at LIMIT %s",
            (embed_model, limit),
        )
        return {r[0]: r[1] for r in rows}


def _array(value: Any) -> np.ndarray:
    return value.to_numpy().astype(np.float32, copy=False) if hasattr(value, "to_numpy") else np.asarray(
        value, np.float32)
