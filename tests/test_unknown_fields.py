"""A native JSON body with a member it does not have is a 400 ``unknown_field`` naming it
(and the known field it was probably meant to be), on every native route that reads a JSON
body — never ignored, which let a typo such as ``conversationId`` start a new conversation.
The OpenAI-compatible and AI SDK faces keep ignoring members they do not know. Over a real
server on a loopback port."""

from __future__ import annotations

from typing import Any

import httpx

from app.config import Settings
from app.factory import create_app
from client import AgentClient
from tests.conftest import collect_sse, running_app
from tests.test_openapi import built_document

ASK = {"message": "What is a bucket?", "context_type": "knowledge"}


def refused(response: httpx.Response, *unknown: str, suggest: dict[str, str] | None = None) -> str:
    """The 400 ``unknown_field`` naming ``unknown`` (and suggesting ``suggest``); its detail."""
    assert response.status_code == 400, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] == "unknown_field", body
    assert body["unknown_fields"] == list(unknown), body
    assert body.get("did_you_mean", {}) == (suggest or {}), body
    for name in unknown:
        assert repr(name) in body["detail"], body
    for meant in (suggest or {}).values():
        assert f"did you mean {meant}?" in body["detail"], body
    return str(body["detail"])


async def conversations(http: httpx.AsyncClient) -> list[str]:
    listed = (await http.get("/v1/agent/conversations")).json()["conversations"]
    return sorted(c["id"] for c in listed)


async def test_a_typo_in_a_run_body_is_refused_not_a_new_conversation(offline: Settings) -> None:
    async with running_app(offline) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        first = await http.post("/v1/agent/runs", json={**ASK, "conversation_id": "conv_kept"})
        assert first.status_code == 201, first.text
        await collect_sse(http, "GET", first.json()["stream_url"])
        assert await conversations(http) == ["conv_kept"]

        typo = await http.post("/v1/agent/runs", json={**ASK, "conversationId": "conv_kept"})
        detail = refused(typo, "conversationId", suggest={"conversationId": "conversation_id"})
        assert "the known fields are message, context_type, context, conversation_id, multitask, title" in detail
        refused(await http.post("/v1/agent/runs", json={"foo": 1}), "foo")  # before "message is required"
        refused(
            await http.post("/v1/agent/chat", json={"mesage": "hi", "context_types": "knowledge", "stream": True}),
            "mesage", "context_types", "stream",
            suggest={"mesage": "message", "context_types": "context_type"},
        )
        assert await conversations(http) == ["conv_kept"]  # nothing was started

        # The known fields still work, all of them (as the Python client sends them).
        async with AgentClient(base) as client:
            started = await client.start_run(
                "And a document?", "knowledge", {"page": "kb"}, "conv_kept", "enqueue", title="Buckets"
            )
        assert started.created and started.conversation_id == "conv_kept"


async def test_every_native_json_route_refuses_unknown_members(offline: Settings) -> None:
    async with running_app(offline) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        started = await http.post("/v1/agent/runs", json={**ASK, "conversation_id": "conv_one"})
        run_id = started.json()["run_id"]
        await collect_sse(http, "GET", started.json()["stream_url"])

        rename = await http.patch("/v1/agent/conversations/conv_one", json={"title": "Kept", "Title": "x"})
        refused(rename, "Title", suggest={"Title": "title"})
        feedback = await http.post(f"/v1/agent/runs/{run_id}/feedback", json={"score": 1, "coment": "good"})
        refused(feedback, "coment", suggest={"coment": "comment"})
        listed = (await http.get(f"/v1/agent/runs/{run_id}")).json()
        assert listed["feedback"] is None  # refused, not half-applied
        decision = {"decision": "approve", "args": {}}
        approval = await http.post(f"/v1/agent/runs/{run_id}/approvals/call_1", json=decision)
        refused(approval, "args")
        ingest = await http.post("/v1/kb/documents", json={"documents": [{"text": "A note."}], "buckets": "notes"})
        refused(ingest, "buckets", suggest={"buckets": "bucket"})
        listed_buckets = (await http.get("/v1/kb/buckets")).json()["buckets"]
        assert "notes" not in {b["name"] for b in listed_buckets}
        prune = await http.post("/v1/admin/keywords/prune", json={"min_usage": 1, "older_than_days": 1, "dry_run": 1})
        refused(prune, "dry_run")

        # Many unknown members: the first five named, the answer stays short.
        many = await http.post("/v1/agent/runs", json={**ASK, **{f"x{i}": i for i in range(50)}})
        assert "and 45 more" in refused(many, *(f"x{i}" for i in range(5)))

        # A document's own members are a record's, reported per document, not refused as a whole.
        record = await http.post("/v1/kb/documents", json={"documents": [{"text": "A note.", "tags": ["a"]}]})
        assert record.status_code == 200, record.text


async def test_the_compatible_faces_keep_ignoring_members_they_do_not_know(offline: Settings) -> None:
    async with running_app(offline) as (base, _), httpx.AsyncClient(base_url=base, timeout=60) as http:
        completion = await http.post(
            "/v1/chat/completions",
            json={
                "model": "agentchat-knowledge",
                "messages": [{"role": "user", "content": "What is a bucket?", "name": "ann"}],
                "parallel_tool_calls": True,
                "some_vendor_option": {"x": 1},
            },
        )
        assert completion.status_code == 200, completion.text
        ui = await collect_sse(
            http,
            "POST",
            "/v1/agent/ui-stream",
            json={
                "id": "chat_ignored",
                "trigger": "submit-message",
                "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": "What is a bucket?"}]}],
                "somethingElse": True,
            },
        )
        assert ui and ui[-1].data == "[DONE]"


def test_the_openapi_document_says_which_bodies_are_closed(offline: Settings) -> None:
    doc = built_document(create_app(offline))
    schemas = doc["components"]["schemas"]
    for name in ("ChatRequest", "RenameConversationRequest", "RunFeedbackRequest", "ApprovalDecision", "IngestRequest"):
        assert schemas[name]["additionalProperties"] is False, name
    prune = doc["paths"]["/v1/admin/keywords/prune"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert prune["additionalProperties"] is False
    assert "additionalProperties" not in schemas["ChatCompletionRequest"]  # the OpenAI face stays open
