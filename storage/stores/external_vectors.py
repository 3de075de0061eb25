"""Embeddings of saved external answers and of keywords (table ``external_vectors``),
on either engine: SQLite keeps a vector's float32 bytes, PostgreSQL pgvector's
``vector`` (the dialect encodes and decodes).

Rows are written once and never updated, and a reader remembers the last ``id`` it
loaded, picking up what other processes stored with one indexed range read. SQLite's
``id`` is AUTOINCREMENT and its one writer commits saves in id order. A PostgreSQL
identity column hands out ids when rows are inserted, not when they commit, so two
concurrent saves could become visible out of order and a reader would skip the slower
one for good; every save therefore takes one transaction-scoped advisory lock first
(saves are rare: one per external answer), which makes ids visible in order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from storage.keyword_records import ExternalResult, ExternalVector, ExternalVectorKind, NewExternalVector
from storage.sql import SqlEngine, Tx, take_lock
from storage.stores.external_results import RESULT_COLUMNS, row_to_result

#: The advisory lock that orders the saves ("extvecs!"; PostgreSQL only).
SAVE_LOCK = 0x6578747665637321


class SqlExternalVectorStore:
    def __init__(self, sql: SqlEngine) -> None:
        self._db = sql

    async def save(self, embed_model: str, rows: Sequence[NewExternalVector]) -> None:
        if not rows:
            return
        now = time.time()
        params = []
        for row in rows:
            vec = np.ascontiguousarray(row.vector, dtype=np.float32).reshape(-1)
            params.append((row.kind, row.ref, embed_model, int(vec.shape[0]), self._db.dialect.encode_vector(vec), now))

        async def run(tx: Tx) -> None:
            await take_lock(tx, SAVE_LOCK)
            await tx.executemany(
                "INSERT INTO external_vectors (kind, ref, embed_model, dim, vector, created_at)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                params,
            )

        await self._db.transact(run)

    async def after(self, embed_model: str, dim: int, after_id: int, limit: int) -> list[ExternalVector]:
        rows = await self._db.fetchall(
            "SELECT id, kind, ref, vector FROM external_vectors"
            " WHERE id > ? AND embed_model = ? AND dim = ? ORDER BY id LIMIT ?",
            (after_id, embed_model, dim, limit),
            binary=True,
        )
        return [
            ExternalVector(int(r[0]), cast(ExternalVectorKind, r[1]), r[2], self._db.dialect.decode_vector(r[3]))
            for r in rows
        ]

    async def unembedded_results(self, embed_model: str, limit: int) -> list[ExternalResult]:
        rows = await self._db.fetchall(
            f"SELECT {RESULT_COLUMNS} FROM external_results r WHERE NOT EXISTS ("
            " SELECT 1 FROM external_vectors v WHERE v.embed_model = ? AND v.kind = 'answer'"
            " AND v.ref = r.result_id) ORDER BY r.created_at LIMIT ?",
            (embed_model, limit),
        )
        return [row_to_result(r) for r in rows]

    async def unembedded_keywords(self, embed_model: str, limit: int) -> dict[str, str]:
        rows: list[tuple[Any, ...]] = await self._db.fetchall(
            "SELECT k.key, k.display FROM keywords k WHERE NOT EXISTS ("
            " SELECT 1 FROM external_vectors v WHERE v.embed_model = ? AND v.kind = 'keyword'"
            " AND v.ref = k.key) ORDER BY k.created_at LIMIT ?",
            (embed_model, limit),
        )
        return {r[0]: r[1] for r in rows}
