"""A database of either engine stopped at an old migration step, filled with rows as an
older release wrote them, then migrated to the last step: how a migration's tests see
what it does to existing data."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
import psycopg
import pytest

from storage.postgres import migrations as pg_migrations
from storage.sqlite import migrations as sqlite_migrations
from tests.support.postgres import TestPostgres

#: Runs one SQL statement on the migrated database and returns its rows.
Sql = Callable[[str], Awaitable[list[tuple[Any, ...]]]]


@asynccontextmanager
async def migrated_legacy(
    request: pytest.FixtureRequest, tmp_path: Path, before: int, legacy: Sequence[str]
) -> AsyncIterator[Sql]:
    """``request.param`` is the engine ("sqlite" or "postgres"): its database at step
    ``before``, the ``legacy`` statements run there, then every later step applied."""
    if request.param == "sqlite":
        async with aiosqlite.connect(tmp_path / "legacy.db", isolation_level=None) as conn:
            await conn.execute("PRAGMA foreign_keys = ON")
            await sqlite_migrations.migrate(conn, sqlite_migrations.MIGRATIONS[:before])
            for statement in legacy:
                await conn.execute(statement)
            assert await sqlite_migrations.migrate(conn) == sqlite_migrations.MIGRATIONS[-1].version

            async def sqlite_sql(statement: str) -> list[tuple[Any, ...]]:
                return [tuple(r) for r in await conn.execute_fetchall(statement)]

            yield sqlite_sql
        return
    server: TestPostgres = request.getfixturevalue("pg_server")
    with server.database(empty=True) as url:
        await pg_migrations.migrate(url, pg_migrations.MIGRATIONS[:before])
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as pg:
            for statement in legacy:
                await pg.execute(statement)  # type: ignore[arg-type]
            assert await pg_migrations.migrate(url) == pg_migrations.MIGRATIONS[-1].version

            async def pg_sql(statement: str) -> list[tuple[Any, ...]]:
                cur = await pg.execute(statement)  # type: ignore[arg-type]
                return [tuple(r) for r in await cur.fetchall()] if cur.description else []

            yield pg_sql
