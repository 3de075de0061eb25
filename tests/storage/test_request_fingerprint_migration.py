"""Migration 31 on a database written before it, on both engines: the ``runs`` table
gains ``request_fingerprint`` and a keyed run stored before the step keeps its key with
no fingerprint (``None``), which the routes treat as before (any body that names no
other conversation resumes it: ``tests/test_idempotency_fingerprint.py``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiosqlite
import psycopg

from storage.postgres import open_postgres_storage
from storage.postgres.migrations import MIGRATIONS as PG_MIGRATIONS
from storage.postgres.migrations import migrate as pg_migrate
from storage.sqlite.migration_steps import MIGRATIONS
from storage.sqlite.migrations import migrate
from tests.support.postgres import TestPostgres
from tests.support.storage import opened_storage

OLD_RUN = (
    "INSERT INTO runs(id, conversation_id, user_id, context_type, status, idempotency_key) "
    "VALUES ('r-old', 'c-old', 'alice', 'knowledge', 'completed', 'k-old')"
)


def step_31_is_the_fingerprint() -> None:
    assert MIGRATIONS[30].version == PG_MIGRATIONS[30].version == 31
    assert "request_fingerprint" in MIGRATIONS[30].statements[0]
    assert "request_fingerprint" in PG_MIGRATIONS[30].statements[0]


async def test_sqlite_keeps_a_pre_migration_keyed_run_without_a_fingerprint(tmp_path: Path) -> None:
    step_31_is_the_fingerprint()
    path = tmp_path / "old.sqlite3"
    async with aiosqlite.connect(path) as conn:
        assert await migrate(conn, MIGRATIONS[:30]) == 30
        await conn.execute(OLD_RUN)
        await conn.commit()
        assert await migrate(conn) == MIGRATIONS[-1].version
    async with opened_storage(path) as storage:
        old = await storage.runs.find_by_idempotency_key("alice", "k-old")
    assert old is not None and old.id == "r-old" and old.request_fingerprint is None


async def test_postgres_keeps_a_pre_migration_keyed_run_without_a_fingerprint(pg_server: TestPostgres) -> None:
    with pg_server.database(empty=True) as url:
        assert await asyncio.wait_for(pg_migrate(url, PG_MIGRATIONS[:30]), 120) == 30
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await conn.execute(OLD_RUN)
        assert await asyncio.wait_for(pg_migrate(url), 120) == PG_MIGRATIONS[-1].version
        storage = await open_postgres_storage(url)
        try:
            old = await storage.runs.find_by_idempotency_key("alice", "k-old")
        finally:
            await storage.close()
    assert old is not None and old.id == "r-old" and old.request_fingerprint is None
