"""A database migrated by a newer release is refused, on both engines and by the CLI:
this release has no down-migrations, and running on tables it does not know would hide
the newer layout's rows and write beside them (the review of the live-log branch found an
older release reading a migrated file as empty and restarting a run's events at 1)."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest

from storage.errors import SchemaTooNew
from storage.open import open_storage
from storage.postgres.migrations import MIGRATIONS as PG_MIGRATIONS
from storage.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from storage.sqlite.migrations import VERSION_TABLE
from tests.support.deadline import reap, within
from tests.support.postgres import GUARDED, TestPostgres
from tests.support.procs import REPO, child_env


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


def _newer_sqlite_file(path: Path) -> int:
    """A file this release made, then 'migrated' one step further by a newer one."""
    newer = SQLITE_MIGRATIONS[-1].version + 1
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?, ?, ?)",
                     (newer, "a_newer_release", time.time()))  # fmt: skip
    return newer


async def test_sqlite_refuses_a_file_a_newer_release_migrated(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_storage(path)
    await storage.conversations.claim("c", "alice")
    await storage.close()
    newer = _newer_sqlite_file(path)
    with pytest.raises(SchemaTooNew) as refused:
        await open_storage(path)
    assert (refused.value.found, refused.value.known) == (newer, SQLITE_MIGRATIONS[-1].version)
    assert f"version {newer}" in str(refused.value) and "newer release" in str(refused.value)
    reopened_same = sqlite3.connect(path).execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
    assert reopened_same == (newer,)  # nothing was written


async def test_postgres_refuses_a_database_a_newer_release_migrated(pg_url: str) -> None:
    storage = await open_storage(pg_url)
    await storage.close()
    newer = PG_MIGRATIONS[-1].version + 1
    with psycopg.connect(pg_url, **GUARDED) as conn:
        conn.execute(
            f"INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (%s, %s, %s)",
            (newer, "a_newer_release", time.time()),
        )
    with pytest.raises(SchemaTooNew) as refused:
        await open_storage(pg_url)
    assert refused.value.found == newer


async def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_storage(path)
    await storage.close()
    newer = _newer_sqlite_file(path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "buckets", cwd=REPO,
        env=child_env({"AGENT_DB_PATH": str(path), "AGENT_EMBEDDER": "hashing"}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await within(proc.communicate(), "agentchat buckets", 120)
    finally:
        await reap(proc, "agentchat buckets", grace=5)
    text = err.decode()
    assert proc.returncode not in (0, None), (proc.returncode, text)
    assert f"schema is at version {newer}" in text and "Traceback" not in text, text
    assert out == b""
