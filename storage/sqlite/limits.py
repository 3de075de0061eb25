"""Shared admission limits on SQLite: request counts per one-minute window and each
user's unfinished runs, so every process on the file sees the same numbers."""

from __future__ import annotations

import sqlite3

from storage.limit_records import WINDOW_S, RateDecision, decide, window_of
from storage.records import UNFINISHED
from storage.sqlite.database import SqliteDatabase

_UNFINISHED_SQL = "(" + ", ".join(f"'{s}'" for s in UNFINISHED) + ")"
# The counter of the current window grows only while it is under the allowance
# computed from the previous window: a refused request is not counted, and two
# writers can never both take the last slot (SQLite has one writer).
_HIT_SQL = (
    "INSERT INTO rate_limits(key, window_start, count) VALUES (?, ?, 1) "
    "ON CONFLICT(key, window_start) DO UPDATE SET count = count + 1 WHERE count < ? RETURNING count"
)


class SqliteLimitStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    async def hit(self, key: str, per_minute: int, now: float) -> RateDecision:
        start = window_of(now)

        def tx(conn: sqlite3.Connection) -> RateDecision:
            row = conn.execute(
                "SELECT count FROM rate_limits WHERE key = ? AND window_start = ?", (key, start - WINDOW_S)
            ).fetchone()
            previous = int(row[0]) if row else 0
            allowance, retry = decide(per_minute, previous, now)
            if allowance <= 0:
                return RateDecision(False, retry)
            taken = conn.execute(_HIT_SQL, (key, start, allowance)).fetchone()
            return RateDecision(taken is not None, None if taken is not None else retry)

        return await self.db.transact_sync(tx)

    async def prune(self, now: float) -> int:
        def tx(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM rate_limits WHERE window_start < ?", (window_of(now) - WINDOW_S,)
            ).rowcount

        return int(await self.db.transact_sync(tx))

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        rows = await self.db.fetchall(
            f"SELECT id FROM runs WHERE user_id = ? AND status IN {_UNFINISHED_SQL} LIMIT ?", (user_id, limit)
        )
        return [str(r[0]) for r in rows]
