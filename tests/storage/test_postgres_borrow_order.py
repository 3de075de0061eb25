"""A caller with a deadline is handed a pooled connection before callers without one
(``storage/postgres/borrow_order.py``), on a real pool of one connection: the order
connections are handed out in, and that a caller who gives up leaves none behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from storage.postgres.borrow_order import MAX_PASSES, BorrowOrder
from tests.support.postgres import TestPostgres

#: Long enough never to end a wait this test ends otherwise.
LONG_S = 30.0


@pytest.fixture
async def one_connection(pg_server: TestPostgres) -> AsyncIterator[AsyncConnectionPool[Any]]:
    with pg_server.database() as url:
        pool: AsyncConnectionPool[Any] = AsyncConnectionPool(url, min_size=1, max_size=1, open=False)
        await pool.open(wait=True, timeout=LONG_S)
        try:
            yield pool
        finally:
            await pool.close()


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


def queued(pool: AsyncConnectionPool[Any]) -> int:
    return int(pool.get_stats().get("requests_waiting", 0))


async def test_a_connection_given_back_goes_to_a_caller_with_a_deadline_before_those_queued_earlier(
    one_connection: AsyncConnectionPool[Any],
) -> None:
    pool, order = one_connection, BorrowOrder()
    held = await order.getconn(pool, LONG_S, urgent=False)
    patient = [asyncio.create_task(order.getconn(pool, LONG_S, urgent=False)) for _ in range(2)]
    await until(lambda: queued(pool) == 2, "two callers without a deadline queued on the pool")
    urgent = asyncio.create_task(order.getconn(pool, LONG_S, urgent=True))
    await until(lambda: order.waiting_urgent == 1, "the caller with a deadline waiting")
    assert order.waiting == 3  # what the refill counts (the pool's own count keeps timed-out waits)

    await pool.putconn(held)
    conn = await urgent
    assert not any(task.done() for task in patient), "a caller without a deadline got it first"
    await pool.putconn(conn)  # then one of them (the one that passed it on queued again)
    served, still = await asyncio.wait(patient, timeout=LONG_S, return_when=asyncio.FIRST_COMPLETED)
    assert len(served) == 1 and len(still) == 1
    await pool.putconn(served.pop().result())
    await pool.putconn(await still.pop())
    assert order.waiting_urgent == 0


async def test_a_caller_with_a_deadline_that_gives_up_leaves_no_connection_behind(
    one_connection: AsyncConnectionPool[Any],
) -> None:
    """Its deadline passed, or cancelled: the connection given back after it left goes to
    the caller still waiting, and the pool is whole after."""
    pool, order = one_connection, BorrowOrder()
    held = await order.getconn(pool, LONG_S, urgent=False)
    patient = asyncio.create_task(order.getconn(pool, LONG_S, urgent=False))
    await until(lambda: queued(pool) == 1, "a caller without a deadline queued on the pool")
    with pytest.raises(PoolTimeout):
        await order.getconn(pool, 0.05, urgent=True)
    cancelled = asyncio.create_task(order.getconn(pool, LONG_S, urgent=True))
    await until(lambda: order.waiting_urgent == 1, "the caller with a deadline waiting")
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert order.waiting_urgent == 0

    await pool.putconn(held)
    await pool.putconn(await patient)
    stats = pool.get_stats()
    assert stats["pool_size"] == 1 and stats["pool_available"] == 1, stats


async def test_when_no_caller_without_a_deadline_is_left_queued_the_waiting_one_draws_itself(
    one_connection: AsyncConnectionPool[Any],
) -> None:
    pool, order = one_connection, BorrowOrder()
    held = await order.getconn(pool, LONG_S, urgent=False)
    patient = asyncio.create_task(order.getconn(pool, 0.2, urgent=False))
    await until(lambda: queued(pool) == 1, "a caller without a deadline queued on the pool")
    urgent = asyncio.create_task(order.getconn(pool, LONG_S, urgent=True))
    await until(lambda: order.waiting_urgent == 1, "the caller with a deadline waiting")
    with pytest.raises(PoolTimeout):
        await patient  # the last one without a deadline gives up: nobody will pass one on
    await until(lambda: order.waiting_urgent == 0, "the caller with a deadline drawing from the pool")

    await pool.putconn(held)
    await pool.putconn(await urgent)


async def test_a_caller_without_a_deadline_is_served_though_callers_with_one_keep_coming(
    one_connection: AsyncConnectionPool[Any],
) -> None:
    """A pool kept busy by requests: a caller without a deadline (the ordered writer) passes
    on at most MAX_PASSES connections, then keeps the next though another caller with a
    deadline waits - else it would wait until its retry gave up, however long the
    requests kept coming."""
    pool, order = one_connection, BorrowOrder()
    held = await order.getconn(pool, LONG_S, urgent=True)
    writer = asyncio.create_task(order.getconn(pool, LONG_S, urgent=False))
    await until(lambda: queued(pool) == 1, "the caller without a deadline queued on the pool")
    requests = [asyncio.create_task(order.getconn(pool, LONG_S, urgent=True)) for _ in range(MAX_PASSES + 1)]
    await until(lambda: order.waiting_urgent == MAX_PASSES + 1, "the callers with a deadline waiting")
    for served in requests[:MAX_PASSES]:  # each connection given back is passed on...
        await pool.putconn(held)
        held = await served
        assert not writer.done()
    await pool.putconn(held)  # ...until the caller without one keeps the next
    conn = await writer
    assert not requests[-1].done(), "the last caller with a deadline was served before it"
    await pool.putconn(conn)
    await pool.putconn(await requests[-1])
