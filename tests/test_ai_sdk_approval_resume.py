"""A waiting approval after a reload, read by the ``ai`` package's own ``Chat``: a run parked
``waiting_approval`` is the chat's current turn, so ``GET /v1/agent/ui-stream/{id}/stream``
(what ``useChat({resume: true})`` calls on mount) replays it — the same approval parts the
live stream sent, the message ending on ``finish`` (``tool-calls``) as the live one does —
and ``addToolApprovalResponse`` on the resumed message carries the run on into it.
Before, the resume answered 204 as soon as the run parked: the approval was gone from a
reloaded page and could not be answered from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config import Settings
from tests.conftest import running_app
from tests.test_ai_sdk_stream import js, node, of, ui_body
from tests.test_approvals_faces import registry, scripted_clear
from tests.test_compat_faces_owners import bearer, env

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

CHAT = "chat-reload-approval"


def chunk_types(body: str) -> list[str]:
    return [orjson.loads(line[6:])["type"] for line in body.splitlines() if line.startswith("data: {")]


async def test_a_reloaded_chat_shows_the_waiting_approval_and_answers_it(node: str, tmp_path: Path) -> None:
    calls: list[dict[str, Any]] = []
    jwt = Settings.from_env(env(tmp_path))
    alice, bob = bearer("alice"), bearer("bob")
    async with running_app(jwt, provider=scripted_clear(), registry=registry(calls), embedder=None) as (base, app):
        body = ui_body(CHAT, "Clear the stock table.", context_type="workflow")
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            live = await http.post("/v1/agent/ui-stream", json=body, headers=alice)
            assert live.status_code == 200, live.text
            live_types = chunk_types(live.text)
            assert "tool-approval-request" in live_types and live_types[-1] == "finish"
            run_id = orjson.loads(next(line[6:] for line in live.text.splitlines() if '"start"' in line))["messageId"]
            stored = await app.state.services.run_store.get(run_id)
            assert stored is not None and stored.status == "waiting_approval"
            # Another user's chat of the same id is another chat: nothing to resume there.
            assert (await http.get(f"/v1/agent/ui-stream/{CHAT}/stream", headers=bob)).status_code == 204
            resumed = await http.get(f"/v1/agent/ui-stream/{CHAT}/stream", headers=alice)
        assert resumed.status_code == 200, resumed.text  # was 204
        # The parked run replayed: the live stream's approval parts, ended as it ended.
        assert chunk_types(resumed.text) == live_types

        # The page reloaded: a new Chat holding the user's message resumes, then approves.
        async with js(
            node, mode="chat", api=f"{base}/v1/agent/ui-stream", chatId=CHAT, headers=alice,
            messages=body["messages"], body={"context_type": "workflow"},
        ) as client:
            await client.send("resume")
            await client.until(lambda recs: of(recs, "state"), "the resumed stream to end")
            [shown] = of(client.records, "state")
            assert shown["status"] == "ready" and shown["error"] is None, shown
            [assistant] = [m for m in shown["messages"] if m["role"] == "assistant"]
            assert assistant["id"] == run_id and assistant["metadata"]["status"] == "waiting_approval"
            [tool] = [p for p in assistant["parts"] if p["type"] == "dynamic-tool"]
            assert tool["state"] == "approval-requested" and tool["input"] == {"table": "stock"}, tool
            assert calls == []
            await client.send("approve")
            await client.until(lambda recs: len(of(recs, "state")) == 2, "the approved run to end")
            records = await client.finish()
    assert not of(records, "error"), records
    [_, after] = of(records, "state")
    assert after["status"] == "ready" and after["error"] is None, after
    [assistant] = [m for m in after["messages"] if m["role"] == "assistant"]  # the same message, continued
    assert assistant["id"] == run_id
    [tool] = [p for p in assistant["parts"] if p["type"] == "dynamic-tool"]
    assert tool["state"] == "output-available", tool
    assert "Cleared it." in "".join(p["text"] for p in assistant["parts"] if p["type"] == "text")
    assert calls == [{"table": "stock"}]  # ran once, as decided from the reloaded page
