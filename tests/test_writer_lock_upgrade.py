"""A rolling deploy from a release before the live log, which takes no writer lock
(``storage.sqlite.upgrade_guard``, ``app.cli.writer_wait.wait_for_older_release``).

Third review of issue 23: the old release's ``serve`` holds no ``<db>.writer.lock``, so
a new ``serve`` started on its file while it ran found the lock free, migrated the file
28 -> 30 under it and, believing itself alone, claimed every unfinished run - the old
process's live ones included; the two then wrote one run's events to two tables. Here
the old process is a real process holding the file open at schema 28, as the old
release's serve does (WAL mode, a connection open for its whole life): the new serve
waits - ``/readyz`` 503 naming the reason, nothing migrated, nothing claimed - and
migrates and serves once that process is gone.
"""

from __future__ import annotations

import asyncio
import sqlite3
import textwrap
from pathlib import Path

import aiosqlite
import httpx
import pytest

from storage.sqlite.migration_steps import MIGRATIONS
from storage.sqlite.migrations import migrate
from storage.sqlite.upgrade_guard import LIVE_LOG_STEP, older_release_open
from tests.support.procs import PYTHON, AgentServer, ManagedProcess, child_env, until

pytestmark = pytest.mark.slow  # real server processes on one file

#: The old release's process: the file open in WAL mode, read once (which takes SQLite's
#: ``-shm`` lock), kept open until a signal; an alarm is its deadline.
HOLDER = textwrap.dedent(
    """
    import signal, sqlite3, sys
    signal.alarm(300)
    conn = sqlite3.connect(sys.argv[1])
    conn.execute("PRAGMA journal_mode=WAL")
    version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    print(f"holding the file at schema {version}", flush=True)
    signal.pause()
    """
)


async def _old_file(db: Path) -> None:
    """A file as the release before the live log left it: schema 28, WAL mode."""
    async with aiosqlite.connect(db) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        assert await migrate(conn, MIGRATIONS[: LIVE_LOG_STEP - 1]) == LIVE_LOG_STEP - 1


def _version(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0])
    finally:
        conn.close()


async def test_a_new_serve_waits_while_an_old_release_has_the_file_open_then_migrates(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    await _old_file(db)
    env = {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
           "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db)}
    old = ManagedProcess("old", [PYTHON, "-c", HOLDER, str(db)], child_env(env), tmp_path / "old.log")
    new = AgentServer(tmp_path, env, name="new")
    try:
        old.start()
        await until(lambda: bool(old.grep("holding the file")) or not old.running, "the old process holds the file")
        assert old.running, old.tail()
        assert older_release_open(db) == LIVE_LOG_STEP - 1  # this process has no connection open now
        new.start()
        async with httpx.AsyncClient() as http:
            seen: list[tuple[int, object]] = []

            async def waiting() -> bool:
                status, body = await new.readyz(http)
                seen.append((status, body))
                assert status != 200, ("a second writer: it served beside the old process", new.tail())
                return status == 503 and "earlier release" in str(body)

            deadline = asyncio.get_running_loop().time() + 90
            while not await waiting():
                assert new.running, new.tail()
                assert asyncio.get_running_loop().time() < deadline, (seen[-3:], new.tail())
                await asyncio.sleep(0.05)
            assert str(db) in str(seen[-1][1]), seen[-1]
            refused = await http.post(f"{new.base}/v1/agent/runs", json={"message": "hi"}, timeout=5)
            assert refused.status_code == 503 and refused.headers.get("retry-after"), refused.text
            assert len(new.grep("waiting to become the database's writer")) == 1, new.tail()
            # Neither migrated under the old process nor started (no run claimed).
            assert _version(db) == LIVE_LOG_STEP - 1
            assert not new.grep("serving on", "carrying on runs"), new.tail()

            old.close()  # the old release stops: the new one migrates and serves
            await new.wait_ready(timeout=90)
            assert _version(db) == MIGRATIONS[-1].version
            assert new.grep("earlier release's process closed the database"), new.tail()
    finally:
        old.close()
        new.close()


async def test_a_file_at_the_live_log_schema_open_elsewhere_is_not_an_old_release(tmp_path: Path) -> None:
    """A one-off command of a release with the lock (``compact``, ``kb``) may have the file
    open beside a serve: only a file below the live log's first step makes serve wait."""
    db = tmp_path / "agent.sqlite3"
    assert older_release_open(db) is None  # no file yet
    async with aiosqlite.connect(db) as conn:
        await conn.execute("PRAGMA journal_mode=WAL")
        await migrate(conn)
    assert older_release_open(db) is None  # nobody has it open
    holder = ManagedProcess("holder", [PYTHON, "-c", HOLDER, str(db)], child_env({}), tmp_path / "holder.log")
    try:
        holder.start()
        await until(lambda: bool(holder.grep("holding the file")) or not holder.running, "the holder holds the file")
        assert holder.running, holder.tail()
        assert older_release_open(db) is None
    finally:
        holder.close()
