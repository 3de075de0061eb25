"""``context.buckets`` names the knowledge-base buckets a run searches: an unknown name is
a 400 naming the buckets that exist, on every face that takes a context (native chat and
runs, OpenAI-compatible, AI SDK); a known name scopes the search.

The app runs the default configuration (provider and embedder ``auto``, a fresh database
with the sample knowledge base ingested into ``default``), so the known bucket list is
the one a newcomer's server has.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from tests.conftest import collect_sse, running_app

QUESTION = "How do I resume a stream after a disconnect?"


def defaults(tmp_path: Path) -> Settings:
    # Only the database is placed, and Ollama's address points at a closed port so the
    # machine's own services cannot change what `auto` finds.
    return Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.db"), "OLLAMA_HOST": "http://127.0.0.1:9"})


def ui_body(chat_id: str, context: dict[str, Any]) -> dict[str, Any]:
    message = {"id": "msg-1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}
    return {"id": chat_id, "messages": [message], "context_type": "knowledge", "context": context}


async def test_an_unknown_bucket_is_a_400_naming_the_known_buckets_on_every_face(tmp_path: Path) -> None:
    unknown = {"buckets": ["default", "handbook"]}
    native = {"message": QUESTION, "context_type": "knowledge", "context": unknown}
    async with running_app(defaults(tmp_path)) as (base, app):
        await app.state.services.rooms.knowledge.tasks[0]  # the sample KB is in
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            chat = await client.post("/v1/agent/chat", json=native)
            runs = await client.post("/v1/agent/runs", json=native)
            single = await client.post("/v1/agent/runs", json={**native, "context": {"bucket": "handbook"}})
            malformed = await client.post("/v1/agent/runs", json={**native, "context": {"buckets": 7}})
            openai = await client.post("/v1/chat/completions", json={
                "model": "agentchat-knowledge", "messages": [{"role": "user", "content": QUESTION}],
                "context": unknown,
            })
            ui = await client.post("/v1/agent/ui-stream", json=ui_body("chat-unknown-bucket", unknown))
            # Nothing was started for the refused AI SDK chat: no conversation, nothing to resume.
            ui_conversation = await client.get("/v1/agent/conversations/chat-unknown-bucket")
            ui_resume = await client.get("/v1/agent/ui-stream/chat-unknown-bucket/stream")
            # With earlier turns to import (a chat this server has not seen), still nothing is stored.
            with_history = ui_body("chat-history-unknown-bucket", unknown)
            with_history["messages"] = [
                {"id": "m0", "role": "user", "parts": [{"type": "text", "text": "Hello"}]},
                {"id": "m1", "role": "assistant", "parts": [{"type": "text", "text": "Hi."}]},
                *with_history["messages"],
            ]
            ui_history = await client.post("/v1/agent/ui-stream", json=with_history)
            ui_history_conversation = await client.get("/v1/agent/conversations/chat-history-unknown-bucket")
            oai_history = await client.post("/v1/chat/completions", json={
                "model": "agentchat-knowledge", "context": unknown, "conversation_id": "oai-history-unknown-bucket",
                "messages": [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi."},
                             {"role": "user", "content": QUESTION}],
            })
            oai_history_conversation = await client.get("/v1/agent/conversations/oai-history-unknown-bucket")
            # A bucket that exists scopes the search; `*` is every bucket.
            scoped = await collect_sse(client, "POST", "/v1/agent/chat",
                                       json={**native, "context": {"buckets": ["default"]}})
            everything = await client.post("/v1/agent/runs", json={**native, "context": {"buckets": ["*"]}})

    for refused in (chat, runs, single):
        assert refused.status_code == 400, refused.text
        body = refused.json()
        assert body["error"] == "unknown_bucket"
        assert "'handbook'" in body["detail"] and "available buckets: default" in body["detail"]
    assert chat.json()["detail"].startswith("context.buckets:")
    assert single.json()["detail"].startswith("context.bucket:")
    assert malformed.status_code == 400 and malformed.json()["error"] == "invalid_field"
    assert "context.buckets must be a bucket name or an array" in malformed.json()["detail"]
    assert openai.status_code == 400, openai.text
    error = openai.json()["error"]
    assert error["code"] == "unknown_bucket" and "available buckets: default" in error["message"]
    assert error["type"] == "invalid_request_error"
    assert ui.status_code == 400 and ui.json()["error"] == "unknown_bucket"
    assert ui_conversation.status_code == 404 and ui_resume.status_code == 204
    assert ui_history.status_code == 400 and ui_history_conversation.status_code == 404
    assert oai_history.status_code == 400 and oai_history_conversation.status_code == 404, oai_history.text

    response = next(e.json() for e in scoped if e.event == "response")
    assert response["sources"] and {s["metadata"].get("bucket") for s in response["sources"]} == {"default"}
    assert [e.json()["status"] for e in scoped if e.event == "message_complete"] == ["completed"]
    assert everything.status_code == 201, everything.text
