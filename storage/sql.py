"""The executor surface every store in ``storage.stores`` is written against.

Each engine provides one ``SqlEngine`` over its connections (``storage.sqlite.dialect``,
``storage.postgres.dialect``) and keeps what its durability rests on: SQLite's single
writer and ordered background queue, PostgreSQL's pool and retried transactions. A
store only says *what* to run, in portable SQL (see ``storage.dialect``); the engine
renders it and decides *where*.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Generator, Sequence
from typing import Any, Literal, Protocol, TypeVar

from storage.dialect import Dialect, Statement

T = TypeVar("T")
Row = tuple[Any, ...]


class Tx(Protocol):
    """One open write transaction (portable SQL in, plain tuples out)."""

    dialect: Dialect

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run one statement; the number of rows it changed."""
        ...

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...


#: One statement of a *plan*: what to do with it (``Tx``'s method of that name), the
#: portable SQL and its parameters. The plan receives the method's result back.
Op = tuple[Literal["execute", "executemany", "fetchone", "fetchall"], str, Sequence[Any]]
#: A transaction's logic written once as a generator of ``Op``s, returning its result:
#: PostgreSQL drives it over ``Tx`` (``run_plan``), SQLite runs it whole on the writer's
#: own thread, in one hop (``storage.sqlite.dialect``).
Plan = Generator[Op, Any, T]


def advance(plan: Plan[T], result: Any) -> tuple[bool, Any]:
    """Send ``result`` into ``plan``: ``(False, its next Op)``, or ``(True, its value)``."""
    try:
        return False, plan.send(result)
    except StopIteration as stop:
        return True, stop.value


async def run_plan(tx: Tx, plan: Plan[T]) -> T:
    """Drive ``plan`` inside ``tx``: each ``Op`` runs, its result is sent back."""
    done, value = advance(plan, None)
    while not done:
        kind, sql, params = value
        done, value = advance(plan, await getattr(tx, kind)(sql, params))
    return value  # type: ignore[no-any-return]


OnCommit = Callable[[], None] | None
OnFail = Callable[[BaseException], None] | None


class EngineDatabase(Protocol):
    """What an engine's database class already offers (in its own paramstyle)."""

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None: ...

    async def fetchall(self, sql: str, params: Sequence[Any] = ()) -> list[Row]: ...

    async def execute(self, statements: Sequence[Statement]) -> None: ...

    def enqueue(
        self, statements: Sequence[Statement], *, on_commit: OnCommit = None, on_fail: OnFail = None
    ) -> None: ...

    async def commit(self, statements: Sequence[Statement], *, on_commit: OnCommit = None) -> None: ...


class SqlEngine:
    """Reads, write transactions and queued writes on one database, in portable SQL.

    The engine's subclass names its ``dialect`` and opens transactions (``transact``);
    everything else renders the SQL and hands it to the engine's database class as is."""

    dialect: Dialect

    def __init__(self, db: EngineDatabase) -> None:
        self.db = db

    def rendered(self, statements: Sequence[Statement]) -> Sequence[Statement]:
        if self.dialect.paramstyle == "qmark":
            return statements
        return [(self.dialect.render(sql), params) for sql, params in statements]

    async def fetchone(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        return await self.db.fetchone(self.dialect.render(sql), params)

    async def fetchall(self, sql: str, params: Sequence[Any] = (), *, binary: bool = False) -> list[Row]:
        """``binary``: ask for the binary wire format where the engine has one (vectors)."""
        return await self.db.fetchall(self.dialect.render(sql), params)

    async def transact(self, fn: Callable[[Tx], Awaitable[T]], *, deadline: float | None = None) -> T:
        """Run ``fn`` in one write transaction, retried as a whole while the database is
        busy or unreachable (so ``fn`` must only touch the database). ``deadline``
        (``time.monotonic()``): a request not yet acknowledged stops waiting there
        (``app/server/storage_budget.py``); without one the engine's write retry applies."""
        raise NotImplementedError

    async def transact_whole(
        self, fn: Callable[[Tx], Coroutine[Any, Any, T]], *, deadline: float | None = None
    ) -> T:
        """``transact`` for an ``fn`` that awaits nothing but its ``Tx`` (and coroutines
        that do the same): an engine may then run it whole where its connection lives.
        SQLite runs it on the writer's own thread in one hop instead of one hop per
        statement, each of which waited for the event loop (busy preparing the next
        ingest batch) before the writer could go on; PostgreSQL runs it as ``transact``."""
        return await self.transact(fn, deadline=deadline)

    async def transact_plan(self, make: Callable[[Dialect], Plan[T]], *, deadline: float | None = None) -> T:
        """``transact`` for a ``Plan`` (made afresh for each attempt)."""
        return await self.transact(lambda tx: run_plan(tx, make(tx.dialect)), deadline=deadline)

    async def execute(self, statements: Sequence[Statement]) -> None:
        """Commit ``statements`` now, in one transaction."""
        await self.db.execute(self.rendered(statements))

    def enqueue(self, statements: Sequence[Statement], *, on_commit: OnCommit = None, on_fail: OnFail = None) -> None:
        """Queue ``statements`` on the engine's ordered background writer (never blocks)."""
        self.db.enqueue(self.rendered(statements), on_commit=on_commit, on_fail=on_fail)

    async def commit(self, statements: Sequence[Statement], *, on_commit: OnCommit = None) -> None:
        """Queue ``statements`` on the ordered writer and wait until they are committed."""
        await self.db.commit(self.rendered(statements), on_commit=on_commit)


async def take_lock(tx: Tx, key: str | int) -> None:
    """The dialect's advisory lock on ``key`` for the rest of ``tx`` (none on SQLite)."""
    statement = tx.dialect.lock(key)
    if statement is not None:
        await tx.execute(*statement)


__all__ = ["EngineDatabase", "Op", "Plan", "Row", "SqlEngine", "Tx", "advance", "run_plan", "take_lock"]
