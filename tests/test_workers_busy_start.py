"""``serve --workers 2`` started while another process writes the SQLite file: both
workers serve once it is free (``storage.sqlite.engine._when_free``).

A worker's start-up checks every migration step under the file's write lock, and gave up
after SQLite's ``busy_timeout`` (1 s): "database is locked", exit 3 - and a worker that
cannot start stops the whole group. On a loaded machine the holder was a sibling worker
migrating a new file (30 statements in one step, each an event-loop hop); a one-off
command's bulk write beside a starting serve does the same. Here another process holds
the lock until a worker has said that it waits, as the CI's ``--workers`` groups that
stopped at load ~9 would have needed.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from storage.sqlite.engine import open_sqlite_storage
from tests.support.group_ready import until_ready
from tests.support.procs import OFFLINE_SERVE_ENV, PYTHON, ManagedProcess, child_env, until
from tests.support.server import free_port
from tests.support.sqlite_lock import sqlite_file_locked

pytestmark = pytest.mark.slow  # real server processes

WAITS = "the database is busy"
SERVING = "serving on"


async def test_a_workers_group_started_on_a_file_being_written_serves_once_it_is_free(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite3"
    # Migrated by this release: the supervisor does not wait as for an earlier one's
    # process (``storage.sqlite.upgrade_guard``) while the holder has the file open.
    storage = await open_sqlite_storage(db)
    await storage.close()
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend",
            "--workers", "2"]
    env = child_env({**OFFLINE_SERVE_ENV, "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db)})
    group = ManagedProcess("group", argv, env, tmp_path / "group.log")
    try:
        async with sqlite_file_locked(db):
            group.start()
            await until(lambda: bool(group.grep(WAITS)) or not group.running, "a worker waiting for the file", 120)
            assert group.running, group.tail()
        await until(lambda: len(group.grep(SERVING)) >= 2 or not group.running, "both workers serving", 120)
        assert group.running and len(group.grep(SERVING)) >= 2, group.tail()
        assert not group.grep("could not start", "did not start", "stopped unasked"), group.tail()
        async with httpx.AsyncClient() as http:
            await until_ready(http, port, group)  # waited for, not probed once: a loaded machine may answer late
    finally:
        group.close()
