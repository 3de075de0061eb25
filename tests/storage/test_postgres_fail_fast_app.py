"""While PostgreSQL is known away, a request is refused at once, not after the pool's timeout.

Found walking two replicas through a 40 s PostgreSQL stop: every request that needed the
database waited the whole ``AGENT_DB_POOL_TIMEOUT_S`` for a connection the pool could not
open, though the replica's last connection attempt had already failed — clients and
load-balancer connections piled up. Now, once an attempt failed and no idle connection is
left, such a request is answered 503 ``storage_unavailable`` with ``Retry-After`` at once
(``storage/postgres/reachability.py``); ``/readyz`` and ``agentchat_storage_unreachable``
say so, a probe keeps trying, and its first success ends it.

The pool's wait here is far longer than the client's: a request that waited for the pool
would time the client out, so the assertions are about what is answered, not how fast.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import psycopg

from llm.extractive import ExtractiveProvider
from tests.conftest import collect_sse, running_app
from tests.storage.test_postgres_outage_app import budget_settings, relayed_url
from tests.support.tcp_cut import CuttableRelay

__all__ = ["relayed_url"]  # the fixture, used by name

#: ``AGENT_DB_POOL_TIMEOUT_S``: a request that waits for the pool outlasts the client.
POOL_WAIT_S = 120.0
#: The client's own timeout: far under the pool's wait.
CLIENT_TIMEOUT_S = 20.0
BODY = {"message": "How do I resume a stream?", "context_type": "knowledge"}



def metric(scraped: str, name: str) -> float:
    [line] = [x for x in scraped.splitlines() if x.startswith(name + " ")]
    return float(line.split()[-1])


async def test_requests_are_refused_at_once_while_the_database_is_known_away(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    url, relay = relayed_url
    async with (
        running_app(budget_settings(url, tmp_path, POOL_WAIT_S), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=CLIENT_TIMEOUT_S) as client,
    ):
        assert app.state.services.storage.engine == "postgres"
        warm = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert warm[-1].json()["status"] == "completed"
        assert metric((await client.get("/metrics")).text, "agentchat_storage_unreachable") == 0

        relay.cut()
        # /readyz reads with its own short deadline: each probe uses up a connection the
        # cut closed, and the pool's attempt to replace it is refused.
        db_check: dict[str, object] = {}
        for _ in range(200):
            ready = await client.get("/readyz")
            assert ready.status_code == 503, ready.text
            db_check = ready.json()["checks"]["db"]
            if db_check.get("unreachable_for_s") is not None:
                break
            await asyncio.sleep(0.05)
        assert db_check.get("unreachable_for_s") is not None, f"/readyz never said the database is away: {db_check}"
        assert relay.refused > 0, "the app never tried to reach the database during the outage"

        # Side by side, as a load balancer sends them: each answered, none waits for the pool.
        try:
            answers = await asyncio.gather(
                *(client.get("/v1/agent/conversations") for _ in range(4)),
                client.post("/v1/agent/runs", json=BODY),
                client.get("/v1/agent/runs/run_unknown/events"),
            )
        except httpx.TimeoutException as exc:
            raise AssertionError(f"a request waited for the pool though the database was known away: {exc!r}") from exc
        for response in answers:
            assert response.status_code == 503, (response.request.url, response.text)
            assert response.json()["error"] == "storage_unavailable", response.text
            assert response.headers.get("retry-after")
        scraped = (await client.get("/metrics")).text
        assert metric(scraped, "agentchat_storage_unreachable") == 1
        assert metric(scraped, "agentchat_storage_refused_at_once_total") >= len(answers)

        relay.restore()
        # No request arrives: the probe alone finds the database back.
        reach = app.state.services.storage.db.reach
        for _ in range(400):
            if not reach.down:
                break
            await asyncio.sleep(0.05)
        assert not reach.down, "the database is back, yet the replica still takes it for away"

        after = await client.get("/v1/agent/conversations")
        assert after.status_code == 200, f"the database is back, yet: {after.status_code} {after.text}"
        run = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY)
        assert run[-1].event == "message_complete" and run[-1].json()["status"] == "completed"
        assert (await client.get("/readyz")).status_code == 200
        assert metric((await client.get("/metrics")).text, "agentchat_storage_unreachable") == 0


async def test_one_failed_attempt_among_answered_statements_refuses_nothing(
    relayed_url: tuple[str, CuttableRelay], tmp_path: Path
) -> None:
    """A connection attempt that failed once (a blip) while the database answers: the
    database is not taken for away, requests are served, and the probe's or the next
    statement's answer resets the count."""
    url, _relay = relayed_url
    async with (
        running_app(budget_settings(url, tmp_path, POOL_WAIT_S), provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=CLIENT_TIMEOUT_S) as client,
    ):
        reach = app.state.services.storage.db.reach
        assert (await client.get("/v1/agent/conversations")).status_code == 200  # a connection is idle again
        reach.attempt_failed(psycopg.OperationalError("connection to server failed: Connection refused"))
        assert not reach.down, "one failed attempt was taken for an outage"
        for _ in range(3):
            served = await client.get("/v1/agent/conversations")
            assert served.status_code == 200, served.text
        assert reach.refused == 0 and reach.outages == 0
        assert not reach.down
