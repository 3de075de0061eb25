"""The request after the probe finds PostgreSQL back is served, not left behind the pool's backoff.

During an outage psycopg's pool grows by one attempt at a time, and that attempt fails
and sleeps its backoff (1 s, then 2 s) while the ordered writer and the runs' own steps
— callers without a request's deadline — queue for the pool. The reachability probe
connects apart from the pool, so when it found the database back the pool still slept:
after a 2.5 s cut the first new run, with a 1 s storage budget, was refused 503
``storage_unavailable`` (2 of 2) though the database answered. The probe's success now
has the pool open connections at once (``storage/postgres/pool_refill.py``). Those
connections, opened a few at a time, went to the callers queued during the outage in
their order, before the request that came after them; a caller with a deadline now
goes first (``storage/postgres/borrow_order.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg.conninfo
import pytest

from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.storage.test_postgres_outage_app import budget_settings, relayed_url
from tests.support.postgres import TestPostgres
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

BODY = {"message": "How do I resume a stream?", "context_type": "knowledge"}
#: The outage's length is the scenario: long enough for the pool's attempt to have failed
#: twice and to sleep its 2 s delay when the database comes back.
OUTAGE_S = 2.5
#: Callers without a deadline queued on the pool meanwhile (the writer, runs' own steps).
QUEUED = 6


async def test_the_first_run_after_the_probe_finds_the_database_back_is_served(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    url, relay = relayed_url
    async with (
        running_app(budget_settings(url, tmp_path), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        db = app.state.services.storage.db
        warm = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert warm[-1].json()["status"] == "completed"

        relay.cut()
        for _ in range(200):  # the idle connections used up and refused: the database known away
            if db.reach.down:
                break
            assert (await client.get("/readyz", timeout=3)).status_code == 503
            await asyncio.sleep(0.01)
        assert db.reach.down, "the database was never known away"
        # Outside any request, no deadline: each retries its wait for the pool for the
        # write retry (AGENT_DB_WRITE_RETRY_S, 10 s), as the writer's batches do.
        queued = [asyncio.create_task(db.execute([("SELECT 1", ())])) for _ in range(QUEUED)]
        await asyncio.sleep(OUTAGE_S)
        relay.restore()
        for _ in range(400):  # the probe alone finds it back
            if not db.reach.down:
                break
            await asyncio.sleep(0.01)
        assert not db.reach.down, "the database is back, yet the replica still takes it for away"
        # One connection for each caller waiting and one more, not one for every wait
        # that timed out during the outage (the pool's own count): the pool not filled.
        assert db.pool.get_stats()["pool_size"] < db.pool.max_size, db.pool.get_stats()

        started = await client.post("/v1/agent/runs", json=BODY)
        assert started.status_code == 201, f"the database is back, yet: {started.status_code} {started.text}"
        await asyncio.gather(*queued)  # each committed once the database was back
        after = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"


class SlowToConnect(CuttableRelay):
    """A relay whose every new connection waits ``connect_delay_s`` before it is put
    through: a database back from an outage that is slow to accept (a server still
    recovering, a loaded host — under the suite's load each new pooled connection took
    a few hundred ms through the relay, its authentication and ``configure``)."""

    connect_delay_s = 0.0

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.connect_delay_s and not self.cut_off:
            await asyncio.sleep(self.connect_delay_s)
        await super()._accept(reader, writer)


@pytest.fixture
async def slow_relayed_url(pg_server: TestPostgres) -> AsyncIterator[tuple[str, SlowToConnect]]:
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        relay = await SlowToConnect(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)).start()
        try:
            params["host"], params["port"] = "127.0.0.1", str(relay.port)
            yield "postgresql://{user}@{host}:{port}/{dbname}".format(**params), relay
        finally:
            await relay.aclose()


#: Callers without a deadline queued during the outage, each holding the connection it
#: gets until the test lets it go, so none is passed on to the request by the pool.
HOLDERS = 15
#: How long each new connection takes once the database is back: the pool opens three at
#: a time, so the request, sixteenth in the pool's queue, would get its first after six
#: rounds (3 s); first in line, after one, and its next step after one more at most.
CONNECT_DELAY_S = 0.5
#: The request's storage budget here: past two rounds, short of six, with a second of
#: margin either way for a loaded machine.
BUDGET_S = 2.0


async def test_a_run_started_as_the_database_comes_back_goes_before_callers_queued_without_a_deadline(
    slow_relayed_url: tuple[str, SlowToConnect], tmp_path: Path
) -> None:
    """The callers queued on the pool during an outage — the ordered writer, runs' own
    steps, background jobs: no deadline, each retrying its wait for the write retry —
    were handed the connections the pool opened once the database was back, in the
    order they queued, and a new run's request, queued after them, waited its whole
    storage budget behind them: 503 ``storage_unavailable`` though the database answered
    (the suite's failure under load: its first step waited ~420 ms of the 1 s behind nine
    such callers while connections were opened a few at a time). A caller with a
    deadline is now handed the next connection first."""
    url, relay = slow_relayed_url
    async with (
        running_app(budget_settings(url, tmp_path, BUDGET_S), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        db = app.state.services.storage.db
        warm = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert warm[-1].json()["status"] == "completed"

        relay.cut()
        for _ in range(200):
            if db.reach.down:
                break
            assert (await client.get("/readyz", timeout=3)).status_code == 503
            await asyncio.sleep(0.01)
        assert db.reach.down, "the database was never known away"
        release = asyncio.Event()
        holding: list[int] = []

        async def hold(conn: Any) -> None:
            await conn.execute("SELECT 1")
            holding.append(1)
            await release.wait()

        holders = [asyncio.create_task(db.transact(hold)) for _ in range(HOLDERS)]
        await asyncio.sleep(OUTAGE_S)
        relay.connect_delay_s = CONNECT_DELAY_S
        relay.restore()
        for _ in range(400):
            if not db.reach.down:
                break
            await asyncio.sleep(0.01)
        assert not db.reach.down, "the database is back, yet the replica still takes it for away"

        try:
            started = await client.post("/v1/agent/runs", json=BODY)
            assert started.status_code == 201, f"the database is back, yet: {started.status_code} {started.text}"
            assert len(holding) < HOLDERS, "every caller queued before the request was served first"
        finally:
            release.set()
        await asyncio.gather(*holders)  # each committed once let go
        assert len(holding) >= HOLDERS
        relay.connect_delay_s = 0.0
        after = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"
