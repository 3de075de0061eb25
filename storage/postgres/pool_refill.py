"""Have the pool open connections at once when the database is found back.

Why: psycopg's pool grows by one attempt at a time, and during an outage that attempt
fails and sleeps its backoff (1 s, then 2 s), while the ordered writer and the runs'
own steps queue for the pool (5-9 callers waiting after a 1.5-3.5 s cut). The pool
learns nothing from the reachability probe (``reachability.py``) that connects apart
from it, so the first request after the database was back waited out that delay behind
them: after a 2.5 s cut, 2 of 2 new runs were refused 503 ``storage_unavailable`` after
their whole 1 s budget although the probe had connected, and once, under load, the suite's
``test_an_outage_longer_than_the_pool_timeout_is_503_everywhere`` saw its first run
after ``/readyz`` said 200 refused so.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool


async def refill_now(pool: AsyncConnectionPool[Any], waiting: int) -> int:
    """If the pool holds no idle connection, start one connection for each of the
    ``waiting`` callers (``BorrowOrder.waiting``) and one more, at once, never past the
    pool's maximum; how many were started. The pool's own ``requests_waiting`` would not
    do: it counts the waits that timed out during the outage too (22 for six callers
    after a 2.5 s cut), and the pool was filled to its maximum — 16 connections opened
    at once for 6 callers, idle after, and closed one per ``max_idle`` (10 min).

    ``resize`` is the pool's public way to start connections now: the floor is raised by
    that many and set back at once, so only the number of connections changes, and the
    pool closes those it no longer needs after ``max_idle`` as it does any others."""
    stats = pool.get_stats()
    if int(stats.get("pool_available", 0)) > 0:
        return 0
    floor, ceiling = pool.min_size, pool.max_size
    extra = min(waiting + 1, ceiling - int(stats.get("pool_size", 0)), ceiling - floor)
    if extra <= 0:
        return 0
    await pool.resize(floor + extra, ceiling)
    await pool.resize(floor, ceiling)
    return extra


__all__ = ["refill_now"]
