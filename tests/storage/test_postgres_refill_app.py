"""The request after the probe finds PostgreSQL back is served, not left behind the pool's backoff.

During an outage psycopg's pool grows by one attempt at a time, and that attempt fails
and sleeps its backoff (1 s, then 2 s) while the ordered writer and the runs' own steps
— callers without a request's deadline — queue for the pool. The reachability probe
connects apart from the pool, so when it found the database back the pool still slept:
after a 2.5 s cut the first new run, with a 1 s storage budget, was refused 503
``storage_unavailable`` (2 of 2) though the database answered. The probe's success now
has the pool open connections at once (``storage/postgres/pool_refill.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.storage.test_postgres_outage_app import budget_settings, relayed_url
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

        started = await client.post("/v1/agent/runs", json=BODY)
        assert started.status_code == 201, f"the database is back, yet: {started.status_code} {started.text}"
        await asyncio.gather(*queued)  # each committed once the database was back
        after = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert after[-1].event == "message_complete" and after[-1].json()["status"] == "completed"
