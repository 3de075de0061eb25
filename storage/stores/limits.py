"""Shared admission limits: request counts per one-minute window and each user's
unfinished runs, so every process and replica on the database sees the same numbers."""

from __future__ import annotations

from storage.limit_records import WINDOW_S, RateDecision, decide, window_of
from storage.records import UNFINISHED
from storage.sql import SqlEngine, Tx

_UNFINISHED_SQL = "(" + ", ".join(f"'{s}'" for s in UNFINISHED) + ")"
# One statement, atomic under concurrency: the counter of the current window grows
# only while it is under the allowance computed from the previous window (a refused
# request is not counted), and two writers — SQLite's one writer, PostgreSQL's row
# lock taken by the upsert — can never both take the last slot.
_HIT_SQL = (
    "INSERT INTO rate_limits(key, window_start, count) VALUES (?, ?, 1) "
    "ON CONFLICT (key, window_start) DO UPDATE SET count = rate_limits.count + 1 "
    "WHERE rate_limits.count < ? RETURNING count"
)


class SqlLimitStore:
    def __init__(self, sql: SqlEngine) -> None:
        self.db = sql

    async def hit(self, key: str, per_minute: int, now: float, *, deadline: float | None = None) -> RateDecision:
        start = window_of(now)

        async def tx(conn: Tx) -> RateDecision:
            row = await conn.fetchone(
                "SELECT count FROM rate_limits WHERE key = ? AND window_start = ?", (key, start - WINDOW_S)
            )
            previous = int(row[0]) if row else 0
            allowance, retry = decide(per_minute, previous, now)
            if allowance <= 0:
                return RateDecision(False, retry)
            taken = await conn.fetchone(_HIT_SQL, (key, start, allowance))
            return RateDecision(taken is not None, None if taken is not None else retry)

        return await self.db.transact(tx, deadline=deadline)

    async def prune(self, now: float) -> int:
        async def tx(conn: Tx) -> int:
            return await conn.execute("DELETE FROM rate_limits WHERE window_start < ?", (window_of(now) - WINDOW_S,))

        return await self.db.transact(tx)

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        rows = await self.db.fetchall(
            f"SELECT id FROM runs WHERE user_id = ? AND status IN {_UNFINISHED_SQL} LIMIT ?", (user_id, limit)
        )
        return [str(r[0]) for r in rows]
