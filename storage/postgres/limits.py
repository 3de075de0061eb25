"""Shared admission limits on PostgreSQL: request counts per one-minute window and each
user's unfinished runs, the same for every replica."""

from __future__ import annotations

from storage.limit_records import WINDOW_S, RateDecision, decide, window_of
from storage.postgres.database import Conn, PostgresDatabase
from storage.records import UNFINISHED

# One statement, atomic under concurrency: the upsert takes the row lock, and the
# counter grows only while under the allowance (a refused request is not counted; two
# replicas can never both take the last slot).
_HIT_SQL = (
    "INSERT INTO rate_limits(key, window_start, count) VALUES (%s, %s, 1) "
    "ON CONFLICT (key, window_start) DO UPDATE SET count = rate_limits.count + 1 "
    "WHERE rate_limits.count < %s RETURNING count"
)


class PostgresLimitStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def hit(self, key: str, per_minute: int, now: float) -> RateDecision:
        start = window_of(now)

        async def tx(conn: Conn) -> RateDecision:
            cur = await conn.execute(
                "SELECT count FROM rate_limits WHERE key = %s AND window_start = %s", (key, start - WINDOW_S)
            )
            row = await cur.fetchone()
            previous = int(row[0]) if row else 0
            allowance, retry = decide(per_minute, previous, now)
            if allowance <= 0:
                return RateDecision(False, retry)
            cur = await conn.execute(_HIT_SQL, (key, start, allowance))
            taken = await cur.fetchone()
            return RateDecision(taken is not None, None if taken is not None else retry)

        return await self.db.transact(tx)

    async def prune(self, now: float) -> int:
        async def tx(conn: Conn) -> int:
            cur = await conn.execute("DELETE FROM rate_limits WHERE window_start < %s", (window_of(now) - WINDOW_S,))
            return int(cur.rowcount or 0)

        return await self.db.transact(tx)

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        rows = await self.db.fetchall(
            "SELECT id FROM runs WHERE user_id = %s AND status = ANY(%s) LIMIT %s", (user_id, list(UNFINISHED), limit)
        )
        return [str(r[0]) for r in rows]
