"""A served app on PostgreSQL answers again as soon as the database is back.

The database is away longer than a few reconnect attempts: the app reaches it through
a relay this test cuts for ``OUTAGE_S`` (the length of the outage is the scenario, not
a wait for something to happen). psycopg's pool retries each lost connection with a
doubling delay for five minutes (1, 2, 4, 8, 16 s ...), and while one of those attempts
waits no request makes it try sooner: after this outage its next attempt was ~15 s
away, so the first requests after the database came back still waited their whole
``AGENT_DB_POOL_TIMEOUT_S`` and got 503 (found walking two replicas through a 40 s
PostgreSQL stop: both answered 503 for 17-19 s after it was running again). The pool
now gives an attempt up after ``PostgresOptions.reconnect_window_s``, so a request that
finds no connection starts a fresh one: the first request after the outage is served.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from llm.extractive import ExtractiveProvider
from storage.postgres.database import PostgresOptions
from tests.conftest import collect_sse, running_app
from tests.storage.test_postgres_outage_app import budget_settings, relayed_url
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: Attempts 1, 2, 4, 8 s apart (each delay +-10 %) fall at ~0, 1, 3, 7 and 13.5-16.5 s of
#: the outage, the next at 28-34 s: an outage ended at 21 s leaves the old pool ~7 s
#: without trying, longer than the wait below.
OUTAGE_S = 21.0
#: A request's wait for the database (``AGENT_DB_POOL_TIMEOUT_S``): a connection to a
#: database that is back takes milliseconds, so this only has to outlast a loaded machine.
POOL_WAIT_S = 3.0



def test_the_reconnect_window_is_shorter_than_the_outage() -> None:
    """Else the test would not tell: an attempt given up after the outage ended is the
    old behaviour."""
    assert PostgresOptions().reconnect_window_s < OUTAGE_S / 2


async def test_the_first_request_after_an_outage_is_served(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    url, relay = relayed_url
    body = {"message": "How do I resume a stream?", "context_type": "knowledge"}
    async with (
        running_app(budget_settings(url, tmp_path, POOL_WAIT_S), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=3 * POOL_WAIT_S) as client,
    ):
        assert app.state.services.storage.engine == "postgres"
        warm = await collect_sse(client, "POST", "/v1/agent/chat", json=body)
        assert warm[-1].json()["status"] == "completed"

        relay.cut()
        during = await client.get("/v1/agent/conversations")  # a client trying meanwhile
        assert during.status_code == 503, during.text
        await asyncio.sleep(OUTAGE_S)
        assert relay.refused > 0, "the app never tried to reach the database during the outage"
        relay.restore()

        after = await client.get("/v1/agent/conversations")
        assert after.status_code == 200, f"the database is back, yet: {after.status_code} {after.text}"
        run = await collect_sse(client, "POST", "/v1/agent/chat", json=body)
        assert run[-1].event == "message_complete" and run[-1].json()["status"] == "completed"
