"""PostgreSQL's run-event listener down is no longer silent: while it cannot listen (its
connection ended, and new connections are refused — a full ``max_connections``, a proxy
that drops it) this replica follows runs executing elsewhere at the quiet poll (10 s) and
takes their cancels at the lease-claim pace, with the database otherwise fine. That was a
log line only; now ``/readyz``'s ``db.run_feed`` says it (``listening``, ``detail``,
``reconnects``) and ``/metrics`` has ``agentchat_run_feed_listening`` and
``agentchat_run_feed_reconnects_total``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psycopg.conninfo
import pytest

from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.storage.test_postgres_outage_app import budget_settings
from tests.support.postgres import TestPostgres
from tests.support.tcp_cut import CuttableRelay, cuttable_relay
from tests.test_metrics import get_metrics, value


@pytest.fixture
async def relayed(pg_server: TestPostgres) -> AsyncIterator[tuple[str, str, CuttableRelay]]:
    with pg_server.database() as url:
        params = psycopg.conninfo.conninfo_to_dict(url)
        async with cuttable_relay(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432)) as relay:
            dbname = str(params["dbname"])
            params["host"], params["port"] = "127.0.0.1", str(relay.port)
            yield "postgresql://{user}@{host}:{port}/{dbname}".format(**params), dbname, relay


async def test_a_listener_that_cannot_listen_shows_in_readyz_and_metrics(
    relayed: tuple[str, str, CuttableRelay], pg_server: TestPostgres, tmp_path: Path
) -> None:
    url, dbname, relay = relayed
    async with (
        running_app(budget_settings(url, tmp_path), provider=ExtractiveProvider()) as (base, _app),
        httpx.AsyncClient(timeout=30) as client,
    ):

        async def feed_until(check: Any) -> dict[str, Any]:
            body: dict[str, Any] = {}
            async with asyncio.timeout(60):
                while True:
                    body = (await client.get(f"{base}/readyz")).json()
                    if check(body["checks"]["db"].get("run_feed") or {}):
                        return body
                    await asyncio.sleep(0.05)

        await feed_until(lambda f: f.get("listening") is True)
        before = await get_metrics(client, base)
        assert value(before, "agentchat_run_feed_listening", "agentchat_run_feed_listening") == 1
        assert value(before, "agentchat_run_feed_reconnects", "agentchat_run_feed_reconnects_total") == 0

        relay.refuse_new()  # the pool's connections live on; a new one is closed on arrival
        pg_server.admin(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            f"WHERE application_name = 'agentchat-listen' AND datname = '{dbname}'"
        )
        body = await feed_until(lambda f: f.get("listening") is False and "quiet poll" in str(f.get("detail")))
        assert body["checks"]["db"]["ok"] is True  # the database answers: only the listener is away
        during = await get_metrics(client, base)
        assert value(during, "agentchat_run_feed_listening", "agentchat_run_feed_listening") == 0

        relay.restore()
        await feed_until(lambda f: f.get("listening") is True and f.get("reconnects", 0) >= 1)
        after = await get_metrics(client, base)
    assert value(after, "agentchat_run_feed_listening", "agentchat_run_feed_listening") == 1
    assert value(after, "agentchat_run_feed_reconnects", "agentchat_run_feed_reconnects_total") >= 1
