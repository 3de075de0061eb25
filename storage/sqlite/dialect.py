"""SQLite's dialect and executor: portable SQL is SQLite's own (``?``), writes run on
the one writer connection (``database.py``), reads on a reader."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import aiosqlite
import numpy as np

from storage.dialect import Dialect
from storage.errors import StorageUnavailable
from storage.sql import Plan, Row, SqlEngine, Tx, advance
from storage.sqlite.database import SqliteDatabase

T = TypeVar("T")
#: A plan asked for, its caller's future and its storage deadline (``None``: the write retry).
PendingPlan = tuple[Callable[[Dialect], Plan[Any]], asyncio.Future[Any], float | None]

SQLITE = Dialect(
    name="sqlite",
    paramstyle="qmark",
    now="((julianday('now') - 2440587.5) * 86400.0)",
    for_update="",
    text_lock_sql=None,  # one writer: write transactions already run one at a time
    number_lock_sql=None,
    text_rejects_nul=False,
    encode_vector=lambda vec: vec.tobytes(),
    decode_vector=lambda raw: np.frombuffer(raw, dtype=np.float32),
    same_as="IS",
    differs_from="IS NOT",
    byte_order="",
    live_log=True,
)


class SqliteTx:
    """A write transaction on the writer connection."""

    dialect = SQLITE

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        async with self._conn.execute(sql, params) as cur:
            return int(cur.rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._conn.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        async with self._conn.execute(sql, params) as cur:
            row = await cur.fetchone()
        return tuple(row) if row is not None else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(r) for r in await self._conn.execute_fetchall(sql, params)]


class SqliteSql(SqlEngine):
    """``storage.sql.SqlEngine`` on one SQLite file.

    Plans (``transact_plan``: admitting a run, cancels, leases) are group-committed:
    those asked for while the writer is busy with the previous group run together in
    ONE transaction, one after another in the order they were asked, each inside a
    savepoint of its own — so a plan that refuses (``TooManyRuns``, ``ConversationBusy``,
    ``IdempotencyKeyUsed``) undoes only its own statements, and each plan still sees
    every write of the plans before it (the run cap is counted in the storing
    transaction). A burst of 500 admissions is a few transactions, not 500 (issue 23).
    A caller hears its plan's result only once the group has committed."""

    dialect = SQLITE

    def __init__(self, db: SqliteDatabase) -> None:
        super().__init__(db)
        self.db: SqliteDatabase = db
        self._plans: list[PendingPlan] = []
        #: The futures of the plans whose group's transaction is under way.
        self._in_flight: set[asyncio.Future[Any]] = set()
        self._grouping: asyncio.Task[None] | None = None
        #: Groups committed and plans in them (``bench``, tests).
        self.plan_groups = 0
        self.plans_grouped = 0

    async def transact(self, fn: Callable[[Tx], Awaitable[T]], *, deadline: float | None = None) -> T:
        return await self.db.transact(lambda conn: fn(SqliteTx(conn)), deadline=deadline)

    async def transact_whole(
        self, fn: Callable[[Tx], Coroutine[Any, Any, T]], *, deadline: float | None = None
    ) -> T:
        """``fn`` run whole on the writer's own thread (``run_whole_sync``), in one hop:
        a knowledge-base write is ~30 statements, and each of them, awaited on the event
        loop, was a wait for a loop busy preparing the next batch (issue 24). A bulk
        write: it queues for the writer behind no other one (``transact_sync``), and an
        ingest keeps each one to ``KBIndex.chunks_per_write`` chunks - no run event commits
        while it runs."""
        return await self.db.transact_sync(functools.partial(run_whole_sync, fn=fn), deadline=deadline, bulk=True)

    async def transact_plan(self, make: Callable[[Dialect], Plan[T]], *, deadline: float | None = None) -> T:
        """The plan in the next group's transaction, run whole in one hop on the writer's
        thread (``transact_sync``): hot paths such as admitting a run stay short when the
        event loop is busy. A caller cancelled before its group starts stores nothing.

        Plans with a ``deadline`` (requests not yet acknowledged: the app's budget,
        ``app/server/storage_budget.py``) are grouped apart from those without (leases,
        cancels: they ride out a busy file for the write retry). Their group retries
        until the earliest of its deadlines; then that plan's caller hears
        ``StorageUnavailable`` and the others go to the next group with what is left of
        theirs. Each attempt leaves out a plan whose deadline has passed, so none is
        stored after its caller was told it was not."""
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._plans.append((make, fut, deadline))
        running = self._grouping
        if running is None or running.done() or running.get_loop() is not fut.get_loop():
            self._grouping = asyncio.create_task(self._run_groups(), name="sqlite-plan-groups")
        if deadline is None:
            return await fut
        try:  # the writer may be busy with a group that rides out the write retry
            return await asyncio.wait_for(asyncio.shield(fut), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            if fut.done() and not fut.cancelled():  # its group ended as the budget did
                return fut.result()
            if fut in self._in_flight:  # its group's transaction is under way: it may yet commit
                return await fut
            fut.cancel()  # not started: it never will be
            raise StorageUnavailable("the request's storage budget is spent waiting for the writer") from None
        except asyncio.CancelledError:
            if fut not in self._in_flight:
                fut.cancel()
            raise

    async def _run_groups(self) -> None:
        while self._plans:
            pending = [(make, fut, deadline) for make, fut, deadline in self._plans if not fut.done()]
            self._plans = []
            parts = [[p for p in pending if p[2] is not None], [p for p in pending if p[2] is None]]
            try:
                for part in parts:
                    if part:
                        await self._run_group(part)
            except BaseException:  # this task cancelled (the loop shutting down): so are its callers
                for fut in [*(f for part in parts for _, f, _ in part), *(f for _, f, _ in self._plans)]:
                    fut.cancel()
                self._plans = []
                raise

    async def _run_group(self, part: list[PendingPlan]) -> None:
        """One group's transaction (see ``transact_plan``); its callers hear their outcomes."""
        deadlines = [d for _, _, d in part if d is not None]
        group_deadline = min(deadlines) if len(deadlines) == len(part) else None
        makes = [make if d is None else functools.partial(_unless_expired, make, d) for make, _, d in part]
        futs = [fut for _, fut, _ in part]
        self._in_flight.update(futs)
        try:
            outcomes = await self.db.transact_sync(
                functools.partial(run_plans_sync, makes=makes), deadline=group_deadline
            )
        except Exception as exc:  # the group's transaction failed: every plan in it did
            busy = group_deadline is not None and isinstance(exc.__cause__, sqlite3.OperationalError)
            now = time.monotonic()
            for make, fut, d in part:
                if fut.done():
                    continue
                if busy and d is not None and d > now:  # the file stayed busy past an earlier budget, not this one's
                    self._plans.append((make, fut, d))
                else:
                    fut.set_exception(exc)
            return
        finally:
            self._in_flight.difference_update(futs)
        self.plan_groups += 1
        self.plans_grouped += len(part)
        for (_, fut, _), (ok, value) in zip(part, outcomes, strict=True):
            if fut.done():
                continue
            if ok:
                fut.set_result(value)
            else:
                fut.set_exception(value)


def _unless_expired(make: Callable[[Dialect], Plan[T]], deadline: float, dialect: Dialect) -> Plan[T]:
    """``make``, unless the caller's storage budget is spent (checked by each attempt of
    its group, on the writer's thread): then the plan is left out of this transaction."""
    if time.monotonic() >= deadline:
        raise StorageUnavailable("the request's storage budget is spent")
    return make(dialect)


class ThreadTx:
    """A ``Tx`` on a plain connection, used on that connection's own thread: every
    method runs its statement at once, so awaiting one never suspends (``run_whole_sync``)."""

    dialect = SQLITE

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self._conn.execute(sql, params).rowcount)

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._conn.executemany(sql, rows)

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        row = self._conn.execute(sql, params).fetchone()
        return tuple(row) if row is not None else None

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return [tuple(r) for r in self._conn.execute(sql, params).fetchall()]


