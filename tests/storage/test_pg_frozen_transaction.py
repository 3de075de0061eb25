"""A replica frozen inside a transaction does not hold off the others' take-over.

A replica stopped (SIGSTOP, a paused VM) or cut off between two statements of a
transaction keeps its session open and its row locks held: every other replica's claim
of its runs then waits out ``lock_timeout``, fails, and is tried again — for as long as
the replica stays frozen (a CI run of tests/test_replicas.py's paused case waited for
ever). The service sets PostgreSQL's ``idle_in_transaction_session_timeout`` to the run
lease (``app/wiring.py`` → ``storage/open.py``), so PostgreSQL ends such a session and
releases its locks once the replica has lost its leases anyway.

That timer only runs while the server waits *between* transactions' statements (after a
``Sync``): a client frozen in the middle of a pipeline — psycopg's ``executemany``, which
the writer used for a burst of events — left the server waiting for the pipeline's next
row with no timer, and the run stayed locked for as long as the replica stayed frozen
(tests/test_replicas.py's paused case, now and then on a loaded machine). The writer now
sends every statement with its ``Sync`` (``storage/postgres/statements.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from storage.errors import LeaseLost
from storage.open import open_storage
from storage.postgres import PostgresStorage
from storage.postgres.database import transient
from storage.records import NewRun, RunEvent, RunWrite
from tests.support.deadline import within
from tests.support.pg_freeze import FreezingRelay, freezing_relay
from tests.support.postgres import TestPostgres

#: The frozen replica's lease owner: only its lease check's parameters carry it.
OWNER = "replica-a-frozen-mid-step"


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def test_a_transaction_frozen_past_the_lease_gives_up_its_row_locks(pg_url: str) -> None:
    frozen = await open_storage(pg_url, idle_in_transaction_s=1.0)
    other = await open_storage(pg_url)
    assert isinstance(frozen, PostgresStorage) and isinstance(other, PostgresStorage)
    try:
        await frozen.runs.create(NewRun("r1", "c1", "alice", "knowledge", b"{}"))
        locked, thaw = asyncio.Event(), asyncio.Event()

        async def freeze() -> None:
            async with frozen.db.pool.connection() as conn, conn.transaction():
                cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
                assert (await cur.fetchone()) == ("1s",)
                await conn.execute("SELECT 1 FROM runs WHERE id = 'r1' FOR UPDATE")
                locked.set()
                await thaw.wait()  # the client stops here, its transaction open
                await conn.execute("SELECT 1")

        holder = asyncio.create_task(freeze())
        await within(locked.wait(), "the frozen replica's row lock")
        # Another replica writes the row: PostgreSQL ends the frozen session after 1 s, so
        # the write gets the lock within its own lock_timeout (5 s) — without the setting
        # it fails with a lock timeout, and every retry would too.
        async with other.db.pool.connection() as conn:
            await within(
                conn.execute("UPDATE runs SET status = 'running' WHERE id = 'r1'"), "the write past the frozen lock"
            )
        stored = await other.runs.get("r1")
        assert stored is not None and stored.status == "running"
        # The frozen replica learns, when it runs again, that its transaction is gone —
        # an error its writer retries on a new connection (where it meets its lease).
        thaw.set()
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout) as caught:
            await within(holder, "the thawed transaction's next statement")
        assert transient(caught.value)
    finally:
        await frozen.close()
        await other.close()


async def test_the_default_pool_ends_a_transaction_left_waiting(pg_url: str) -> None:
    storage = await open_storage(pg_url)
    assert isinstance(storage, PostgresStorage)
    try:
        async with storage.db.pool.connection() as conn:
            cur = await conn.execute("SHOW idle_in_transaction_session_timeout")
            assert (await cur.fetchone()) == ("10s",)
    finally:
        await storage.close()


async def _claimed_by(other: PostgresStorage, run_id: str, owner: str) -> None:
    """Until ``owner``'s claim (expired leases only, as the take-over's) gets ``run_id``."""
    while not any(r.id == run_id for r in await other.runs.claim(owner, 5.0, expired_only=True)):
        await asyncio.sleep(0.1)


def _through(relay: FreezingRelay, params: dict[str, Any]) -> str:
    """The database's URL through ``relay``: a URL (a key=value string would be taken for
    a SQLite path); no TLS, so the relay reads the protocol."""
    auth = quote(str(params.get("user") or ""), safe="")
    if params.get("password"):
        auth += ":" + quote(str(params["password"]), safe="")
    return f"postgresql://{auth}@127.0.0.1:{relay.port}/{params['dbname']}?sslmode=disable&gssencmode=disable"


@dataclass
class _FrozenStep:
    """A run writer behind a freezing relay, frozen inside its step's transaction, and a
    second replica on the database itself."""

    relay: FreezingRelay
    frozen: PostgresStorage
    other: PostgresStorage
    #: The step's outcome: ``None`` once committed, else the exception it failed with.
    outcome: asyncio.Future[BaseException | None]
    #: Loop time when the step was handed to the writer.
    written_at: float


@contextlib.asynccontextmanager
async def _frozen_step(pg_url: str, write_retry_s: float) -> AsyncIterator[_FrozenStep]:
    """Replica A (``OWNER``, a 0.5 s lease, PostgreSQL ending its idle transactions after
    1 s) writes a burst of 20 events; the relay freezes it right after its lease check,
    and this yields once it is frozen. The relay is thawed and both closed on the way out."""
    params = psycopg.conninfo.conninfo_to_dict(pg_url)
    async with freezing_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
        frozen = await open_storage(_through(relay, params), idle_in_transaction_s=1.0, write_retry_s=write_retry_s)
        other = await open_storage(pg_url)
        assert isinstance(frozen, PostgresStorage) and isinstance(other, PostgresStorage)
        try:
            await frozen.runs.create(NewRun("r1", "c1", "alice", "workflow", b"{}", lease_owner=OWNER, lease_s=0.5))
            relay.arm(OWNER.encode())
            loop = asyncio.get_running_loop()
            outcome: asyncio.Future[BaseException | None] = loop.create_future()

            def ended(exc: BaseException | None) -> None:
                if not outcome.done():
                    outcome.set_result(exc)

            burst = [RunEvent(seq=i, event="content_chunk", data=f'{{"text":"w{i} "}}') for i in range(1, 21)]
            written_at = loop.time()
            frozen.runs.write(
                RunWrite("r1", "c1", "alice", events=burst, lease_owner=OWNER, lease_s=0.5, lease_epoch=0),
                on_commit=lambda: ended(None),
                on_fail=ended,
            )
            await within(relay.frozen.wait(), "the writer to stop inside its step")
            yield _FrozenStep(relay, frozen, other, outcome, written_at)
        finally:
            relay.thaw()
            await frozen.close()
            await other.close()


async def test_a_writer_frozen_between_its_writes_lets_another_replica_take_the_run(pg_url: str) -> None:
    """The run writer's own step, frozen where a stopped process can stop — between two of
    its writes, just after its lease check locked the run's row — must not keep the run
    from the other replicas: PostgreSQL ends the session, the run is claimed, and the
    thawed writer's step is refused by the lease (nothing of it stored)."""
    async with _frozen_step(pg_url, write_retry_s=60.0) as step:
        where = "mid-pipeline" if step.relay.froze_mid_pipeline else "between two statements"
        claimed = _claimed_by(step.other, "r1", "replica-b")
        await within(claimed, f"another replica's claim (writer frozen {where})", 30)
        owner = await step.other.db.fetchone("SELECT lease_owner FROM runs WHERE id = %s", ("r1",))
        assert owner == ("replica-b",)

        step.relay.thaw()
        refused = await within(step.outcome, "the thawed writer's step to end")
        assert isinstance(refused, LeaseLost), refused
        assert await step.other.runs.events_after("r1", 0) == []


