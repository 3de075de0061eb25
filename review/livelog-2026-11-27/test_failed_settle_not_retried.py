"""Review check: a settle that fails (not a duplicate: the disk, a busy file past the
writer's retry) resets the settler's count before it commits, so a quiet process never
tries again - 'the next settle retries' needs new events; ended runs stay in the log and
/readyz keeps the last error. One failure is injected into the settle's commit (the
file's own failure modes need a non-root user or a full disk)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from storage.sqlite import SqliteOptions, open_sqlite_storage
from tests.storage.test_live_log import new_run, step, until_true, where


async def test_a_failed_settle_is_retried_by_the_timer(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    storage = await open_sqlite_storage(path, SqliteOptions(settle_every_s=0.05))
    try:
        runs = storage.runs
        real = runs.settler.sql.commit
        calls = {"n": 0}

        async def once_failing(statements, **kw):  # type: ignore[no-untyped-def]
            calls["n"] += 1
            if calls["n"] == 1 and statements:
                raise sqlite3.OperationalError("disk I/O error")
            return await real(statements, **kw)

        await runs.create(new_run("r1"))
        await runs.commit(step("r1", range(1, 4), end=True))
        runs.settler.sql.commit = once_failing  # type: ignore[method-assign]
        await until_true(lambda: runs.settler.stats.failures == 1, "the first settle failing")
        try:
            await until_true(lambda: where(path, "r1") == (4, 0), "a later settle", timeout=5)
            retried = True
        except AssertionError:
            retried = False
        print("settled by a later tick:", retried, "stats:", runs.settler.stats, "calls:", calls)
        assert retried
    finally:
        await storage.close()
    print("after close:", where(path, "r1"))
