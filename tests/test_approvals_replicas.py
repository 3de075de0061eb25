"""An approval moves between replicas (PostgreSQL): replica A parks a run on a destructive
MCP tool and is SIGKILLed; the decision taken on replica B carries the run on there, and
the tool runs exactly once. A second run, parked on B, is decided on A (both alive):
whichever replica claims it first carries it on — once.

Two ``agentchat serve`` processes share one PostgreSQL database (the session's test
server, a fresh database); the model (the Ollama fake) and the MCP ``desk`` server run in
this process, so they outlive the kill, and ``desk.calls`` counts the executions.
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
from tests.support.postgres import TestPostgres
from tests.support.procs import AgentServer

pytestmark = pytest.mark.slow

SECRET = "approvals-replicas-secret-0123456789"
ASK = "Cancel the customer order ORD-1234 for good; cancel the order by its order number."


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


async def _desk_ranked(base: str) -> None:
    async with httpx.AsyncClient(timeout=5) as http, asyncio.timeout(90):
        while True:
            body: dict[str, Any] = (await http.get(f"{base}/readyz")).json()
            checks = body.get("checks", {})
            desk = checks.get("mcp", {}).get("servers", {}).get("desk", {})
            embedded = "tools embedded" in str(desk.get("index", ""))
            if desk.get("state") == "up" and embedded and checks.get("tool_index", {}).get("status") == "ready":
                return
            await asyncio.sleep(0.1)


async def _park(base: str, who: dict[str, str]) -> tuple[str, str]:
    async with httpx.AsyncClient(timeout=60, headers=who) as http:
        events = await collect_sse(http, "POST", f"{base}/v1/agent/chat",
                                   json={"message": ASK, "context_type": "workflow"})
    assert events[-1].event == "approval_required", [(e.event, e.data[:200]) for e in events]
    return events[0].json()["run_id"], events[-1].json()["tool_use_id"]


async def _decide_and_follow(base: str, run_id: str, tool_use_id: str, who: dict[str, str]) -> list[str]:
    async with httpx.AsyncClient(timeout=60, headers=who) as http:
        r = await http.post(f"{base}/v1/agent/runs/{run_id}/approvals/{tool_use_id}", json={"decision": "approve"})
        assert r.status_code == 202, r.text
        again = await http.post(f"{base}/v1/agent/runs/{run_id}/approvals/{tool_use_id}", json={"decision": "reject"})
        assert again.status_code == 409, again.text
        whole = await collect_sse(http, "GET", f"{base}/v1/agent/runs/{run_id}/events")
    return [e.event for e in whole]


async def test_an_approval_is_decided_on_another_replica_and_the_call_runs_once(
    tmp_path: Path, pg: TestPostgres
) -> None:
    desk_server, desk = build_server("desk")
    fake = FakeOllama([])
    for _ in range(2):
        fake.add_turn(lambda body: [ToolCall("cancel_order", {"order_id": "ORD-1234", "reason": "customer asked"})])
        fake.add_turn(lambda body: [Text("The order ORD-1234 is cancelled.")])
    alice = bearer("alice")
    with pg.database() as url:
        async with running_fake(desk_server.streamable_http_app()) as desk_url, running_fake(fake.app) as ollama:
            config = tmp_path / "mcp-servers.toml"
            config.write_text(f'[servers.desk]\nurl = "{desk_url}/mcp"\n')
            env = {
                "AGENT_DATABASE_URL": url,
                "AGENT_RUN_LEASE_S": "2",
                "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
                "AGENT_LLM_PROVIDER": "ollama",
                "OLLAMA_HOST": ollama,
                "OLLAMA_MODEL": "llama3.2",
                "AGENT_EMBEDDER": "hashing",
                "AGENT_INGEST_SAMPLE_KB": "false",
                "AGENT_MCP_SERVERS": str(config),
                "AGENT_AUTH": "jwt",
                "AGENT_JWT_SECRET": SECRET,
            }
            a, b = (AgentServer(tmp_path, env, name=name) for name in ("a", "b"))
            a.start()
            b.start()
            try:
                await asyncio.gather(a.wait_healthy(), b.wait_healthy())
                await asyncio.gather(_desk_ranked(a.base), _desk_ranked(b.base))

                # 1. Parked on A, A killed, decided on B.
                run_1, call_1 = await _park(a.base, alice)
                a.send(signal.SIGKILL)
                await a.wait_exit(30)
                async with httpx.AsyncClient(timeout=30, headers=bearer("bob")) as http:
                    r = await http.post(f"{b.base}/v1/agent/runs/{run_1}/approvals/{call_1}",
                                        json={"decision": "approve"})
                    assert r.status_code == 404
                first = await _decide_and_follow(b.base, run_1, call_1, alice)
                calls_after_first = [args for name, args in desk.calls if name == "cancel_order"]

                # 2. Parked on B, decided on A (restarted), both alive.
                a.start()
                await a.wait_healthy()
                await _desk_ranked(a.base)
                run_2, call_2 = await _park(b.base, alice)
                second = await _decide_and_follow(a.base, run_2, call_2, alice)
            finally:
                a.close()
                b.close()

    for names in (first, second):
        assert names.count("approval_required") == 1 and names.count("message_complete") == 1, names
        assert names[-1] == "message_complete"
    assert calls_after_first == [{"order_id": "ORD-1234", "reason": "customer asked"}]
    assert [name for name, _ in desk.calls if name == "cancel_order"] == ["cancel_order", "cancel_order"]
