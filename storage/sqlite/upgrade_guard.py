"""Whether a process of an earlier release - one that takes no writer lock - has the file open.

Why: ``storage.sqlite.writer_lock`` keeps one writer group per file, but only among
releases that take the lock. A release before the live log (schema below its first step,
``LIVE_LOG_STEP``) takes none, so in a rolling deploy from it the new ``serve`` finds the
lock free while the old one still serves: it would apply the live log's migrations under
the running process and, believing itself alone, claim every unfinished run - the old
process's live ones included - and the two would write one run's events to two tables.
A file already at the live log's schema was migrated by a release that takes the lock,
and any process having it open then is one of those (a one-off command, which the lock
leaves alone); only a file below it, open in another process, is the old writer.

Why the ``-shm`` lock byte (``storage.migrate_copy.source_guard.sqlite_in_use``, as
``migrate-db`` uses): every release opens the file in WAL mode, and every open
connection holds it; nothing the old release has to cooperate with.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from storage.migrate_copy.source_guard import sqlite_in_use
from storage.migration_runner import VERSION_TABLE


def live_log_step() -> int:
    """The live log's first step: a file below it was last written by a release without
    the writer lock. The steps are imported here, when a file is found open: they import
    every record type (numpy among them), which a ``serve --workers`` supervisor - it
    calls ``older_release_open`` and serves nothing - would otherwise load at every start."""
    from storage.sqlite.migration_steps import MIGRATIONS
    from storage.sqlite.migration_steps.live_log import LIVE_LOG

    return next(step.version for step in MIGRATIONS if step.statements == LIVE_LOG)


def __getattr__(name: str) -> Any:
    """``LIVE_LOG_STEP``, the constant it was, computed at its first use (PEP 562)."""
    if name == "LIVE_LOG_STEP":
        return live_log_step()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def schema_version(db_path: Path) -> int:
    """The file's newest applied step, 0 for a file without the version table (or none at all).
    Opens and closes its own read-only connection: call it with no other connection open
    in this process, as ``sqlite_in_use`` needs."""
    if not db_path.exists():
        return 0
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
    try:
        with contextlib.suppress(sqlite3.OperationalError):  # no version table: a file nothing migrated
            row = conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()
            return int(row[0]) if row else 0
        return 0
    finally:
        conn.close()


def older_release_open(db_path: str | Path) -> int | None:
    """The file's schema version when a process of a release before the live log has it
    open (module docstring), else None. Blocking (a file lock probe and a short read):
    run it off the event loop. No connection to the file may be open in this process."""
    path = Path(db_path)
    if not sqlite_in_use(path):
        return None
    version = schema_version(path)
    # The read above closed its connection: the probe again, as its docstring requires
    # it, so that the answer is about the other process and not about this one's read.
    if version >= live_log_step() or not sqlite_in_use(path):
        return None
    return version


__all__ = ["live_log_step", "older_release_open", "schema_version"]  # and LIVE_LOG_STEP (__getattr__)