async def test_a_writer_thawed_past_its_retry_window_meets_its_lease_not_an_outage(pg_url: str) -> None:
    """The same freeze, thawed after the writer's retry window ran out while it was
    stopped (tests/test_replicas.py's paused replica: a 1 s window, a longer pause). Its
    first attempt fails then — the server ended its session — and the window is already
    spent: it gave up ("failed after 1 attempts"), the run took it for an outage and showed
    its followers a failed ending under ids the new owner's events hold. An attempt that
    outlasted the window is tried once more, on a fresh connection, where the lease check
    refuses it: ``LeaseLost``, not ``StorageUnavailable``."""
    window_s = 0.2
    async with _frozen_step(pg_url, write_retry_s=window_s) as step:
        await within(_claimed_by(step.other, "r1", "replica-b"), "another replica's claim", 30)
        # The claim waited for PostgreSQL to end the frozen session (1 s idle): the
        # writer's window (0.2 s) is spent, as a paused process's is.
        assert asyncio.get_running_loop().time() - step.written_at > window_s
        assert not step.outcome.done()

        step.relay.thaw()
        refused = await within(step.outcome, "the thawed writer's step to end")
        assert isinstance(refused, LeaseLost), refused
        assert await step.other.runs.events_after("r1", 0) == []
        assert step.frozen.db.healthy, "a replica that lost its lease took its pause for an outage"
