"""A replica past its capacity refuses new runs with 503 and ``Retry-After``
(``AGENT_MAX_LIVE_RUNS``) instead of slowing every live stream; the slot is claimed
atomically, so concurrent requests cannot all pass the check at once (issue 21 item 4)."""

from __future__ import annotations

import asyncio

import httpx

from app.config import Settings
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn

LIMIT = 3
BODY = {"message": "hold on", "context_type": "workflow"}


async def test_fifty_concurrent_requests_get_exactly_the_replicas_slots(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider(lambda _request, _i: GatedTurn(["working ", gate, "done"]))
    cfg = settings.with_(max_live_runs=LIMIT, max_runs_per_user=100)
    async with running_app(cfg, provider=provider, embedder=None) as (base, app):
        runs = app.state.services.runs
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            answers = await asyncio.gather(*(client.post("/v1/agent/runs", json=BODY) for _ in range(50)))
            started = [a for a in answers if a.status_code == 201]
            refused = [a for a in answers if a.status_code != 201]
            assert len(started) == LIMIT, [a.status_code for a in answers]
            assert {a.status_code for a in refused} == {503}
            assert all(a.headers.get("retry-after") and a.json()["error"] == "replica_busy" for a in refused)
            assert len(runs.active()) == LIMIT and runs.counters.refused_full == 50 - LIMIT
            metrics = (await client.get("/metrics")).text
            assert f"agentchat_runs_refused_replica_full_total {50 - LIMIT}.0" in metrics

            # The slots come back when the runs end: a new run is admitted again.
            gate.open()
            for answer in started:
                async with client.stream("GET", f"/v1/agent/runs/{answer.json()['run_id']}/events") as stream:
                    async for _ in stream.aiter_lines():
                        pass
            again = await client.post("/v1/agent/runs", json=BODY)
            assert again.status_code == 201, again.text


async def test_no_cap_by_default(settings: Settings) -> None:
    assert Settings.from_env({}).max_live_runs == 0
    assert settings.max_live_runs == 0
