"""One PostgreSQL database, shared by every store: a pool of connections and the same
ordered background writer as the SQLite engine.

Why this shape (the SQLite engine's ``database.py`` is the model; differences only):

* A pool (``psycopg_pool.AsyncConnectionPool``) instead of one writer and a few
  readers: PostgreSQL runs transactions side by side, and ordering between them is
  the database's business (row locks, ``ON CONFLICT``, advisory locks), so there is no
  process-wide write lock. Connections are in autocommit mode; a transaction is always
  an explicit ``async with conn.transaction()``, so nothing idles in a transaction.
* The ordered background writer is kept as is: appends that must not slow the stream
  (run events, checkpoints, the tool-call log) are *items* on a queue that one task
  commits in batches. An item's statements commit together, in order, after every
  item queued before it (in this process); ``on_commit`` says when it is durable,
  ``on_fail`` when it never will be. Consecutive identical inserts go as one multi-row
  ``INSERT`` — never as a pipeline, whose rows leave the server waiting for the client
  mid-transaction with no timeout: a frozen replica's run locks would outlive
  ``idle_in_transaction_timeout_ms`` (``statements.py``).
* The same write-retry semantics: a transient failure (connection lost, server
  restarting, lock timeout, deadlock, serialization failure, disk full) is retried with
  backoff for ``write_retry_s``; after that the waiting callers get
  ``StorageUnavailable``, ``healthy`` turns false (``/readyz``) and ``stats`` counts
  it. A constraint error in a batch re-runs its items one by one so only the bad one
  fails.
* A transaction whose caller is cancelled still runs to its end (commit or rollback)
  before its connection goes back to the pool.
* A read that cannot get a connection (the pool waited ``connect_timeout_s``:
  ``PoolTimeout``) or loses it raises ``StorageUnavailable``, like a write that gave up:
  routes answer 503 with ``Retry-After``, never 500. ``readiness`` answers within
  ``READINESS_TIMEOUT_S`` whatever the database does.
* A borrow never hands out a connection the server already closed while it sat idle
  (a restart or a cut no request saw): its socket is looked at first, without a round
  trip, and such a connection is replaced (``pooled_borrow.py``) — else the first
  requests after a short outage, one per idle connection, were refused.
* A caller with a deadline (a request, ``readiness``) gets a pooled connection before
  callers without one, queued during an outage ahead of it; each of those passes on at
  most two per wait, so a pool kept full by requests still serves the writer
  (``borrow_order.py``).
* While the database is known away (two connection attempts in a row failed as an
  absent server fails, and no idle connection is left), a caller with a deadline — a
  request, ``readiness`` — is refused at once instead of waiting the pool's timeout,
  and a probe reconnects in the background (``reachability.py``).
* A statement on an open connection has no deadline of the server's when the server
  is frozen (SIGSTOP, a stuck disk: TCP stays up). In the task serving a request
  (``storage/request_scope.py``: each wait at most ``AGENT_DB_POOL_TIMEOUT_S``, and
  never past the request's budget) and for ``readiness``, reads and transactions carry
  a client-side deadline: past it the connection is cut and dropped, the caller gets
  ``StorageUnavailable`` (``statement_deadline.py``). The ordered writer, a run's own
  task, migrations and background builds carry none: their statements may run long,
  and acknowledged work keeps its own retry rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from storage import request_scope
from storage.errors import StorageUnavailable
from storage.postgres.borrow_order import BorrowOrder
from storage.postgres.pool_refill import refill_now
from storage.postgres.pooled_borrow import borrow
from storage.postgres.reachability import Reachability
from storage.postgres.statement_deadline import answered_by
from storage.postgres.statements import run_statements
from storage.writer import (
    OrderedWriter,
    QueuedWrites,
    Statement,
    WriteHealth,
    WriteItem,
    finish_even_if_cancelled,
    retrying,
)

log = logging.getLogger("agentchat.storage")

T = TypeVar("T")
Conn = AsyncConnection[tuple[Any, ...]]
#: ``/readyz`` must answer at once during an outage: the probe gets this long.
READINESS_TIMEOUT_S = 0.8


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    min_connections: int = 2
    #: Followers read the log through the pool on every wake-up: with 10 connections and
    #: ~36 live followers a token reached them 1 s late at p99 (15 ms with 40).
    max_connections: int = 30
    #: How long a write keeps retrying a failing database before giving up.
    write_retry_s: float = 10.0
    #: PostgreSQL's own wait for a lock, per attempt (our retry loop wraps it); 0 = no limit.
    lock_timeout_ms: int = 5_000
    #: A statement running longer than this is cancelled (0 = no limit).
    statement_timeout_ms: int = 0
    #: PostgreSQL ends a session whose transaction waits this long for its client (0 =
    #: never). Our transactions send their statements back to back; one left waiting is
    #: a replica frozen (SIGSTOP, a paused VM) or cut off mid-transaction, and its row
    #: locks would hold off every other replica's take-over of its runs for as long as
    #: it stays so — with lock_timeout, each claim fails and is tried again, for ever.
    #: The service sets it to the run lease: by then such a replica has lost its runs.
    idle_in_transaction_timeout_ms: int = 10_000
    #: How long to wait for a pooled connection before the attempt counts as failed.
    connect_timeout_s: float = 10.0
    #: How long the pool keeps retrying one lost connection (its delays double from 1 s)
    #: before it gives that attempt up. psycopg's default is five minutes, and while such
    #: an attempt waits out its delay no request makes the pool try sooner: a 40 s outage
    #: left both replicas answering 503 for 17-19 s after PostgreSQL was back (the next
    #: attempt 32 s after the one before). Given up sooner, the next request that finds no
    #: connection starts a fresh attempt at once, so service returns with the database.
    reconnect_window_s: float = 5.0
    application_name: str = "agentchat"
    #: psycopg prepares a statement on a connection after this many runs of it; ``None``
    #: never prepares (needed behind a transaction-pooling PgBouncer).
    prepare_threshold: int | None = 5


def transient(exc: BaseException) -> bool:
    """Connection loss, lock and statement timeouts, deadlocks, serialization failures,
    a full disk, a pool with no free connection: may pass. Constraint and programming
    errors never will. (In psycopg all of the first kind are ``OperationalError``, but
    for the session PostgreSQL ended because its transaction waited too long for this
    client — a frozen replica thawed: a new connection may go on, and meet its lease.)"""
    return isinstance(exc, psycopg.OperationalError | psycopg.errors.IdleInTransactionSessionTimeout)


def redact(url: str) -> str:
    """The URL without its password, for logs and ``location``."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://?"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    user = str(params.get("user") or "")
    db = params.get("dbname") or ""
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


