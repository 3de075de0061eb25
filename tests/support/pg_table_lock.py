"""Hold a PostgreSQL table's writes back while others queue on it, then let them all go
at once: what forces two replicas' transactions to interleave as they can when they
start at the same moment (each reads before either writes), without counting on timing.

``LOCK TABLE … IN SHARE MODE`` lets reads through and blocks every ``INSERT``,
``UPDATE`` and ``DELETE`` until the holder commits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import psycopg


class HeldWrites:
    """Writes to ``table`` held by a transaction on a connection of its own."""

    def __init__(self, conn: psycopg.AsyncConnection[tuple[object, ...]], table: str) -> None:
        self._conn = conn
        self._table = table

    async def waiting(self) -> int:
        """How many other sessions wait for a lock on the table."""
        cur = await self._conn.execute(
            "SELECT count(*) FROM pg_locks WHERE relation = %s::regclass AND NOT granted", (self._table,)
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def until_waiting(self, count: int, what: str, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while await self.waiting() < count:
                await asyncio.sleep(0.02)

    async def release(self) -> None:
        await self._conn.commit()


@contextlib.asynccontextmanager
async def writes_held(url: str, table: str) -> AsyncIterator[HeldWrites]:
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute(f"LOCK TABLE {table} IN SHARE MODE")
        held = HeldWrites(conn, table)
        try:
            yield held
        finally:
            await held.release()