def run_whole_sync(conn: sqlite3.Connection, fn: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
    """``fn``'s coroutine driven to its end on the writer's thread (inside
    ``transact_sync``'s transaction) over a ``ThreadTx``. It may await only its ``Tx``:
    anything that suspends (a future of the event loop, a sleep) cannot be waited for
    here, so it is refused loudly and the transaction rolled back."""
    coro = fn(ThreadTx(conn))
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a transaction run whole on the writer awaited something other than its Tx")


def run_plan_sync(conn: sqlite3.Connection, plan: Plan[T]) -> T:
    """``storage.sql.run_plan`` on a plain connection (inside ``transact_sync``)."""
    done, value = advance(plan, None)
    while not done:
        kind, sql, params = value
        if kind == "executemany":
            result: Any = conn.executemany(sql, params).rowcount
        elif kind == "execute":
            result = int(conn.execute(sql, params).rowcount)
        elif kind == "fetchone":
            row = conn.execute(sql, params).fetchone()
            result = tuple(row) if row is not None else None
        else:
            result = [tuple(r) for r in conn.execute(sql, params).fetchall()]
        done, value = advance(plan, result)
    return value  # type: ignore[no-any-return]


def run_plans_sync(conn: sqlite3.Connection, makes: Sequence[Callable[[Dialect], Plan[Any]]]) -> list[tuple[bool, Any]]:
    """Each plan (made afresh: a retried group re-runs them all) in a savepoint of its
    own inside the caller's transaction: ``(True, result)``, or ``(False, exception)``
    with the plan's statements rolled back. An ``OperationalError`` (busy, locked, I/O)
    is the transaction's, not the plan's: it fails the group, which is retried whole."""
    outcomes: list[tuple[bool, Any]] = []
    for make in makes:
        conn.execute("SAVEPOINT plan")
        try:
            result = run_plan_sync(conn, make(SQLITE))
        except sqlite3.OperationalError:
            raise
        except Exception as exc:
            conn.execute("ROLLBACK TO plan")
            conn.execute("RELEASE plan")
            outcomes.append((False, exc))
            continue
        conn.execute("RELEASE plan")
        outcomes.append((True, result))
    return outcomes


__all__ = ["SQLITE", "SqliteSql", "SqliteTx", "ThreadTx", "run_plan_sync", "run_plans_sync", "run_whole_sync"]
