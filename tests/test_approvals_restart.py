"""An approval waits across a SIGKILL: a real server process (``agentchat serve``) parks a
run on a destructive MCP tool, is killed, starts again on the same SQLite file; the
decision taken on the new process carries the run on and the tool runs exactly once.

The model (the Ollama fake) and the MCP ``desk`` server run in this process, so they
outlive the kill; ``desk.calls`` counts the executions where the side effect happens.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.server.auth import sign_hs256
from tests.conftest import collect_sse
from tests.fakes import FakeOllama, Text, ToolCall, running_fake
from tests.fakes.mcp_server import build_server
from tests.support.procs import AgentServer

pytestmark = pytest.mark.slow

SECRET = "approvals-restart-secret-0123456789"
ASK = "Cancel the customer order ORD-1234 for good; cancel the order by its order number."


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


async def _desk_ranked(base: str) -> None:
    """Until the server ranks the MCP server's tools (``/readyz``: desk up, its tools embedded)."""
    async with httpx.AsyncClient(timeout=5) as http, asyncio.timeout(90):
        while True:
            body: dict[str, Any] = (await http.get(f"{base}/readyz")).json()
            checks = body.get("checks", {})
            desk = checks.get("mcp", {}).get("servers", {}).get("desk", {})
            embedded = "tools embedded" in str(desk.get("index", ""))  # its tools ranked, not only listed
            if desk.get("state") == "up" and embedded and checks.get("tool_index", {}).get("status") == "ready":
                return
            await asyncio.sleep(0.1)


async def test_an_approval_waits_across_a_sigkill_and_the_call_runs_once(tmp_path: Path) -> None:
    desk_server, desk = build_server("desk")
    fake = FakeOllama([])
    fake.add_turn(lambda body: [ToolCall("cancel_order", {"order_id": "ORD-1234", "reason": "customer asked"})])
    fake.add_turn(lambda body: [Text("The order ORD-1234 is cancelled.")])
    alice = bearer("alice")
    async with running_fake(desk_server.streamable_http_app()) as desk_url, running_fake(fake.app) as ollama_url:
        config = tmp_path / "mcp-servers.toml"
        config.write_text(f'[servers.desk]\nurl = "{desk_url}/mcp"\n')
        server = AgentServer(tmp_path, {
            "AGENT_LLM_PROVIDER": "ollama",
            "OLLAMA_HOST": ollama_url,
            "OLLAMA_MODEL": "llama3.2",
            "AGENT_EMBEDDER": "hashing",
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_MCP_SERVERS": str(config),
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_SECRET": SECRET,
        })
        server.start()
        try:
            await server.wait_healthy()
            await _desk_ranked(server.base)
            async with httpx.AsyncClient(timeout=60, headers=alice) as http:
                events = await collect_sse(http, "POST", f"{server.base}/v1/agent/chat",
                                           json={"message": ASK, "context_type": "workflow"})
            assert events[-1].event == "approval_required", [(e.event, e.data[:300]) for e in events]
            run_id = events[0].json()["run_id"]
            wait = events[-1].json()

            server.send(signal.SIGKILL)
            await server.wait_exit(30)
            assert [name for name, _ in desk.calls if name == "cancel_order"] == []
            server.start()
            await server.wait_healthy()
            await _desk_ranked(server.base)

            url = f"{server.base}/v1/agent/runs/{run_id}/approvals/{wait['tool_use_id']}"
            async with httpx.AsyncClient(timeout=60, headers=alice) as http:
                assert (await http.post(url, json={"decision": "approve"}, headers=bearer("bob"))).status_code == 404
                r = await http.post(url, json={"decision": "approve"})
                assert r.status_code == 202, r.text
                assert (await http.post(url, json={"decision": "approve"})).status_code == 409
            async with httpx.AsyncClient(timeout=60) as http:
                rest = await collect_sse(http, "GET", f"{server.base}{r.json()['stream_url']}")
            async with httpx.AsyncClient(timeout=60, headers=alice) as http:
                whole = await collect_sse(http, "GET", f"{server.base}/v1/agent/runs/{run_id}/events")
        finally:
            server.close()

    assert rest[-1].event == "message_complete" and rest[-1].json()["status"] == "completed", [e.event for e in rest]
    assert [e.event for e in whole].count("message_complete") == 1
    assert [e.event for e in whole].count("approval_required") == 1
    assert [args for name, args in desk.calls if name == "cancel_order"] == [
        {"order_id": "ORD-1234", "reason": "customer asked"}
    ]
