"""Who runs the background jobs on one PostgreSQL database: the holder of a session-level
advisory lock (``pg_try_advisory_lock``) on a connection of its own.

Every worker of ``agentchat serve --workers`` and every replica on other machines opens
the same database, so the lock elects one leader per *database* — across workers and
replicas alike — not one per machine; the retention pass, keyword pruning and the
start-up back-fills then run once for the whole service (``app/ops/leader.py`` is the
policy: it campaigns, runs the jobs while it leads and stops them when it no longer does).

Why a session lock on a dedicated connection, not one of the pool's: a session lock
belongs to the server session that took it and lives exactly as long as that session.
A pooled connection is handed to other work and may be closed or replaced by the pool
at any time, which would release the lock (or keep it held by a connection nobody
watches). Here the connection is never lent out, and its end is the lock's end:

* the process dies (SIGKILL included) → the server sees the socket close and ends the
  session → the lock is free; another worker or replica takes it at its next try;
* the connection drops (network, server restart, ``pg_terminate_backend``) → the same
  on the server's side; on ours the next ``still_held`` check fails and the policy
  stops this process's jobs before another can have started for long (both sides look
  every ``retry_s``; the window where two may run is at most about one ``retry_s`` plus
  ``timeout_s``, so the jobs must stay safe to run twice — the retention pass also takes
  its own transaction lock per batch).

A connection that dies without a word (a network partition, a host that vanished) is the
one case where the server would not notice by itself: an idle session waits on its socket
until TCP gives up (two hours by default), holding the lock, so nobody else could lead. The
session therefore asks the server for TCP keepalives of its own (``SERVER_KEEPALIVES``:
idle 10 s, then every 5 s, 3 misses — about 25 s), and the client side uses libpq's
keepalives with the same figures.

Not behind a transaction-pooling PgBouncer: there a "session" is not a server session,
and the lock would be taken and lost at random. Point ``AGENT_DATABASE_URL`` at the
server or at a session-pooling bouncer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import psycopg

log = logging.getLogger("agentchat.storage")

#: The advisory lock's key: "AGLEADER" as a big-endian int64 (fits: the first byte < 0x80).
LEADER_LOCK = int.from_bytes(b"AGLEADER", "big")
#: The server ends a session whose peer stopped answering after about 10 + 3 × 5 s.
SERVER_KEEPALIVES = "-c tcp_keepalives_idle=10 -c tcp_keepalives_interval=5 -c tcp_keepalives_count=3"


class AdvisoryLeaderLock:
    """A ``LeaderLock`` (``app/ops/leader.py``) held as ``pg_try_advisory_lock(key)`` on a
    connection opened for it alone; see the module docstring."""

    kind = "postgres advisory lock"

    def __init__(
        self,
        url: str,
        *,
        key: int = LEADER_LOCK,
        timeout_s: float = 5.0,
        application_name: str = "agentchat-leader",
    ) -> None:
        self.url = url
        self.key = key
        self.timeout_s = timeout_s
        self.application_name = application_name
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._held = False
        #: Why the last attempt or check failed (``None``: it did not); for ``/readyz``.
        self.last_error: str | None = None

    @property
    def backend_pid(self) -> int | None:
        """The server process of the lock's session (tests end it to cut the connection)."""
        return self._conn.info.backend_pid if self._conn is not None and not self._conn.closed else None

    async def try_acquire(self) -> bool:
        """Take the lock if no session holds it; never waits for it. A failure to reach
        the server is a ``False`` (and ``last_error``), tried again on the next call."""
        if self._held:
            return True
        try:
            conn = await self._connection()
            row = await asyncio.wait_for(
                self._fetch(conn, "SELECT pg_try_advisory_lock(%s)", (self.key,)), self.timeout_s
            )
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._drop(exc)
            return False
        self.last_error = None
        self._held = bool(row and row[0])
        return self._held

    async def still_held(self) -> bool:
        """Whether the lock's session is still there: a round trip on its connection
        within ``timeout_s``. Once it fails the session is given up (closed) so the
        server releases the lock even if only our side of the connection broke."""
        if not self._held or self._conn is None:
            return False
        try:
            await asyncio.wait_for(self._fetch(self._conn, "SELECT 1", ()), self.timeout_s)
        except (psycopg.Error, OSError, TimeoutError) as exc:
            log.warning("lost the background jobs' leader lock", extra={"error": str(exc)[:300]})
            await self._drop(exc)
            return False
        return True

    async def release(self) -> None:
        """Close the connection: its session ends and the lock with it."""
        await self._drop(None)

    async def _connection(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        conn: psycopg.AsyncConnection[Any] = await asyncio.wait_for(
            psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, int(self.timeout_s)),
                application_name=self.application_name,
                options=SERVER_KEEPALIVES,
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            ),
            self.timeout_s,
        )
        self._conn = conn
        return conn

    @staticmethod
    async def _fetch(conn: psycopg.AsyncConnection[Any], sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        cur = await conn.execute(sql, params)  # type: ignore[arg-type]
        return await cur.fetchone()

    async def _drop(self, exc: BaseException | None) -> None:
        self._held = False
        if exc is not None:
            self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()


__all__ = ["LEADER_LOCK", "SERVER_KEEPALIVES", "AdvisoryLeaderLock"]
