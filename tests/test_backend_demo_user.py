"""The embedded default works end to end: with ``AGENT_AUTH=none`` and no
``Authorization`` from the caller, the workflow/table tools call the reference backend
as its documented demo user (``Bearer demo-alice``), and ``/readyz`` says so; a
caller's own header still wins, and ``AGENT_BACKEND_DEMO_TOKEN=none`` turns it off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from backend.seed import ALERT_IDS, ALERTS, ALICE_ID
from tests.conftest import collect_sse
from tests.test_backend_flows import backend_app, call, last_result, say, sent

pytestmark = pytest.mark.slow  # the app and the reference backend end to end

ALICE_ALERT = next(ALERT_IDS[a.key] for a in ALERTS if a.users == (ALICE_ID,))


async def chat_without_auth(base: str, message: str, context_type: str, context: dict[str, Any],
                            headers: dict[str, str] | None = None) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "POST", f"{base}/v1/agent/chat", headers=headers or {},
                                 json={"message": message, "context_type": context_type, "context": context})


async def test_no_authorization_calls_the_backend_as_demo_alice(tmp_path: Path) -> None:
    steps = [
        call("knowledge_base_search", {"query": "alerts"}),
        call("get_alert_detail", {"alert_id": ALICE_ALERT}),
        call("generate_response", {"answer": "Here is your alert.", "sources": [], "confidence_score": 0.5,
                                   "used_internal_kb": False, "used_external_kb": False}),
    ]
    async with backend_app(tmp_path, steps, AGENT_AUTH="none") as (base, fake):
        async with httpx.AsyncClient(timeout=10) as client:
            ready = (await client.get(f"{base}/readyz")).json()
        backend = ready["checks"]["backend"]
        assert backend["ok"] is True and backend["url"].startswith("http://127.0.0.1:")
        # The demo token is a credential: named by its variable, its value never served.
        assert "AGENT_BACKEND_DEMO_TOKEN" in backend["auth"] and backend["reachable"] is True
        assert "demo-alice" not in str(ready)
        events = await chat_without_auth(base, "Show my alert", "workflow", {})
    results = [e.json() for e in events if e.event == "tool_call_result"]
    assert ("get_alert_detail", False) in [(r["name"], r["is_error"]) for r in results]
    detail = last_result(sent(fake)[2], "get_alert_detail")
    assert ALICE_ALERT in str(detail)
    assert events[-1].json()["status"] == "completed"


async def test_a_callers_own_header_wins_and_the_fallback_can_be_turned_off(tmp_path: Path) -> None:
    steps = [call("get_alert_detail", {"alert_id": ALICE_ALERT}), say("done"),
             call("get_alert_detail", {"alert_id": ALICE_ALERT}), say("done")]
    env = {"AGENT_AUTH": "none", "AGENT_MANDATORY_CONTEXTS": "none"}
    async with backend_app(tmp_path, steps, **env) as (base, fake):
        # Bob's token is forwarded unchanged: Alice's alert is not his.
        await chat_without_auth(base, "Show that alert", "workflow", {}, {"Authorization": "Bearer demo-bob"})
        assert "HTTP 403" in str(last_result(sent(fake)[1], "get_alert_detail"))
    steps = [call("get_alert_detail", {"alert_id": ALICE_ALERT}), say("done")]
    env["AGENT_BACKEND_DEMO_TOKEN"] = "none"
    (tmp_path / "off").mkdir()
    async with backend_app(tmp_path / "off", steps, **env) as (base, fake):
        async with httpx.AsyncClient(timeout=10) as client:
            ready = (await client.get(f"{base}/readyz")).json()
        assert "AGENT_BACKEND_DEMO_TOKEN=none" in ready["checks"]["backend"]["auth"]
        await chat_without_auth(base, "Show that alert", "workflow", {})
        assert "HTTP 401" in str(last_result(sent(fake)[1], "get_alert_detail"))


async def test_an_empty_bearer_is_no_credential_and_calls_the_backend_as_demo_alice(tmp_path: Path) -> None:
    """Open WebUI with its API key left empty sends ``Authorization: Bearer`` and nothing
    after it: no token to forward, so the tools use the demo token as for no header
    (forwarded, every backend answers 401 and every workflow tool fails)."""
    steps = [call("get_alert_detail", {"alert_id": ALICE_ALERT}), say("done")]
    env = {"AGENT_AUTH": "none", "AGENT_MANDATORY_CONTEXTS": "none"}
    async with backend_app(tmp_path, steps, **env) as (base, fake):
        await chat_without_auth(base, "Show my alert", "workflow", {}, {"Authorization": "Bearer"})
        detail = last_result(sent(fake)[1], "get_alert_detail")
    assert ALICE_ALERT in str(detail) and "HTTP 401" not in str(detail)