class PostgresDatabase(QueuedWrites):
    """The pool, and the ordered background writer."""

    engine = "postgres"

    def __init__(
        self, url: str, pool: AsyncConnectionPool[Any], opts: PostgresOptions, reach: Reachability | None = None
    ) -> None:
        self.url = url
        self.location = redact(url)
        self.opts = opts
        self.health = WriteHealth()
        self.pool = pool
        #: Whether the database is known away (the pool's connection attempts): a
        #: request is then refused at once, not after the pool's whole timeout.
        self.reach = reach or Reachability()
        self.reach.bind(self._probe)
        #: Who is handed a pooled connection first: callers with a deadline.
        self.order = BorrowOrder()
        self._queue = OrderedWriter(
            lambda batch: finish_even_if_cancelled(self._commit_items(batch)),
            transient=transient,
            retry_s=opts.write_retry_s,
            health=self.health,
        )
        self._closed = False

    @staticmethod
    def connection_kwargs(opts: PostgresOptions) -> dict[str, Any]:
        settings = [f"-c lock_timeout={int(opts.lock_timeout_ms)}"]
        if opts.statement_timeout_ms:
            settings.append(f"-c statement_timeout={int(opts.statement_timeout_ms)}")
        if opts.idle_in_transaction_timeout_ms:
            settings.append(f"-c idle_in_transaction_session_timeout={int(opts.idle_in_transaction_timeout_ms)}")
        return {
            "autocommit": True,
            "application_name": opts.application_name,
            "options": " ".join(settings),
            "connect_timeout": max(1, int(opts.connect_timeout_s)),
            "prepare_threshold": opts.prepare_threshold,
        }

    @classmethod
    async def open(
        cls,
        url: str,
        opts: PostgresOptions | None = None,
        *,
        configure: Callable[[Conn], Awaitable[None]] | None = None,
    ) -> PostgresDatabase:
        """Open the pool (``configure`` runs on every new connection: type adapters)."""
        opts = opts or PostgresOptions()
        reach = Reachability()
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
            url,
            connection_class=reach.connection_class(),
            min_size=max(1, opts.min_connections),
            max_size=max(opts.min_connections, opts.max_connections, 2),
            kwargs=cls.connection_kwargs(opts),
            configure=configure,
            open=False,
            timeout=opts.connect_timeout_s,
            reconnect_timeout=opts.reconnect_window_s,
            name="agentchat-storage",
        )
        try:
            await pool.open(wait=True, timeout=opts.connect_timeout_s)
        except BaseException:
            await pool.close()
            raise
        return cls(url, pool, opts, reach)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._queue.close()  # commits what is queued; anything left fails loudly
        await self.reach.aclose()
        await self.pool.close()

    # --- reads --------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def reading(self, *, deadline: float | None = None) -> AsyncIterator[Conn]:
        """Borrow a connection for several statements (autocommit: each its own snapshot).
        No connection within the pool's timeout, or one lost mid-read: ``StorageUnavailable``.
        In the task serving a request (``storage/request_scope.py``), or with a
        ``deadline`` (``time.monotonic()``), the wait for a connection and every statement
        on it end there: past it the connection is dropped and ``StorageUnavailable`` raised."""
        ends = self._deadline(deadline)
        if ends is not None:
            await self._refuse_if_known_down(ends)
        try:
            async with (
                borrow(self.pool, self._pool_wait(ends), self.order, urgent=ends is not None) as conn,
                answered_by(conn, ends, self._waited(ends)),
            ):
                yield conn
            self.reach.answered()
        except psycopg.OperationalError as exc:  # PoolTimeout is one; so is a lost connection
            raise StorageUnavailable(f"database unreachable: {type(exc).__name__}: {exc}"[:300]) from exc

    async def fetchall(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, deadline: float | None = None
    ) -> list[tuple[Any, ...]]:
        async with self.reading(deadline=deadline) as conn:
            cur = await conn.execute(sql, params)  # type: ignore[arg-type]
            return list(await cur.fetchall())

    async def fetchone(
        self, sql: str, params: Sequence[Any] | dict[str, Any] = (), *, deadline: float | None = None
    ) -> tuple[Any, ...] | None:
        async with self.reading(deadline=deadline) as conn:
            cur = await conn.execute(sql, params)  # type: ignore[arg-type]
            return await cur.fetchone()

    @staticmethod
    def _deadline(given: float | None) -> float | None:
        """The earlier of ``given`` and the serving request's (``request_scope``)."""
        scoped = request_scope.wait_deadline()
        if scoped is None or given is None:
            return given if scoped is None else scoped
        return min(given, scoped)

    def _waited(self, ends: float | None) -> float:
        """How long, from now, the caller allowed (for the error message)."""
        return round(max(0.0, (ends or 0.0) - time.monotonic()), 3)

    # --- transactions -------------------------------------------------------------

    async def transact(self, fn: Callable[[Conn], Awaitable[T]], *, deadline: float | None = None) -> T:
        """Run ``fn`` inside one transaction and commit; retried as a whole on transient
        failures (so ``fn`` must only touch the database). Raises ``StorageUnavailable``
        after ``write_retry_s``; other errors propagate at once. With a ``deadline``
        (``time.monotonic()``: a request not yet acknowledged, ``app/server/storage_budget.py``)
        the retries, each attempt's wait for a pooled connection and its statements end
        there too (past it the connection is dropped: ``statement_deadline.py``); in the
        task serving a request (``storage/request_scope.py``) so does its own wait."""
        deadline = self._deadline(deadline)
        if deadline is not None:
            await self._refuse_if_known_down(deadline)
        waited = self._waited(deadline)
        return await retrying(
            lambda: finish_even_if_cancelled(
                self._run_transaction(fn, self._pool_wait(deadline), deadline, waited)
            ),
            transient=transient,
            retry_s=self.opts.write_retry_s,
            health=self.health,
            deadline=deadline,
        )

    async def _refuse_if_known_down(self, ends: float) -> None:
        """A caller with a deadline (a request, ``/readyz``) is refused at once while the
        database is known away and no idle connection is left to try: its wait for the
        pool could only end in ``StorageUnavailable`` (``reachability.py``). Callers
        without one (the writer, a run's own steps) keep their retry rules. The pool's
        stats are read only then: this runs before every read a request makes."""
        if not self.reach.down:
            return
        idle = int(self.pool.get_stats().get("pool_available", 0))
        await self.reach.refuse_if_down(idle, ends - time.monotonic())

    async def _probe(self, wait_s: float) -> None:
        """Open one connection of the pool's class (which records how it went) and close
        it, within ``wait_s``: the reachability probe while the database is known away.
        Apart from the pool on purpose: the pool's own attempt may be waiting out a
        backoff delay (up to 4 s) that a borrow would wait behind; once this one
        connects, the pool is told to open its own at once (``pool_refill.py``)."""
        kwargs = {**self.connection_kwargs(self.opts), "connect_timeout": max(2, int(wait_s))}
        async with asyncio.timeout(wait_s):
            conn = await self.pool.connection_class.connect(self.url, **kwargs)
        await conn.close()
        await refill_now(self.pool, self.order.waiting)

    def _pool_wait(self, deadline: float | None) -> float:
        """How long an attempt may wait for a pooled connection: the pool's timeout, or
        what is left of the request's budget when that is shorter."""
        if deadline is None:
            return self.opts.connect_timeout_s
        return max(0.001, min(self.opts.connect_timeout_s, deadline - time.monotonic()))

    async def execute(self, statements: Sequence[Statement]) -> None:
        """Commit ``statements`` now, in one transaction (retried like ``transact``)."""

        async def run(conn: Conn) -> None:
            await run_statements(conn, statements)

        await self.transact(run)

    async def _run_transaction(
        self, fn: Callable[[Conn], Awaitable[T]], pool_wait: float, deadline: float | None = None, waited: float = 0.0
    ) -> T:
        async with (
            borrow(self.pool, pool_wait, self.order, urgent=deadline is not None) as conn,
            answered_by(conn, deadline, waited),
            conn.transaction(),
        ):
            session_ms = self.opts.lock_timeout_ms  # 0: the session waits for locks without limit
            if deadline is not None and (
                (left_ms := int((deadline - time.monotonic()) * 1000)) < session_ms or not session_ms
            ):
                # A request not yet acknowledged waits for a lock (a table held by a
                # migration, a VACUUM FULL) only as long as its budget has left, not the
                # session's lock_timeout: past it, 503 storage_unavailable. Only when the
                # budget is the shorter (a retry, or a budget under 5 s): no statement more
                # on an ordinary admission.
                await conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{max(1, left_ms)}ms",))
            result = await fn(conn)
        self._succeeded()
        return result

    # --- the ordered background writer ----------------------------------------------

    async def _commit_items(self, batch: Sequence[WriteItem]) -> None:
        statements = [s for item in batch for s in item.statements]
        if not statements:
            self._succeeded()
            return
        async with borrow(self.pool, self.opts.connect_timeout_s, self.order, urgent=False) as conn, conn.transaction():
            await run_statements(conn, statements)
        self._succeeded()

    def _succeeded(self) -> None:
        self.health.succeeded()
        self.reach.answered()

    async def readiness(self) -> dict[str, Any]:
        try:
            # The probe's own deadline, enforced on the connection (``answered_by``), not by
            # cancelling the read: cancelled, psycopg asks a frozen server to cancel the query
            # and waits for it — 11 s before ``/readyz`` answered.
            await self.fetchone("SELECT 1", deadline=time.monotonic() + READINESS_TIMEOUT_S)
        except StorageUnavailable as exc:
            if self.reach.down:  # refused at once: requests are too, until the probe connects
                detail = f"database unreachable, requests refused at once: {exc}"
            else:
                detail = f"no answer within {READINESS_TIMEOUT_S} s (database unreachable, frozen or saturated): {exc}"
            return {"ok": False, "engine": "postgres", "detail": detail[:400], **self.reach.readiness()}
        except Exception as exc:
            return {"ok": False, "engine": "postgres", "detail": f"read failed: {exc}"}
        if not self.healthy:
            return {"ok": False, "engine": "postgres", "detail": f"writes are failing: {self.last_error}"}
        pool = self.pool.get_stats()
        return {
            "ok": True,
            "engine": "postgres",
            "queued_writes": self.queued,
            "write_retries": self.stats.retries,
            "write_failures": self.stats.failures,
            "pool_size": pool.get("pool_size", 0),
            "pool_available": pool.get("pool_available", 0),
            "requests_waiting": pool.get("requests_waiting", 0),
            **self.reach.readiness(),
        }


