"""The faces of an approval. The AI SDK face, read by the pinned ``ai`` package itself: a call that
needs approval becomes the SDK's own tool-approval parts (``tool-input-available`` with
the arguments, then ``tool-approval-request``), which the SDK's reader validates and
assembles into a dynamic tool part in state ``approval-requested``; a rejection becomes
``tool-output-denied`` (state ``output-denied``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ToolDefinition
from tests.conftest import running_app
from tests.test_ai_sdk_stream import js, node, of, ui_body
from tests.test_compat_faces_owners import bearer, env

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

SCHEMA = {"type": "object", "properties": {"table": {"type": "string"}}, "required": ["table"],
          "additionalProperties": False}
ALL = frozenset({"workflow", "tables", "knowledge"})


def registry(calls: list[dict[str, Any]]) -> ToolRegistry:
    reg = ToolRegistry([ToolSpec(ToolDefinition("clear_table", "Clears a table.", SCHEMA), ALL, asks_approval=True)])

    async def clear(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        calls.append(args)
        return ToolOutcome({"cleared": args["table"]})

    reg.set_handler("clear_table", clear)
    return reg


def dynamic_tool(records: list[dict[str, Any]]) -> dict[str, Any]:
    [message] = [r["message"] for r in of(records, "message")]
    [tool] = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    return tool  # type: ignore[no-any-return]


async def test_an_approval_is_the_sdks_own_approval_part_and_a_rejection_is_denied(
    node: str, settings: Settings
) -> None:
    provider = ScriptedProvider(
        lambda request, index: ScriptedTurn(calls=[ScriptedCall("clear_table", {"table": "stock"})])
        if index == 0 else ScriptedTurn(chunks=["Left it alone."])
    )
    calls: list[dict[str, Any]] = []
    async with running_app(settings, provider=provider, registry=registry(calls), embedder=None) as (base, _):
        body = ui_body("chat-approval", "Clear the stock table.", context_type="workflow")
        async with js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=body) as client:
            records = await client.finish()
        assert not of(records, "error"), records  # every chunk passed the SDK's schema
        waiting = dynamic_tool(records)
        assert waiting["state"] == "approval-requested", waiting
        assert waiting["input"] == {"table": "stock"}
        call_id = waiting["toolCallId"]
        assert waiting["approval"]["id"] == call_id
        [message] = [r["message"] for r in of(records, "message")]
        run_id = message["id"]

        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            r = await http.post(f"/v1/agent/runs/{run_id}/approvals/{call_id}", json={"decision": "reject"})
            assert r.status_code == 202, r.text
        url = f"{base}/v1/agent/ui-stream/chat-approval/stream"
        async with js(node, mode="reader", method="GET", url=url) as client:
            after = await client.finish()
    assert not of(after, "error"), after
    denied = dynamic_tool(after)
    assert denied["state"] == "output-denied", denied
    assert calls == []


async def test_the_openai_face_says_where_the_decision_goes(settings: Settings) -> None:
    """An OpenAI client cannot decide: the completion shows ``approval_required`` in its
    ``agentchat`` field and ends with an ``approval_required`` error naming the route
    (streamed), or answers 409 with it (not streamed); the run stays parked."""
    provider = ScriptedProvider(
        lambda request, index: ScriptedTurn(calls=[ScriptedCall("clear_table", {"table": "stock"})])
    )
    calls: list[dict[str, Any]] = []
    async with (
        running_app(settings, provider=provider, registry=registry(calls), embedder=None) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        body = {"model": "agentchat-workflow", "messages": [{"role": "user", "content": "Clear the stock table."}]}
        streamed = (await http.post("/v1/chat/completions", json={**body, "stream": True})).text
        plain = await http.post("/v1/chat/completions", json={**body, "messages": [
            {"role": "user", "content": "Clear the orders table."}]})
        frames = [orjson.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
        assert [f["agentchat"]["event"] for f in frames if "agentchat" in f][-1] == "approval_required"
        error = frames[-1]["error"]
        assert error["code"] == "approval_required" and "/approvals/" in error["message"]
        assert streamed.rstrip().endswith("data: [DONE]")
        assert plain.status_code == 409 and plain.json()["error"]["code"] == "approval_required"
        run_id = error["message"].split("/v1/agent/runs/")[1].split("/")[0]
        stored = await app.state.services.run_store.get(run_id)
        assert stored is not None and stored.status == "waiting_approval"
    assert calls == []


def scripted_clear() -> ScriptedProvider:
    return ScriptedProvider(
        lambda request, index: ScriptedTurn(calls=[ScriptedCall("clear_table", {"table": "stock"})])
        if index == 0 else ScriptedTurn(chunks=["Cleared it."])
    )


async def test_use_chats_own_approval_response_carries_the_run_on(node: str, settings: Settings) -> None:
    """``addToolApprovalResponse`` in the ``ai`` package's own Chat: the reply it sends by
    itself (the assistant message's tool part in ``approval-responded``) is the decision,
    the tool runs once, and the continued run streams into the same message."""
    calls: list[dict[str, Any]] = []
    async with running_app(settings, provider=scripted_clear(), registry=registry(calls), embedder=None) as (base, _):
        async with js(
            node, mode="chat", api=f"{base}/v1/agent/ui-stream", chatId="chat-sdk-approve",
            text="Clear the stock table.", body={"context_type": "workflow"},
        ) as client:
            await client.until(lambda recs: of(recs, "state"), "the run to park")
            [parked] = of(client.records, "state")
            assert parked["status"] == "ready", parked
            assert calls == []
            await client.send("approve looks right")
            await client.until(lambda recs: len(of(recs, "state")) == 2, "the approved run to end")
            records = await client.finish()
        [_, after] = of(records, "state")
        assert after["status"] == "ready" and after["error"] is None, after
        [assistant] = [m for m in after["messages"] if m["role"] == "assistant"]
        [tool] = [p for p in assistant["parts"] if p["type"] == "dynamic-tool"]
        assert tool["state"] == "output-available", tool
        assert "Cleared it." in "".join(p["text"] for p in assistant["parts"] if p["type"] == "text")
        assert calls == [{"table": "stock"}]  # executed exactly once

        # The same reply again (a second decision) is 409, and nothing runs again.
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            approval = {"id": tool["toolCallId"], "approved": True}
            responded = {**tool, "state": "approval-responded", "approval": approval}
            replay = ui_body("chat-sdk-approve", "Clear the stock table.", context_type="workflow")
            replay["messages"] = [*replay["messages"], {**assistant, "parts": [responded]}]
            again = await http.post("/v1/agent/ui-stream", json=replay)
            assert again.status_code == 409, again.text
    assert calls == [{"table": "stock"}]


async def test_a_sdk_rejection_and_another_users_reply(node: str, tmp_path: Path) -> None:
    """A rejection through ``addToolApprovalResponse`` is denied, the tool never runs; the
    same reply from another JWT user is 404 and decides nothing."""
    jwt_settings = Settings.from_env(env(tmp_path))
    calls: list[dict[str, Any]] = []
    async with running_app(jwt_settings, provider=scripted_clear(), registry=registry(calls), embedder=None) as (
        base, _):
        alice, mallory = bearer("alice"), bearer("mallory")
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            first = await http.post("/v1/agent/ui-stream", headers=alice,
                                    json=ui_body("chat-sdk-reject", "Clear the stock table.", context_type="workflow"))
            assert first.status_code == 200
            chunks = [orjson.loads(line[6:]) for line in first.text.splitlines()
                      if line.startswith("data: {")]
            [start] = [c for c in chunks if c["type"] == "start"]
            [ask] = [c for c in chunks if c["type"] == "tool-approval-request"]
            assistant = {"id": start["messageId"], "role": "assistant", "metadata": start["messageMetadata"],
                         "parts": [{"type": "dynamic-tool", "toolName": "clear_table", "toolCallId": ask["toolCallId"],
                                    "state": "approval-responded", "input": {"table": "stock"},
                                    "approval": {"id": ask["approvalId"], "approved": False, "reason": "not now"}}]}
            reply = {**ui_body("chat-sdk-reject", "Clear the stock table.", context_type="workflow")}
            reply["messages"] = [*reply["messages"], assistant]
            stranger = await http.post("/v1/agent/ui-stream", headers=mallory, json=reply)
            assert stranger.status_code == 404, stranger.text
            denied = await http.post("/v1/agent/ui-stream", headers=alice, json=reply)
            assert denied.status_code == 200, denied.text
            kinds = [orjson.loads(line[6:])["type"] for line in denied.text.splitlines() if line.startswith("data: {")]
            assert "tool-output-denied" in kinds and kinds[-1] == "finish", kinds
            assert "tool-input-start" not in kinds  # the client holds the call's part already
            bad = {**reply, "messages": [*reply["messages"][:-1], {**assistant, "parts": [
                {**assistant["parts"][0], "approval": {"id": ask["approvalId"]}}]}]}
            assert (await http.post("/v1/agent/ui-stream", headers=alice, json=bad)).status_code == 400
    assert calls == []
