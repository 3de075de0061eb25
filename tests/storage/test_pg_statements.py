"""How a transaction's repeated statements are sent on PostgreSQL (``storage/postgres/statements.py``).

Never as a pipeline (a frozen client would leave the server waiting mid-transaction with
no timeout: tests/storage/test_pg_frozen_transaction.py): repeated single-row inserts as
one multi-row insert, everything else row by row — with the meaning ``executemany`` had:
rows in order, an upsert that meets its own earlier row, an insert that reads earlier rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest

from storage.postgres.statements import MAX_ROWS_PER_INSERT, multi_row_inserts, run_statements
from tests.support.postgres import TestPostgres


@pytest.fixture
async def conn(pg_server: TestPostgres) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    with pg_server.database(empty=True) as url:
        connection = await psycopg.AsyncConnection.connect(url, autocommit=True)
        try:
            await connection.execute("CREATE TABLE t (k INT PRIMARY KEY, v TEXT, n INT NOT NULL DEFAULT 0)")
            yield connection
        finally:
            await connection.close()


async def test_repeated_inserts_land_in_order_in_chunks(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
    rows = [(i, f"v{i}") for i in range(2 * MAX_ROWS_PER_INSERT + 5)]
    async with conn.transaction():
        await run_statements(conn, [("INSERT INTO t(k, v) VALUES (%s, %s)", row) for row in rows])
    cur = await conn.execute("SELECT k, v FROM t ORDER BY k")
    assert await cur.fetchall() == rows


async def test_statements_that_see_earlier_rows_keep_their_meaning(
    conn: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    upsert = "INSERT INTO t(k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET n = t.n + 1, v = excluded.v"
    after = "INSERT INTO t(k, v) SELECT COALESCE(MAX(k), 0) + 1, %s FROM t"
    async with conn.transaction():
        # One statement of these rows would fail ("cannot affect row a second time") or
        # compute every MAX from the same snapshot.
        await run_statements(conn, [(upsert, (1, "a")), (upsert, (1, "b")), (after, ("x",)), (after, ("y",))])
    cur = await conn.execute("SELECT k, v, n FROM t ORDER BY k")
    assert await cur.fetchall() == [(1, "b", 1), (2, "x", 0), (3, "y", 0)]


def test_only_plain_single_row_inserts_are_merged() -> None:
    plain = "INSERT INTO run_events(run_id, seq, event, data) VALUES (%s, %s, %s, %s)"
    merged = multi_row_inserts(plain, [("r", 1, "e", "{}"), ("r", 2, "e", "{}")])
    assert merged is not None
    assert list(merged) == [
        (
            "INSERT INTO run_events(run_id, seq, event, data) VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)",
            ["r", 1, "e", "{}", "r", 2, "e", "{}"],
        )
    ]
    for other in (
        plain + " ON CONFLICT DO NOTHING",
        plain + " RETURNING seq",
        "INSERT INTO t(k, v) SELECT %s, %s",
        "UPDATE runs SET checkpoint = %s WHERE id = %s",
    ):
        assert multi_row_inserts(other, [(1, 2), (3, 4)]) is None
