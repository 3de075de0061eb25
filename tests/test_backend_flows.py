"""Workflow and table conversations end to end: the Ollama fake scripts the model, the
agent runs the real tools against the reference backend on loopback, and the client
reads previews off the real SSE stream."""

from __future__ import annotations

import copy
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from backend import create_backend_app
from backend.seed import ALERT_IDS, ALERTS, ALICE_ID, TABLE_CONFIG_IDS
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, names, running_app
from tests.fakes import FakeOllama, Text, ToolCall, running_fake

pytestmark = pytest.mark.slow  # workflow and table conversations end to end against the reference backend

Step = Callable[[dict[str, Any]], list[Any]]
SECRET = "s3cret-for-tests-only-0123456789"


def last_result(body: dict[str, Any], tool: str) -> dict[str, Any]:
    contents = [m["content"] for m in body["messages"] if m["role"] == "tool" and m.get("tool_name") == tool]
    return orjson.loads(contents[-1].removeprefix("ERROR: "))


def call(name: str, args: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]) -> Step:
    return lambda body: [ToolCall(name, args(body) if callable(args) else args)]


def say(text: str) -> Step:
    return lambda body: [Text(text)]


@asynccontextmanager
async def backend_app(tmp_path: Path, steps: list[Step], **env: str) -> AsyncIterator[tuple[str, FakeOllama]]:
    fake = FakeOllama([lambda body, s=s: s(body) for s in steps])
    async with running_fake(create_backend_app(tmp_path / "backend.db")) as backend_url, \
            running_fake(fake.app) as ollama_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_BACKEND_URL": backend_url,
            **env,
        })
        async with running_app(settings, provider=OllamaProvider(ollama_url, "llama3.2", timeout=10),
                               embedder=None) as (base, _):
            yield base, fake


async def chat(base: str, message: str, context_type: str, context: dict[str, Any], token: str = "demo-alice") -> list[Any]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "POST", f"{base}/v1/agent/chat", headers=headers,
                                 json={"message": message, "context_type": context_type, "context": context})


def sent(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if r.get("messages")]


def draft_id(body: dict[str, Any]) -> str:
    return str(last_result(body, "start_draft")["draft_id"])


async def test_guided_creation_through_drafts_with_the_mandatory_flow(tmp_path: Path) -> None:
    steps = [
        call("knowledge_base_search", {"query": "notify warehouse on new sales order workflow"}),
        call("start_draft", {"name": "Check stock on new orders", "entity": "sales.orders", "trigger_type": "on_create"}),
        call("add_draft_action", lambda b: {"draft_id": draft_id(b), "name": "Check", "action_type": "check_inventory",
                                            "action_config": {"threshold": 1}}),
        call("add_draft_action", lambda b: {"draft_id": draft_id(b), "name": "Mail", "action_type": "send_email",
                                            "action_config": {"recipients": ["ops@example.com"], "subject": "s", "body": "b"},
                                            "after": "Check"}),
        call("preview_draft", lambda b: {"draft_id": draft_id(b), "description": "Check stock, then mail ops"}),
        call("generate_response", {"answer": "I drafted the workflow; review the preview.", "sources": [],
                                   "used_internal_kb": False, "used_external_kb": False}),
    ]
    async with backend_app(tmp_path, steps) as (base, fake):
        events = await chat(base, "Create a workflow that checks stock when an order is created", "workflow",
                            {"is_new": True})
    order = names(events)
    assert events[-1].json()["status"] == "completed", [e.data for e in events if e.event == "error"]
    preview_at = order.index("workflow_preview")
    assert order[preview_at + 1] == "tool_call_result"
    preview = next(e.json() for e in events if e.event == "workflow_preview")
    assert preview["is_update"] is False and preview["description"] == "Check stock, then mail ops"
    wf = preview["workflow"]
    assert [a["name"] for a in wf["actions"]] == ["Check", "Mail"]
    assert sum(1 for e in wf["edges"] if e["edge_type"] == "start") == 1 and len(wf["edges"]) == 2
    # The model got the fixed preview_sent answer, not the workflow.
    assert last_result(sent(fake)[5], "preview_draft")["status"] == "preview_sent"
    core = next(e.json() for e in events if e.event == "tool_selection")["core"]
    assert {"start_draft", "add_draft_action", "preview_draft"} <= set(core)
    assert "response" in order


