"""The background jobs' leader on PostgreSQL (``storage/postgres/leader_lock.py`` under
``app/ops/leader.py``'s policy): one session-level advisory lock per database.

Two leaders on one database, as two workers or two replicas hold them: one leads and
runs its job, the other waits. When the leader's connection is cut while its process
lives (the server ends the session: ``pg_terminate_backend``), the lock goes with the
session — the old leader notices, stops its job and follows; the other takes the lock
and starts its job. Through real processes with SIGKILL: ``tests/test_workers_feed.py``.

The first leader connects through a loopback relay that refuses its new connections from
the terminate until the second leads. Connecting again at once, it could take the lock
back before the second's next try on a loaded machine - one leader at a time either way,
but not the hand-over asserted here (``tests/storage/test_review_leader_backfill.py`` met
the same ordering).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg

from app.ops.leader import Leader
from storage.postgres.leader_lock import LEADER_LOCK, AdvisoryLeaderLock
from tests.support.postgres import GUARDED, TestPostgres
from tests.support.tcp_cut import cuttable_relay

RETRY_S = 0.05


def leader(url: str) -> Leader:
    return Leader(AdvisoryLeaderLock(url, timeout_s=5), retry_s=RETRY_S, elsewhere="another worker or replica")


async def until(condition: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    async def wait() -> None:
        while not condition():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(wait(), timeout_s)
    except TimeoutError:
        raise AssertionError(f"never: {what}") from None


def lock_holders(url: str) -> list[int]:
    """The server processes whose sessions hold the leader's advisory lock."""
    with psycopg.connect(url, autocommit=True, **GUARDED) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND classid = %s AND objid = %s AND objsubid = 1",
            ((LEADER_LOCK >> 32) & 0xFFFFFFFF, LEADER_LOCK & 0xFFFFFFFF),
        ).fetchall()
    return [int(r[0]) for r in rows]


async def test_one_leads_and_a_cut_connection_hands_the_jobs_to_the_other(pg_server: TestPostgres) -> None:
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        async with cuttable_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
            # The first's connections go through ``relay`` (module docstring).
            relayed = psycopg.conninfo.make_conninfo(url, host="127.0.0.1", port=relay.port)
            first, second = leader(relayed), leader(url)
            running: dict[str, int] = {"first": 0, "second": 0}
            stopped: list[str] = []

            async def job(name: str) -> None:
                running[name] += 1
                try:
                    await asyncio.Event().wait()  # a periodic job runs until cancelled
                finally:
                    stopped.append(name)

            first.start()
            await until(lambda: first.is_leader, "the first leader took the lock")
            second.start()
            first.when_leading(lambda: job("first"), name="job")
            second.when_leading(lambda: job("second"), name="job")
            try:
                await until(lambda: running["first"] == 1, "the first leader's job started")
                first_lock = first.lock
                assert isinstance(first_lock, AdvisoryLeaderLock)
                assert lock_holders(url) == [first_lock.backend_pid]
                # The server drops the session by itself if its peer vanishes silently.
                assert first_lock._conn is not None
                shown = await (await first_lock._conn.execute("SHOW tcp_keepalives_idle")).fetchone()
                assert shown is not None and shown[0] == "10"
                # The second has asked (its connection is open) and does not lead.
                second_lock = second.lock
                assert isinstance(second_lock, AdvisoryLeaderLock)
                await until(lambda: second_lock.backend_pid is not None, "the second asked for the lock")
                assert not second.is_leader and running["second"] == 0
                assert second.status()["background_jobs"] == "another worker or replica"
                assert first.status()["background_jobs"] == "here"

                # The server ends the leader's session; its process lives on, and cannot connect
                # again until the second leads (module docstring).
                relay.refuse_new()
                pg_server.admin(f"SELECT pg_terminate_backend({first_lock.backend_pid})")
                await until(lambda: second.is_leader and running["second"] == 1, "the second took the lead over")
                await until(lambda: stopped == ["first"], "the old leader stopped its job")
                assert not first.is_leader and first.lost == 1 and second.lost == 0
                assert lock_holders(url) == [second_lock.backend_pid]
                # The old leader keeps campaigning on a new connection (refused until now), and follows.
                await until(lambda: relay.refused > 0, "the old leader tried to connect again")
                relay.restore()
                await until(lambda: first_lock.backend_pid is not None, "the old leader connected again")
                assert not first.is_leader and running["first"] == 1
            finally:
                await first.aclose()
                await second.aclose()
            assert sorted(stopped) == ["first", "second"]


async def test_a_leader_closing_lets_the_next_one_lead(pg_server: TestPostgres) -> None:
    with pg_server.database() as url:
        first, second = leader(url), leader(url)
        first.start()
        await until(lambda: first.is_leader, "the first leader took the lock")
        second.start()
        try:
            await first.aclose()  # a worker draining (SIGTERM) lets the lock go at once
            await until(lambda: second.is_leader, "the second took the lead")
            assert first.lost == 0  # stopping is not losing
        finally:
            await second.aclose()
        await until(lambda: lock_holders(url) == [], "nobody holds the lock after both closed")
