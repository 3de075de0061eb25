"""A database migrated by a newer release is refused, on both engines and by the CLI:
this release has no down-migrations, and running on tables it does not know would hide
the newer layout's rows and write beside them (the review of the live-log branch found an
older release reading a migrated file as empty and restarting a run's events at 1)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiosqlite
import psycopg
import pytest

from storage.errors import SchemaTooNew
from storage.open import open_storage
from storage.postgres.migrations import MIGRATIONS as PG_MIGRATIONS
from storage.sqlite.migrations import MIGRATIONS as SQLITE_MIGRATIONS
from storage.sqlite.migrations import VERSION_TABLE, migrate
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
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
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
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone() == (newer,)  # nothing written


async def test_sqlite_sees_a_newer_release_that_commits_while_it_waits_for_the_write_lock(tmp_path: Path) -> None:
    """The version is read under the write lock the steps take: a newer release that holds
    the lock (migrating the file) when this one starts, and records its version while this
    one waits, is refused - a read before the lock saw the old version and went on."""
    path = tmp_path / "agent.db"
    storage = await open_storage(path)
    await storage.close()
    newer = SQLITE_MIGRATIONS[-1].version + 1
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    ours = await aiosqlite.connect(path)
    try:
        await ours.execute("PRAGMA busy_timeout = 60000")
        waiting = threading.Event()

        def traced(sql: str) -> None:
            if sql.strip().upper().startswith("BEGIN IMMEDIATE"):
                waiting.set()  # called as the statement starts: before it has the lock

        await ours.set_trace_callback(traced)
        other.execute("BEGIN IMMEDIATE")  # the newer release is migrating the file
        migrating = asyncio.create_task(migrate(ours))
        try:
            assert await within(asyncio.to_thread(waiting.wait, 60), "our first step asking for the write lock")
            other.execute(f"INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (?, ?, ?)",
                          (newer, "a_newer_release", time.time()))  # fmt: skip
            other.execute("COMMIT")
            with pytest.raises(SchemaTooNew) as refused:
                await within(migrating, "the migration on the file the newer release migrated")
        finally:
            if not migrating.done():
                migrating.cancel()
                with contextlib.suppress(BaseException):
                    await migrating
        assert refused.value.found == newer
    finally:
        await ours.close()
        other.close()


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


async def agentchat(*argv: str, env: dict[str, str]) -> tuple[int | None, bytes, str]:
    """``agentchat ARGV`` as a subprocess: its exit code, stdout and stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *argv, cwd=REPO, env=child_env(env),  # the default configuration
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await within(proc.communicate(), f"agentchat {argv[0]}", 120)
    finally:
        await reap(proc, f"agentchat {argv[0]}", grace=5)
    return proc.returncode, out, err.decode()


async def test_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_storage(path)
    await storage.close()
    newer = _newer_sqlite_file(path)
    code, out, text = await agentchat("buckets", env={"AGENT_DB_PATH": str(path)})
    assert code not in (0, None), (code, text)
    assert f"schema is at version {newer}" in text and "Traceback" not in text, text
    assert out == b""


async def test_migrate_db_refuses_either_side_when_a_newer_release_migrated_it(
    tmp_path: Path, pg_server: TestPostgres
) -> None:
    """One line and exit 2 from ``agentchat migrate-db``, the target untouched when the
    source is the newer one (it used to print a traceback, after migrating the target)."""
    with pg_server.database(empty=True) as pg_url:
        await _migrate_db_both_ways(tmp_path, pg_url)


async def _migrate_db_both_ways(tmp_path: Path, pg_url: str) -> None:
    source = tmp_path / "agent.db"
    storage = await open_storage(source)
    await storage.close()
    newer = _newer_sqlite_file(source)

    migrate_db = ("migrate-db", "--from", str(source), "--to", pg_url)
    code, _, text = await agentchat(*migrate_db, env={})
    assert code == 2 and "Traceback" not in text, (code, text)
    assert f"the SQLite file {source.resolve()}: the database's schema is at version {newer}" in text, text
    with psycopg.connect(pg_url, **GUARDED) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert tables == (0,)  # the target was not migrated

    with contextlib.closing(sqlite3.connect(source)) as conn, conn:  # this release's file again
        conn.execute(f"DELETE FROM {VERSION_TABLE} WHERE version = ?", (newer,))  # the target the newer one
    target = await open_storage(pg_url)
    await target.close()
    with psycopg.connect(pg_url, **GUARDED) as conn:
        conn.execute(f"INSERT INTO {VERSION_TABLE}(version, name, applied_at) VALUES (%s, %s, %s)",
                     (newer, "a_newer_release", time.time()))  # fmt: skip
    code, _, text = await agentchat(*migrate_db, env={})
    assert code == 2 and "Traceback" not in text, (code, text)
    assert "PostgreSQL (" in text and f"schema is at version {newer}" in text, text
