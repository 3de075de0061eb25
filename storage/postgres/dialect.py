"""PostgreSQL's dialect and executor: portable SQL rendered for psycopg (``%s``),
transactions on pooled connections (``database.py``), advisory locks and
``FOR UPDATE`` where replicas must take turns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from storage.dialect import Dialect
from storage.postgres.database import Conn, PostgresDatabase
from storage.sql import Row, SqlEngine, Tx

T = TypeVar("T")


def _array(value: Any) -> np.ndarray:
    """pgvector's ``Vector`` (binary cursors) or a plain sequence, as float32."""
    if hasattr(value, "to_numpy"):
        return value.to_numpy().astype(np.float32, copy=False)  # type: ignore[no-any-return]
    return np.asarray(value, np.float32)


POSTGRES = Dialect(
    name="postgres",
    paramstyle="format",
    now="(extract(epoch from clock_timestamp())::double precision)",
    for_update=" FOR UPDATE",
    text_lock_sql="SELECT pg_advisory_xact_lock(hashtextextended(?, 0))",
    number_lock_sql="SELECT pg_advisory_xact_lock(?)",
    text_rejects_nul=True,
    encode_vector=lambda vec: vec,  # pgvector's registered adapter sends it
    decode_vector=_array,
    same_as="IS NOT DISTINCT FROM",
    differs_from="IS DISTINCT FROM",
    byte_order=' COLLATE "C"',
)


class PostgresTx:
    """A transaction on one pooled connection."""

    dialect = POSTGRES

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    @property
    def connection(self) -> Conn:
        """The connection itself, for what portable SQL cannot say (``COPY``)."""
        return self._conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        cur = await self._conn.execute(POSTGRES.render(sql), params)  # type: ignore[arg-type]
        return int(cur.rowcount or 0)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self._conn.cursor() as cur:
            await cur.executemany(POSTGRES.render(sql), rows)  # type: ignore[arg-type]

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        cur = await self._conn.execute(POSTGRES.render(sql), params)  # type: ignore[arg-type]
        return await cur.fetchone()

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        cur = await self._conn.execute(POSTGRES.render(sql), params)  # type: ignore[arg-type]
        return list(await cur.fetchall())


class PostgresSql(SqlEngine):
    """``storage.sql.SqlEngine`` on one PostgreSQL database."""

    dialect = POSTGRES

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(db)
        self.db: PostgresDatabase = db

    async def fetchall(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[Row]:
        if not binary:
            return await self.db.fetchall(POSTGRES.render(sql), params)
        async with self.db.reading() as conn, conn.cursor(binary=True) as cur:
            await cur.execute(POSTGRES.render(sql), params)  # type: ignore[arg-type]
            return list(await cur.fetchall())

    async def transact(self, fn: Callable[[Tx], Awaitable[T]], *, deadline: float | None = None) -> T:
        return await self.db.transact(lambda conn: fn(PostgresTx(conn)), deadline=deadline)


__all__ = ["POSTGRES", "PostgresSql", "PostgresTx"]