async def test_full_payload_preview_path(tmp_path: Path) -> None:
    workflow = {
        "name": "Notify on new order", "is_active": True, "entity": "sales.orders", "trigger_type": "on_create",
        "actions": [
            {"name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 1}, "is_active": True},
            {"name": "Mail", "action_type": "send_email", "is_active": True, "after": "Check",
             "action_config": {"recipients": ["ops@example.com"], "subject": "s", "body": "b"}},
        ],
        "edges": [],
    }
    steps = [call("preview_workflow", {"workflow": workflow, "description": "Mail ops on new orders"}),
             say("The preview is on your screen.")]
    async with backend_app(tmp_path, steps, AGENT_MANDATORY_CONTEXTS="none") as (base, _):
        events = await chat(base, "Mail ops when an order comes in", "workflow", {"is_new": True})
    preview = next(e.json() for e in events if e.event == "workflow_preview")
    assert preview["workflow"]["edges"] and all("after" not in a for a in preview["workflow"]["actions"])
    assert events[-1].json()["status"] == "completed"


async def test_apply_chain_then_table_config_preview(tmp_path: Path) -> None:
    cid = TABLE_CONFIG_IDS["open_sales_orders"]
    steps = [
        call("get_table_config", {}),
        call("apply_column_change", lambda b: {"config": last_result(b, "get_table_config")["config"],
                                               "operation": "add",
                                               "columns": [{"name": "promised_date", "pg_type": "date"}]}),
        call("apply_filter_change", lambda b: {"config": last_result(b, "apply_column_change")["config"],
                                               "operation": "add",
                                               "filter": {"column": "region", "operator": "eq", "value": "EU"}}),
        call("preview_table_config", lambda b: {"config": last_result(b, "apply_filter_change")["config"],
                                                "description_of_changes": "Promised date column, EU only"}),
        say("Here is the preview."),
    ]
    async with backend_app(tmp_path, steps, AGENT_MANDATORY_CONTEXTS="none") as (base, fake):
        events = await chat(base, "Add the promised date and only show EU orders", "tables", {"config_id": cid})
        # get_table_config was called without an id: the context's config_id was injected
        # on a copy, so the stored history still holds the model's own (empty) arguments.
        history = sent(fake)[1]["messages"]
        assert history[-2]["tool_calls"][0]["function"]["arguments"] == {}
    preview = next(e.json() for e in events if e.event == "table_config_preview")
    assert preview["config_id"] == cid and preview["is_update"] is True
    assert "promised_date" in orjson.dumps(preview["config"]).decode()
    assert events[-1].json()["status"] == "completed"


async def test_invalid_table_config_gives_validation_error_event(tmp_path: Path) -> None:
    def broken(body: dict[str, Any]) -> dict[str, Any]:
        cfg = copy.deepcopy(last_result(body, "get_table_config")["config"])
        cfg.pop("title")
        return {"config": cfg, "description_of_changes": "drop the title"}

    steps = [call("get_table_config", {"name": "open_sales_orders"}), call("preview_table_config", broken),
             say("The config is invalid; see the errors.")]
    async with backend_app(tmp_path, steps, AGENT_MANDATORY_CONTEXTS="none") as (base, _):
        events = await chat(base, "Remove the title", "tables", {})
    errors = next(e.json() for e in events if e.event == "table_config_validation_error")["errors"]
    assert "title: title is required" in errors
    assert "table_config_preview" not in names(events)


async def test_two_callers_cannot_see_each_others_drafts_or_alerts(tmp_path: Path) -> None:
    alice_alert = next(ALERT_IDS[a.key] for a in ALERTS if a.users == (ALICE_ID,))
    alice = sign_hs256({"sub": "alice", "exp": time.time() + 600}, SECRET)
    bob = sign_hs256({"sub": "bob", "exp": time.time() + 600}, SECRET)
    drafts: list[str] = []

    def remember(body: dict[str, Any]) -> list[Any]:
        drafts.append(draft_id(body))
        return [Text("Draft started.")]

    steps = [
        call("start_draft", {"name": "Alice's flow", "entity": "sales.orders", "trigger_type": "on_create"}),
        remember,
        call("get_alert_detail", {"alert_id": alice_alert}),
        say("ok"),
        call("add_draft_action", lambda b: {"draft_id": drafts[0], "name": "Check", "action_type": "check_inventory",
                                            "action_config": {"threshold": 1}}),
        call("get_alert_detail", {"alert_id": alice_alert}),
        say("Nothing I can see."),
    ]
    env = {"AGENT_MANDATORY_CONTEXTS": "none", "AGENT_AUTH": "jwt", "AGENT_JWT_SECRET": SECRET}
    async with backend_app(tmp_path, steps, **env) as (base, fake):
        await chat(base, "Start a draft", "workflow", {"is_new": True}, token=alice)
        own = await chat(base, "Show my alert", "workflow", {}, token=alice)
        assert [e.json()["is_error"] for e in own if e.event == "tool_call_result"] == [False]
        theirs = await chat(base, "Add a step to that draft, and show that alert", "workflow", {"is_new": True}, token=bob)
        results = [e.json() for e in theirs if e.event == "tool_call_result"]
        assert [(r["name"], r["is_error"]) for r in results] == [("add_draft_action", True), ("get_alert_detail", True)]
        assert "not found" in orjson.dumps(last_result(sent(fake)[5], "add_draft_action")).decode().lower()
        assert "HTTP 403" in orjson.dumps(last_result(sent(fake)[6], "get_alert_detail")).decode()
