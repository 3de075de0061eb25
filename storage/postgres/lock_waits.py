"""Schema migrations never wait forever on a lock.

A step that builds an index or alters a table needs a lock that a long transaction of
another session (a replica's, an operator's ``psql``) may hold; without a
``lock_timeout`` the migration waits for as long as that transaction lives, and every
writer of the table queues behind the waiting migration (PostgreSQL grants locks in
order). So the runner waits a few seconds per attempt, rolls the step back and tries
it again a bounded number of times (the lock-retries of mature tools: GitLab's
``with_lock_retries``, online_migrations' ``ConstantLockRetrier``), saying each time
which lock it waited for and who holds it; after the last attempt start-up fails with
``MigrationLockTimeout`` naming them.

PostgreSQL's own error ("canceling statement due to lock timeout") names no lock, so
while a statement has waited half its ``lock_timeout`` a probe on a connection of its
own reads what the migration's session waits for (``pg_locks``) and who blocks it
(``pg_blocking_pids``). The wait can only be read while it lasts, so the probe's
connection (``LockProbe``) is opened before the first statement of a pending step and
kept for the whole migration: opened only once the wait was half over, a connection
slow to open (a loaded server forks and initialises a backend for it, a remote one
adds TLS and authentication round trips) came after the ``lock_timeout`` and found
nothing to read - the report then named no lock, exactly when one was held. A database
with nothing to migrate never opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import psycopg

from storage.errors import StorageUnavailable

#: The wait per attempt when the pool's own ``lock_timeout`` is off (0).
DEFAULT_LOCK_TIMEOUT_MS = 5_000

_WAITING_FOR = """
SELECT l.mode,
       CASE WHEN l.relation IS NOT NULL THEN l.relation::regclass::text ELSE l.locktype END,
       (SELECT string_agg(format('pid %%s (%%s, %%s)', a.pid, COALESCE(NULLIF(a.application_name, ''), 'no name'),
                                 COALESCE(a.state, 'state hidden')), ', ')
          FROM pg_stat_activity a WHERE a.pid = ANY(pg_blocking_pids(l.pid)))
  FROM pg_locks l WHERE l.pid = %s AND NOT l.granted LIMIT 1
"""


class MigrationLockTimeout(StorageUnavailable):
    """A schema migration step could not take a lock it needs within ``lock_timeout``,
    attempt after attempt: another session holds it. Nothing of the step was applied."""


@dataclass(frozen=True, slots=True)
class LockRetries:
    """How long a migration statement waits for a lock, and how often its step is tried."""

    lock_timeout_ms: int = DEFAULT_LOCK_TIMEOUT_MS
    attempts: int = 4
    delay_s: float = 2.0


@dataclass(slots=True)
class LockWait:
    """What one statement of a migration step waited for when its ``lock_timeout`` hit."""

    step: str
    statement: str
    lock: str | None = None

    def describe(self, waited_ms: int) -> str:
        what = self.lock or "a lock (it was not seen in pg_locks)"
        return f"migration step {self.step} waited {waited_ms} ms for {what}: {self.statement[:160]}"


class LockProbe:
    """A connection of its own that reads what the migration's session (``pid``) waits
    for; opened by ``ready`` before a statement that may wait, then kept (module
    docstring). A probe that could not connect says so when a wait is reported, in
    place of the lock; it never fails the migration by itself."""

    def __init__(self, url: str, pid: int, connect_timeout: int) -> None:
        self._url, self._pid, self._connect_timeout = url, pid, connect_timeout
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._error: Exception | None = None

    async def ready(self) -> None:
        """Open the connection if it is not open (again: psycopg closes one whose read
        was cancelled and could not be stopped); once an attempt failed, not again -
        every statement of the migration would wait ``connect_timeout`` for it."""
        if self._error is not None or (self._conn is not None and not self._conn.closed):
            return
        try:
            self._conn = await psycopg.AsyncConnection.connect(
                self._url,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                application_name="agentchat-migrate-probe",
            )
        except (psycopg.Error, OSError) as exc:
            self._error = exc

    async def waiting_for(self, after_s: float, every_s: float) -> str | None:
        """What the session waits for, read once it has waited ``after_s`` (then every
        ``every_s`` until a wait is seen or this is cancelled): "<mode> on <relation>
        held by pid N (application, state)"."""
        await asyncio.sleep(after_s)
        if self._error is not None:
            raise self._error
        probe = self._conn
        if probe is None or probe.closed:
            raise psycopg.OperationalError("the probe's connection was not open")
        while True:
            cur = await probe.execute(_WAITING_FOR, (self._pid,))
            row = await cur.fetchone()
            if row is not None:
                mode, target, holders = row
                return f"{mode} on {target} held by {holders or 'another session'}"
            await asyncio.sleep(every_s)

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()


async def probed(task: asyncio.Task[str | None], grace_s: float) -> str | None:
    """The probe's answer if it has one (waiting ``grace_s`` for a read under way);
    the probe is cancelled otherwise. A probe that failed says so in place of the lock:
    never a second error hiding the first."""
    if not task.done():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), grace_s)
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        return None
    if task.cancelled():
        return None
    failed = task.exception()
    if failed is not None:
        return f"a lock (reading pg_locks failed: {type(failed).__name__}: {str(failed)[:120]})"
    return task.result()
