"""Hand a pooled connection to a caller with a deadline before callers without one.

Why: psycopg's pool serves its waiters in the order they queued. During an outage the
callers without a deadline — the ordered writer, runs' own steps, background jobs, each
retrying its wait for the write retry (``AGENT_DB_WRITE_RETRY_S``, 10 s) — queue on the
pool, and when the database is back the connections it opens (a few at a time:
``pool_refill.py``) went to them first. A request, which has one storage budget
(``AGENT_DB_POOL_TIMEOUT_S``) and queued after them, waited behind them: under the
suite's load the first step of a new run waited ~420 ms of its 1 s behind nine such
callers, and once the whole budget — 503 ``storage_unavailable`` though the database
answered (the suite's test_the_first_run_after_the_probe_finds_the_database_back_is_served,
and 1 of 12 A/B runs here at load ~11). Those callers can wait (their retry outlasts
it); the request cannot.

So a caller with a deadline that must wait while callers without one are queued waits
here, not in the pool's queue: the next of those callers handed a connection by the
pool passes it on to the first such waiter and queues again (within its own wait); and
when none of them is left queued, the waiters here draw from the pool themselves (no
one is ahead of them there). With no caller without a deadline queued, everyone draws
from the pool directly, in the pool's order, at no cost. Only the order changes: a
caller without a deadline is served as soon as none with one is waiting, so a stream of
requests that keeps the pool busy delays the writer no longer than they hold their
connections - and a caller without a deadline passes on at most ``MAX_PASSES``
connections per wait, then keeps the next: with requests always waiting (a pool kept full
under load) it would otherwise never be served, and the ordered writer, whose every
event a client waits for, would give up after its write retry (runs let go as in an
outage) while the requests went on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

#: How many connections one wait of a caller without a deadline passes on to callers with
#: one before it keeps the next: enough for the requests queued behind it when the
#: database comes back, never a wait without end.
MAX_PASSES = 2


class BorrowOrder:
    """Callers without a deadline queued on the pool, and callers with one waiting for a
    connection passed on by them (one per database)."""

    def __init__(self) -> None:
        #: Callers without a deadline inside ``pool.getconn`` now.
        self._patient = 0
        #: Callers with a deadline inside ``pool.getconn`` now (none without one ahead).
        self._drawing = 0
        #: Callers with a deadline waiting for a connection passed on: each future gets a
        #: connection, or ``None`` (draw from the pool yourself: nobody is queued ahead).
        self._urgent: deque[asyncio.Future[AsyncConnection[Any] | None]] = deque()

    @property
    def waiting_urgent(self) -> int:
        """Callers with a deadline waiting for a connection passed on now."""
        return sum(1 for found in self._urgent if not found.done())

    @property
    def waiting(self) -> int:
        """Callers waiting for a connection now, in the pool's queue or here. Not the
        pool's ``requests_waiting``: that counts every wait that timed out, too, until the
        pool next hands a connection out — 22 for six callers after a 2.5 s cut."""
        return self._patient + self._drawing + self.waiting_urgent

    async def getconn(self, pool: AsyncConnectionPool[Any], timeout: float, *, urgent: bool) -> AsyncConnection[Any]:
        """A connection from ``pool`` within ``timeout`` (``PoolTimeout`` past it), a caller
        with a deadline (``urgent``) before every caller without one."""
        if not urgent:
            return await self._patient_getconn(pool, timeout)
        ends = time.monotonic() + timeout
        while self._patient:
            conn = await self._passed_on(pool, timeout, ends)
            if conn is not None:
                return conn
        self._drawing += 1
        try:
            return await pool.getconn(timeout=max(0.001, ends - time.monotonic()))
        finally:
            self._drawing -= 1

    async def _patient_getconn(self, pool: AsyncConnectionPool[Any], timeout: float) -> AsyncConnection[Any]:
        ends = time.monotonic() + timeout
        self._patient += 1
        passed = 0
        try:
            while True:
                conn = await pool.getconn(timeout=max(0.001, ends - time.monotonic()))
                if passed >= MAX_PASSES or not self._pass_on(conn):
                    return conn
                passed += 1
        finally:
            self._left()

    def _pass_on(self, conn: AsyncConnection[Any]) -> bool:
        """Give ``conn`` to the first caller with a deadline still waiting, if any."""
        while self._urgent:
            found = self._urgent.popleft()
            if not found.done():
                found.set_result(conn)
                return True
        return False

    def _left(self) -> None:
        """A caller without a deadline left the pool's queue: when it was the last one,
        the callers with a deadline waiting here draw from the pool themselves."""
        self._patient -= 1
        if self._patient:
            return
        while self._urgent:
            found = self._urgent.popleft()
            if not found.done():
                found.set_result(None)

    async def _passed_on(
        self, pool: AsyncConnectionPool[Any], timeout: float, ends: float
    ) -> AsyncConnection[Any] | None:
        """Wait, until ``ends``, for a connection passed on (``None``: draw yourself).
        ``shield``: a cancel or the deadline leaves ``found`` to the ``finally``, which
        gives back a connection passed on just as this caller gave up."""
        found: asyncio.Future[AsyncConnection[Any] | None] = asyncio.get_running_loop().create_future()
        self._urgent.append(found)
        taken = False
        try:
            async with asyncio.timeout(max(0.0, ends - time.monotonic())):
                conn = await asyncio.shield(found)
            taken = True
            return conn
        except TimeoutError:
            raise PoolTimeout(f"couldn't get a connection after {timeout:.2f} sec") from None
        finally:
            if not found.done():
                found.cancel()  # _pass_on and _left skip it
                with contextlib.suppress(ValueError):
                    self._urgent.remove(found)
            elif not taken and (given := found.result()) is not None:
                await pool.putconn(given)


__all__ = ["MAX_PASSES", "BorrowOrder"]
