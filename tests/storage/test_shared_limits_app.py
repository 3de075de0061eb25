"""Per-user limits hold across replicas: three apps on one PostgreSQL share the count of
a user's unfinished runs and of their requests per minute."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.postgres import TestPostgres

BODY = {"message": "hi", "context_type": "knowledge"}


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


def replica_settings(url: str, tmp_path: Path, i: int, **env: str) -> Settings:
    return Settings.from_env({
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",  # PostgreSQL: a key the database does not hold
        "AGENT_DB_PATH": str(tmp_path / f"replica{i}.sqlite3"),
        "AGENT_MANDATORY_CONTEXTS": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        **env,
    })


async def replicas(stack: AsyncExitStack, url: str, tmp_path: Path, gate: Gate, **env: str) -> list[tuple[str, Any]]:
    out = []
    for i in range(3):
        provider = GatedProvider(lambda _req, _n: GatedTurn(steps=("a", gate, "b")))
        out.append(await stack.enter_async_context(running_app(
            replica_settings(url, tmp_path, i, **env), provider=provider, registry=ToolRegistry(), embedder=None)))
    return out


async def test_the_ninth_concurrent_run_over_three_replicas_is_refused(pg_url: str, tmp_path: Path) -> None:
    gate = Gate()
    async with AsyncExitStack() as stack:
        apps = await replicas(stack, pg_url, tmp_path, gate, AGENT_MAX_RUNS_PER_USER="8")
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        started = []
        for i in range(8):
            base, _ = apps[i % 3]
            response = await client.post(f"{base}/v1/agent/runs", json=BODY)
            assert response.status_code == 201, response.text
            started.append((i % 3, response.json()["run_id"]))
        # Each replica runs at most three of them: only the shared count refuses the ninth.
        assert [len(app.state.services.runs.active()) for _, app in apps] == [3, 3, 2]
        for base, _ in apps:
            refused = await client.post(f"{base}/v1/agent/runs", json=BODY)
            assert refused.status_code == 429 and refused.json()["error"] == "too_many_runs"
            assert refused.headers["retry-after"]
        gate.open()
        for replica, run_id in started:
            run = apps[replica][1].state.services.runs.get(run_id)
            await asyncio.wait_for(run.wait_finished(), 10)
        again = await client.post(f"{apps[2][0]}/v1/agent/runs", json=BODY)
        assert again.status_code == 201


async def test_requests_per_minute_are_counted_across_replicas(pg_url: str, tmp_path: Path) -> None:
    gate = Gate()
    gate.open()
    async with AsyncExitStack() as stack:
        apps = await replicas(stack, pg_url, tmp_path, gate, AGENT_REQUESTS_PER_MINUTE="4")
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        codes = [(await client.post(f"{apps[i % 3][0]}/v1/agent/runs", json=BODY)).status_code for i in range(6)]
    # Any replica alone has seen at most two: the shared count refuses the fifth and sixth.
    assert codes == [201, 201, 201, 201, 429, 429]
