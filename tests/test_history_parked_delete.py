"""Deleting a conversation whose run is parked for an approval (issue 25 items 1 and 3
together): the parked run is cancelled — the call it waited on never runs — and the
conversation is gone, its run with it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, running_fake
from tests.fakes.mcp_server import build_server
from tests.test_approvals import ALICE, ASK, BOB, cancel_call, parked, say, settings_for


async def test_delete_cancels_a_run_waiting_for_approval(tmp_path: Path) -> None:
    desk_server, desk = build_server("desk")
    fake = FakeOllama([])
    async with running_fake(desk_server.streamable_http_app()) as desk_url, running_fake(fake.app) as ollama_url:
        settings = settings_for(tmp_path, ollama_url, desk_url)
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=30)
        async with running_app(settings, provider=provider) as (base, app):
            registry = app.state.services.agent.registry
            async with asyncio.timeout(60):
                while "cancel_order" not in registry:
                    await asyncio.sleep(0.05)
            fake.add_turn(cancel_call)
            fake.add_turn(say("never said"))
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                body = {"message": ASK, "context_type": "workflow", "conversation_id": "parked"}
                events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
                parked(events)
                run_id = events[0].json()["run_id"]
                assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).json()["status"] == (
                    "waiting_approval"
                )
                assert (await http.delete("/v1/agent/conversations/parked", headers=BOB)).status_code == 404
                deleted = await http.delete("/v1/agent/conversations/parked", headers=ALICE)
                assert deleted.status_code == 204, deleted.text
                assert (await http.get(f"/v1/agent/runs/{run_id}", headers=ALICE)).status_code == 404
                assert (await http.get("/v1/agent/conversations", headers=ALICE)).json()["conversations"] == []
            assert await app.state.services.run_store.get(run_id) is None
    assert [name for name, _ in desk.calls if name == "cancel_order"] == []
