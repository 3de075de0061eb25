"""Issue 21 audit: the compatibility faces keep conversations their user's.

Two JWT users on one server. Alice chats through the Vercel AI SDK face; Bob names her
chat id on every path that reads or continues a conversation — the SDK's resume, a new
SDK message, the OpenAI face's ``X-Conversation-Id`` — and gets nothing of hers (the
resume looks like no chat; the others are 404), while Alice's own resume replays.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from app.config import Settings
from app.server.auth import sign_hs256
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

SECRET = "compat-owner-secret-0123456789ab"
CHAT = "chat-alice-1"


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


def ui_body(text: str) -> dict[str, object]:
    message = {"id": "msg-user-1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": CHAT, "messages": [message], "trigger": "submit-message", "messageId": None}


async def test_another_users_chat_is_not_read_nor_continued(tmp_path: Path) -> None:
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": SECRET,
    })
    alice, bob = bearer("alice"), bearer("bob")
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        async with http.stream("POST", "/v1/agent/ui-stream", json=ui_body("my medical leave"),
                               headers=alice) as r:
            assert r.status_code == 200
            body = (await r.aread()).decode()
        assert "[DONE]" in body
        assert await app.state.services.conversations.owner(CHAT) == "alice"

        mine = await http.get(f"/v1/agent/ui-stream/{CHAT}/stream", headers=alice)
        assert mine.status_code == 200 and mine.text  # her run, replayed
        theirs = await http.get(f"/v1/agent/ui-stream/{CHAT}/stream", headers=bob)
        assert theirs.status_code == 204 and theirs.text == ""  # looks like no chat at all

        continued = await http.post("/v1/agent/ui-stream", json=ui_body("and mine?"), headers=bob)
        assert continued.status_code == 404, continued.text

        completion = await http.post(
            "/v1/chat/completions",
            json={"model": "agentchat-knowledge", "messages": [{"role": "user", "content": "what did she ask?"}]},
            headers={**bob, "X-Conversation-Id": CHAT},
        )
        assert completion.status_code == 404, completion.text
        assert (await http.get(f"/v1/agent/conversations/{CHAT}", headers=bob)).status_code == 404
        messages = (await http.get(f"/v1/agent/conversations/{CHAT}", headers=alice)).json()["messages"]
        assert [m["role"] for m in messages][:1] == ["user"] and len(messages) >= 2  # nothing of Bob's added
        assert not any("and mine?" in str(m) or "what did she ask?" in str(m) for m in messages)
