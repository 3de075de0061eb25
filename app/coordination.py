"""How the processes on one database share the work: who leads (a file lock between
workers on one SQLite file, an advisory lock on PostgreSQL), periodic jobs run only by
the leader, where sibling workers meet, and followers of runs executing elsewhere.

Apart from the wiring because these are the only choices that depend on how many
processes share the database, not on what this process serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from app.config import Settings
from app.ops.leader import FileLock, Leader
from app.runs.presence import FollowerPresence
from app.runs.remote import RemoteRuns
from storage.sqlite.runs import SqliteRunStore
from storage.sqlite.runtime_dir import LEADER_LOCK, runtime_dir
from storage.sqlite.worker_feed import WorkerFeed


def background_job(
    leader: Leader | None, job: Callable[[], Coroutine[Any, Any, Any]], *, name: str
) -> asyncio.Task[Any]:
    """A periodic job: here, or — workers on one file, any process on PostgreSQL — in
    the one process that leads."""
    if leader is None:
        return asyncio.create_task(job(), name=name)
    return leader.when_leading(job, name=name)


async def leader_for(settings: Settings, storage: Any) -> Leader | None:
    """Who runs the background jobs among the processes on this database (``None``: a
    lone process on its SQLite file runs them itself). Workers on one SQLite file also
    get their socket feed here."""
    if storage.engine == "postgres":
        from storage.postgres.leader_lock import AdvisoryLeaderLock

        return Leader(AdvisoryLeaderLock(storage.db.url), elsewhere="another worker or replica")
    if settings.workers > 1 and isinstance(storage.runs, SqliteRunStore):
        feed = WorkerFeed(runtime_dir(settings.db_path))
        await feed.start()
        storage.run_feed = storage.runs.feed = feed  # closed with the storage
        # The knowledge base needs no news from here: each worker reads the stored
        # generation before a search (``knowledge.freshness``), as for any other process.
        return Leader(FileLock(feed.directory / LEADER_LOCK))
    return None


def siblings_dir(settings: Settings, storage: Any) -> Path | None:
    """Where the workers of one ``serve --workers`` meet to merge ``/metrics``: the
    SQLite feed's runtime directory, or on PostgreSQL (no feed) the supervisor's own
    (``AGENT_WORKERS_DIR``, ``app/cli/workers.py``). ``None``: a process on its own."""
    if isinstance(storage.run_feed, WorkerFeed):
        return storage.run_feed.directory
    if storage.engine == "postgres" and settings.workers > 1 and settings.workers_dir is not None:
        return settings.workers_dir
    return None


def remote_runs_for(storage: Any, shared_file: bool, safety_poll_s: float) -> RemoteRuns | None:
    """Followers of runs executing in another process, woken by the engine's feed:
    PostgreSQL's notifications, or the sibling workers' sockets on one SQLite file (whose
    log is also read after ``safety_poll_s`` without news). They are said on the same
    feed (``FollowerPresence``: its ``beat_forever`` is the caller's to run)."""
    if storage.run_feed is None:
        return None
    presence = FollowerPresence(storage.run_feed)
    if shared_file:
        return RemoteRuns(storage.runs, storage.run_feed, poll_s=safety_poll_s, presence=presence)
    return RemoteRuns(storage.runs, storage.run_feed, presence=presence)
