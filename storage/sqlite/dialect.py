"""SQLite's dialect and executor: portable SQL is SQLite's own (``?``), writes run on
the one writer connection (``database.py``), reads on a reader."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aiosqlite
import numpy as np

from storage.dialect import Dialect
from storage.sql import Plan, Row, SqlEngine, Tx, advance
from storage.sqlite.database import SqliteDatabase

T = TypeVar("T")

SQLITE = Dialect(
    name="sqlite",
    paramstyle="qmark",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    for_update="",
    text_lock_sql=None,  # one writer: write transactions already run one at a time
    number_lock_sql=None,
    text_rejects_nul=False,
    encode_vector=lambda vec: vec.tobytes(),
    decode_vector=lambda raw: np.frombuffer(raw, dtype=np.float32),
    same_as="IS",
    differs_from="IS NOT",
    byte_order="",
)


class SqliteTx:
    """A write transaction on the writer connection."""

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._conn.execute(sql, params) as cur:
            return int(cur.rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._conn.execute(sql, params) as cur:
            row = await cur.fetchone()
        return tuple(row) if row is not None else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(r) for r in await self._conn.execute_fetchall(sql, params)]


class SqliteSql(SqlEngine):
    """``storage.sql.SqlEngine`` on one SQLite file."""

    dialect = SQLITE

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        self.db: SqliteDatabase = db

    async def transact(self, fn: Callable[[Tx], Awaitable[T]]) -> T:
        return await self.db.transact(lambda conn: fn(SqliteTx(conn)))

    async def transact_plan(self, make: Callable[[Dialect], Plan[T]]) -> T:
        """The whole transaction in one hop on the writer's thread (``transact_sync``):
        hot paths such as admitting a run stay short when the event loop is busy."""
        return await self.db.transact_sync(lambda conn: run_plan_sync(conn, make(SQLITE)))


def run_plan_sync(conn: sqlite3.Connection, plan: Plan[T]) -> T:
    """``storage.sql.run_plan`` on a plain connection (inside ``transact_sync``)."""
    done, value = advance(plan, None)
    while not done:
        kind, sql, params = value
        if kind == "executemany":
            result: Any = conn.executemany(sql, params).rowcount
        elif kind == "execute":
            result = int(conn.execute(sql, params).rowcount)
        elif kind == "fetchone":
            row = conn.execute(sql, params).fetchone()
            result = tuple(row) if row is not None else None
        else:
            result = [tuple(r) for r in conn.execute(sql, params).fetchall()]
        done, value = advance(plan, result)
    return value  # type: ignore[no-any-return]


__all__ = ["SQLITE", "SqliteSql", "SqliteTx", "run_plan_sync"]
