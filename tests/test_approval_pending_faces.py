"""A new message in a conversation whose run waits for an approval, on every face: 409
``approval_pending`` naming the waiting run, the call (its ``tool_use_id`` and tool) and
the decision route — not a run queued behind the parked one for as long as the approval
lives (``AGENT_APPROVAL_TTL_S``, a day by default), which a chat showed as ``start`` then
pings only. Nothing of the refused message is stored. ``multitask: "interrupt"`` moves on
(the waiting run ends ``cancelled``, the tool never runs); another JWT user's
conversation of the same id is another conversation, not refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ChatRequest
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_ai_sdk_stream import js, node, of, ui_body
from tests.test_approvals_faces import registry
from tests.test_compat_faces_owners import bearer, env

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

ALICE, BOB = bearer("alice"), bearer("bob")


def clears_when_asked(request: ChatRequest, index: int) -> ScriptedTurn:
    """A question about clearing asks for ``clear_table`` (which waits for an approval);
    anything else is answered."""
    last = request.messages[-1]
    if last.role == "user" and not last.tool_results and "Clear" in last.content:
        return ScriptedTurn(calls=[ScriptedCall("clear_table", {"table": "stock"})])
    return ScriptedTurn(chunks=["Done."])


@asynccontextmanager
async def served(tmp_path: Path, calls: list[dict[str, Any]]) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    jwt = Settings.from_env(env(tmp_path))
    reg: ToolRegistry = registry(calls)
    async with (
        running_app(jwt, provider=ScriptedProvider(clears_when_asked), registry=reg, embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        yield http, app


def assert_pending(body: dict[str, Any], run_id: str) -> None:
    assert body["run_id"] == run_id and body["tool_name"] == "clear_table", body
    assert body["decide_url"] == f"/v1/agent/runs/{run_id}/approvals/{body['tool_use_id']}"
    assert body["tool_use_id"] and "clear_table" in str(body.get("detail") or body.get("message"))


async def status_of(app: Any, run_id: str) -> str:
    stored = await app.state.services.run_store.get(run_id)
    return str(stored.status)


async def conversation_runs(app: Any, user: str, conversation_id: str) -> list[str]:
    runs = await app.state.services.storage.history.list_runs(user, conversation_id=conversation_id, limit=50)
    return [r.id for r in runs]


async def parked_native(http: httpx.AsyncClient, conversation_id: str) -> str:
    r = await http.post("/v1/agent/runs", headers=ALICE, json={
        "message": "Clear the stock table.", "context_type": "workflow", "conversation_id": conversation_id})
    assert r.status_code == 201, r.text
    events = (await http.get(r.json()["stream_url"], headers=ALICE)).text
    assert "event: approval_required" in events and "message_complete" not in events
    return str(r.json()["run_id"])


@pytest.mark.parametrize("policy", [None, "enqueue", "reject"])
async def test_native_a_new_message_is_refused_naming_the_waiting_call(tmp_path: Path, policy: str | None) -> None:
    calls: list[dict[str, Any]] = []
    async with served(tmp_path, calls) as (http, app):
        run_id = await parked_native(http, "conv-pending")
        extra = {} if policy is None else {"multitask": policy}
        ask = {"message": "What else?", "context_type": "workflow", "conversation_id": "conv-pending", **extra}
        for route in ("/v1/agent/runs", "/v1/agent/chat"):
            r = await http.post(route, headers=ALICE, json=ask)
            assert r.status_code == 409, r.text
            body = r.json()
            assert body["error"] == "approval_pending"
            assert_pending(body, run_id)
        assert await conversation_runs(app, "alice", "conv-pending") == [run_id]  # nothing stored
        assert await status_of(app, run_id) == "waiting_approval"
        # Bob's conversation of that id is his own: his message runs.
        r = await http.post("/v1/agent/runs", headers=BOB, json=ask)
        assert r.status_code == 201, r.text
    assert calls == []


async def test_native_interrupt_moves_on_and_a_decision_frees_the_conversation(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    async with served(tmp_path, calls) as (http, app):
        first = await parked_native(http, "conv-moves-on")
        r = await http.post("/v1/agent/runs", headers=ALICE, json={
            "message": "Never mind.", "context_type": "workflow", "conversation_id": "conv-moves-on",
            "multitask": "interrupt"})
        assert r.status_code == 201, r.text
        events = (await http.get(r.json()["stream_url"], headers=ALICE)).text
        assert '"status":"completed"' in events
        assert await status_of(app, first) == "cancelled"

        # Decided, the waiting run goes on; the next message is admitted again.
        second = await parked_native(http, "conv-decided")
        tool_use_id = (await http.post("/v1/agent/runs", headers=ALICE, json={
            "message": "And?", "context_type": "workflow", "conversation_id": "conv-decided"})).json()["tool_use_id"]
        decided = await http.post(f"/v1/agent/runs/{second}/approvals/{tool_use_id}", headers=ALICE,
                                  json={"decision": "approve"})
        assert decided.status_code == 202, decided.text
        assert '"status":"completed"' in (await http.get(decided.json()["stream_url"])).text
        r = await http.post("/v1/agent/runs", headers=ALICE, json={
            "message": "And?", "context_type": "workflow", "conversation_id": "conv-decided"})
        assert r.status_code == 201, r.text
    assert calls == [{"table": "stock"}]


async def test_ai_sdk_a_new_message_is_refused_and_use_chat_shows_why(node: str, tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    jwt = Settings.from_env(env(tmp_path))
    async with running_app(jwt, provider=ScriptedProvider(clears_when_asked), registry=registry(calls),
                           embedder=None) as (base, app):
        body = ui_body("chat-pending", "Clear the stock table.", context_type="workflow")
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            live = await http.post("/v1/agent/ui-stream", headers=ALICE, json=body)
        chunks = [orjson.loads(line[6:]) for line in live.text.splitlines() if line.startswith("data: {")]
        [start] = [c for c in chunks if c["type"] == "start"]
        run_id = start["messageId"]
        assert any(c["type"] == "tool-approval-request" for c in chunks)
        assistant = {"id": run_id, "role": "assistant", "metadata": start["messageMetadata"], "parts": [
            {"type": "dynamic-tool", "toolName": "clear_table", "toolCallId": "x", "state": "approval-requested",
             "input": {"table": "stock"}, "approval": {"id": "x"}}]}
        # The ai package's own Chat, holding that chat, sends a new message.
        async with js(
            node, mode="chat", api=f"{base}/v1/agent/ui-stream", chatId="chat-pending", headers=ALICE,
            messages=[*body["messages"], assistant], text="What else?", body={"context_type": "workflow"},
        ) as client:
            records = await client.finish()
        [state] = of(records, "state")
        assert state["status"] == "error", state
        shown = orjson.loads(state["error"])  # the SDK's error message is the answer's body
        assert shown["error"] == "approval_pending"
        assert_pending(shown, run_id)
        assert await conversation_runs(app, "alice", "chat-pending") == [run_id]
        assert await status_of(app, run_id) == "waiting_approval"
    assert calls == []


async def test_openai_a_new_message_is_refused_naming_the_waiting_call(tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    async with served(tmp_path, calls) as (http, app):
        headers = {**ALICE, "X-Conversation-Id": "conv-oai-pending"}
        first = {"model": "agentchat-workflow", "messages": [{"role": "user", "content": "Clear the stock table."}]}
        parked = await http.post("/v1/chat/completions", headers=headers, json=first)
        assert parked.status_code == 409 and parked.json()["error"]["code"] == "approval_required", parked.text
        run_id = parked.headers["X-Run-Id"]
        then = {**first, "messages": [*first["messages"], {"role": "user", "content": "What else?"}]}
        for stream in (False, True):
            r = await http.post("/v1/chat/completions", headers=headers, json={**then, "stream": stream})
            assert r.status_code == 409, r.text
            error = r.json()["error"]
            assert error["code"] == "approval_pending" and error["type"] == "invalid_request_error"
            assert_pending(error, run_id)
        assert await conversation_runs(app, "alice", "conv-oai-pending") == [run_id]
        assert await status_of(app, run_id) == "waiting_approval"
    assert calls == []


async def test_a_message_queued_before_the_run_parks_ends_approval_pending(tmp_path: Path) -> None:
    """A message queued (``enqueue``) while the run ahead was still running, which then
    parks for an approval: it does not run ahead of that turn (before: it ran at once and
    completed while the earlier run waited) nor wait for the decision. It ends
    ``cancelled`` with an ``approval_pending`` error naming the waiting run (the OpenAI face:
    409), its message not in the conversation; the waiting run stays waiting."""
    gate = Gate()

    def turn(request: ChatRequest, index: int) -> GatedTurn:
        last = request.messages[-1]
        if last.role == "user" and not last.tool_results and "Clear" in last.content:
            return GatedTurn([gate], calls=[ScriptedCall("clear_table", {"table": "stock"})])
        return GatedTurn(["Done."])

    calls: list[dict[str, Any]] = []
    jwt = Settings.from_env(env(tmp_path))
    async with (
        running_app(jwt, provider=GatedProvider(turn), registry=registry(calls), embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        first = await http.post("/v1/agent/runs", headers=ALICE, json={
            "message": "Clear the stock table.", "context_type": "workflow", "conversation_id": "conv-queued"})
        await within(gate.reached.wait(), "the first run to reach its gate")
        queued = await http.post("/v1/agent/runs", headers=ALICE, json={
            "message": "What else?", "context_type": "workflow", "conversation_id": "conv-queued"})
        assert queued.status_code == 201, queued.text
        oai = asyncio.create_task(http.post("/v1/chat/completions", headers={
            **ALICE, "X-Conversation-Id": "conv-queued"}, json={
            "model": "agentchat-workflow", "messages": [{"role": "user", "content": "And then?"}]}))
        await within(until_runs(app, "conv-queued", 3), "the OpenAI request's run to be queued")
        gate.open()
        run_id = first.json()["run_id"]
        assert "approval_required" in (await http.get(first.json()["stream_url"], headers=ALICE)).text
        events = (await http.get(queued.json()["stream_url"], headers=ALICE)).text
        assert '"code":"approval_pending"' in events and run_id in events, events
        assert '"status":"cancelled"' in events
        completion = await within(oai, "the OpenAI answer")
        assert completion.status_code == 409 and completion.json()["error"]["code"] == "approval_pending"
        assert await status_of(app, run_id) == "waiting_approval"
        history = await app.state.services.conversations.load("conv-queued", "alice")
        assert [m.content for m in history if m.role == "user"] == ["Clear the stock table."]
    assert calls == []


async def until_runs(app: Any, conversation_id: str, n: int) -> None:
    while len(await conversation_runs(app, "alice", conversation_id)) < n:
        await asyncio.sleep(0.02)
