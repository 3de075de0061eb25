"""Per-user admission limits: requests per minute and concurrent runs (429 + Retry-After)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.server.limits import RateLimiter
from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn

BODY = {"message": "hi", "context_type": "knowledge"}


def settings(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "a.db"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_INGEST_SAMPLE_KB": "false",
            **env,
        }
    )


def test_rate_limiter_window() -> None:
    limiter = RateLimiter(per_minute=2)
    assert limiter.check("u", now=0.0) is None
    assert limiter.check("u", now=1.0) is None
    wait = limiter.check("u", now=2.0)
    assert wait is not None and 55 <= wait <= 60
    assert limiter.check("other", now=2.0) is None
    assert limiter.check("u", now=60.5) is None  # the first request left the window


async def test_requests_per_minute_gives_429_with_retry_after(tmp_path: Path) -> None:
    provider = GatedProvider([GatedTurn(steps=("ok",))] * 5)
    async with (
        running_app(
            settings(tmp_path, AGENT_REQUESTS_PER_MINUTE="2"), provider=provider, registry=ToolRegistry(), embedder=None
        ) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        codes = [(await client.post(f"{base}/v1/agent/runs", json=BODY)).status_code for _ in range(2)]
        limited = await client.post(f"{base}/v1/agent/runs", json=BODY)
    assert codes == [201, 201]
    assert limited.status_code == 429 and limited.json()["error"] == "rate_limited"
    assert int(limited.headers["retry-after"]) >= 1


async def test_concurrent_runs_per_user_give_429_until_one_finishes(tmp_path: Path) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("a", gate)), GatedTurn(steps=("b",))])
    async with (
        running_app(
            settings(tmp_path, AGENT_MAX_RUNS_PER_USER="1"), provider=provider, registry=ToolRegistry(), embedder=None
        ) as (base, app),
        httpx.AsyncClient(timeout=30) as client,
    ):
        first = await client.post(f"{base}/v1/agent/runs", json=BODY)
        assert first.status_code == 201
        await asyncio.wait_for(gate.reached.wait(), 10)
        busy = await client.post(f"{base}/v1/agent/runs", json=BODY)
        assert busy.status_code == 429 and busy.json()["error"] == "too_many_runs"
        assert busy.headers["retry-after"]
        gate.open()
        run = app.state.services.runs.get(first.json()["run_id"])
        await asyncio.wait_for(run.wait_finished(), 10)
        again = await client.post(f"{base}/v1/agent/runs", json=BODY)
        assert again.status_code == 201


async def test_at_the_cap_every_face_refuses_and_no_imported_history_is_left(tmp_path: Path) -> None:
    """The native faces are refused by the run's own admission transaction (no read
    before it); the AI SDK face, which would import a client's earlier turns first, is
    refused before the import, so the conversation it names does not exist afterwards."""
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("a", gate)), GatedTurn(steps=("b",))])
    earlier = [
        {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "first question"}]},
        {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "first answer"}]},
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "second question"}]},
    ]
    async with (
        running_app(
            settings(tmp_path, AGENT_MAX_RUNS_PER_USER="1"), provider=provider, registry=ToolRegistry(), embedder=None
        ) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        assert (await client.post("/v1/agent/runs", json=BODY)).status_code == 201
        await asyncio.wait_for(gate.reached.wait(), 10)
        chat = await client.post("/v1/agent/chat", json=BODY)
        ui = await client.post("/v1/agent/ui-stream", json={"id": "chat-at-cap", "messages": earlier})
        imported = await client.get("/v1/agent/conversations/chat-at-cap")
        gate.open()
    assert (chat.status_code, chat.json()["error"]) == (429, "too_many_runs")
    assert (ui.status_code, ui.json()["error"]) == (429, "too_many_runs")
    assert imported.status_code == 404
