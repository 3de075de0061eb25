"""Embeddings of saved external answers and of keywords (table ``external_vectors``).

Rows are written once and never updated; ``id`` is AUTOINCREMENT, so it only grows even
after deletions, and a process that remembers the last id it loaded picks up what other
processes stored with one indexed range read.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from storage.keyword_records import ExternalResult, ExternalVector, ExternalVectorKind, NewExternalVector
from storage.sqlite.database import SqliteDatabase
from storage.sqlite.external_results import RESULT_COLUMNS, row_to_result


class SqliteExternalVectorStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def save(self, embed_model: str, rows: Sequence[NewExternalVector]) -> None:
        if not rows:
            return
        now = time.time()
        params = []
        for row in rows:
            vec = np.ascontiguousarray(row.vector, dtype=np.float32).reshape(-1)
            params.append((row.kind, row.ref, embed_model, int(vec.shape[0]), vec.tobytes(), now))
        await self._db.execute(
            [
                (
                    "INSERT OR IGNORE INTO external_vectors (kind, ref, embed_model, dim, vector, created_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    p,
                )
                for p in params
            ]
        )

    async def after(self, embed_model: str, dim: int, after_id: int, limit: int) -> list[ExternalVector]:
        rows = await self._db.fetchall(
            "SELECT id, kind, ref, vector FROM external_vectors"
            " WHERE id > ? AND embed_model = ? AND dim = ? ORDER BY id LIMIT ?",
            (after_id, embed_model, dim, limit),
        )
        return [
            ExternalVector(int(r[0]), cast(ExternalVectorKind, r[1]), r[2], np.frombuffer(r[3], dtype=np.float32))
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
