"""JSON routes take JSON only (``request_admission.read_json_body``): a body sent as
``text/plain`` (an HTML form's ``enctype``), a form, or with no ``Content-Type`` at all (a
``fetch`` of an untyped ``Blob``) is ``415 unsupported_media_type`` and starts nothing.

Those are the requests any web page may send a local server without a CORS preflight;
taking them as JSON let any page the developer visited start runs on ``make run``
(``AGENT_AUTH=none``) as the local user. Over a real uvicorn server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import collect_sse, names, running_app

CHAT = {"message": "hello there", "context_type": "workflow"}
RUN = "run_0123456789abcdef"


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_ADMIN_OPEN": "true",  # the admin routes reach their body in `none` mode
            "OLLAMA_HOST": "http://127.0.0.1:9",
        }
    )


def assert_not_json(response: httpx.Response, *, openai: bool = False) -> None:
    assert response.status_code == 415, response.text
    assert response.headers["accept"] == "application/json"
    body = response.json()
    code, detail = (body["error"]["code"], body["error"]["message"]) if openai else (body["error"], body["detail"])
    assert code == "unsupported_media_type"
    assert "Content-Type: application/json" in detail and "\n" not in detail


async def test_a_chat_not_sent_as_json_is_415_and_starts_no_run(settings: Settings) -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])] * 4)
    body = orjson.dumps(CHAT)
    async with running_app(settings, provider=provider, embedder=None) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as client:
        # An HTML form's text/plain post, and fetch(url, {mode: "no-cors", body: new Blob([json])}).
        plain = await client.post("/v1/agent/chat", content=body, headers={"Content-Type": "text/plain"})
        untyped = await client.post("/v1/agent/chat", content=body)
        assert "content-type" not in untyped.request.headers
        form = await client.post("/v1/agent/runs", data={"message": "hi", "context_type": "workflow"})
        for refused in (plain, untyped, form):
            assert_not_json(refused)
        assert "text/plain" in plain.json()["detail"] and "no Content-Type" in untyped.json()["detail"]
        assert provider.requests == []
        assert (await client.get("/v1/agent/runs")).json()["runs"] == []
        assert (await client.get("/v1/agent/conversations")).json()["conversations"] == []
        # The documented clients' types are served: application/json, with a charset too.
        for content_type in ("application/json", "application/json; charset=utf-8", "Application/JSON"):
            events = await collect_sse(client, "POST", "/v1/agent/chat", content=body,
                                       headers={"Content-Type": content_type})
            assert names(events)[0] == "run_started" and events[-1].json()["status"] == "completed"
        # An empty body without a type is what it was: 400, the body is empty.
        empty = await client.post("/v1/agent/chat")
        assert empty.status_code == 400 and empty.json()["error"] == "invalid_json"
    assert len(provider.requests) == 3


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/agent/runs", CHAT),
        ("POST", "/v1/agent/ui-stream", {"id": "chat-1", "trigger": "submit-message", "context_type": "workflow",
                                         "messages": [{"id": "m1", "role": "user",
                                                       "parts": [{"type": "text", "text": "hi"}]}]}),
        ("POST", f"/v1/agent/runs/{RUN}/approvals/call_1", {"decision": "approve"}),
        ("POST", f"/v1/agent/runs/{RUN}/feedback", {"score": 1}),
        ("PATCH", "/v1/agent/conversations/conv-1", {"title": "renamed"}),
        ("POST", "/v1/kb/documents", {"documents": [{"id": "d1", "title": "T", "text": "some text"}]}),
        ("POST", "/v1/admin/keywords/prune", {"min_usage": 1, "older_than_days": 0}),
        ("POST", "/v1/chat/completions", {"model": "agentchat-workflow",
                                          "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
async def test_every_json_route_refuses_a_body_not_sent_as_json(
    settings: Settings, method: str, path: str, body: dict[str, Any]
) -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])])
    raw = orjson.dumps(body)
    openai = path == "/v1/chat/completions"
    async with running_app(settings, provider=provider, embedder=None) as (base, _), \
            httpx.AsyncClient(base_url=base, timeout=30) as client:
        for headers in ({"Content-Type": "text/plain;charset=UTF-8"},
                        {"Content-Type": "application/x-www-form-urlencoded"}, {}):
            assert_not_json(await client.request(method, path, content=raw, headers=headers), openai=openai)
        assert provider.requests == []
        # The same body as JSON gets past the type (whatever the route then says of it).
        sent = await client.request(method, path, content=raw, headers={"Content-Type": "application/json"})
        assert sent.status_code != 415, sent.text
