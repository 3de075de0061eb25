"""Issue 21: conversation ids are a namespace per user, on every face.

Two JWT users on one server choose the same conversation id — the AI SDK chat id, the
OpenAI face's ``X-Conversation-Id``, the native chat's and runs' ``conversation_id``.
Neither blocks the other (every request is answered, none is 404), each reads only
their own messages (``GET /v1/agent/conversations/{id}``) and each one's SDK resume
replays only their own runs. ``scenario`` runs the same story over PostgreSQL in
``tests/storage/test_conversations_per_user_app.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.config import Settings
from app.server.auth import sign_hs256
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

SECRET = "compat-owner-secret-0123456789ab"
CHAT = "chat-shared-1"


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


def ui_body(text: str) -> dict[str, object]:
    message = {"id": f"msg-{abs(hash(text))}", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": CHAT, "messages": [message], "trigger": "submit-message", "messageId": None}


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": SECRET,
        **extra,
    }


def run_ids_in(body: str) -> set[str]:
    """The run ids an SSE or UI stream body names (``run_id`` fields of its JSON data)."""
    out: set[str] = set()
    for line in body.splitlines():
        if line.startswith("data: {"):
            data: Any = orjson.loads(line[6:])
            for d in (data, data.get("messageMetadata") or {}):
                if isinstance(d, dict) and isinstance(d.get("run_id"), str):
                    out.add(d["run_id"])
    return out


async def stream_text(http: httpx.AsyncClient, method: str, url: str, **kw: Any) -> tuple[int, str]:
    async with http.stream(method, url, **kw) as r:
        return r.status_code, (await r.aread()).decode()


async def one_user_turns(http: httpx.AsyncClient, name: str) -> tuple[list[str], set[str]]:
    """``name`` speaks in conversation ``CHAT`` on every face; returns the questions sent
    and the run ids that answered them."""
    head, runs = bearer(name), set()
    asked = [f"{name} on the sdk", f"{name} on openai", f"{name} on chat", f"{name} on runs"]
    status, body = await stream_text(http, "POST", "/v1/agent/ui-stream", json=ui_body(asked[0]), headers=head)
    assert status == 200 and "[DONE]" in body, body
    runs |= run_ids_in(body)
    completion = await http.post(
        "/v1/chat/completions",
        json={"model": "agentchat-knowledge", "messages": [{"role": "user", "content": asked[1]}]},
        headers={**head, "X-Conversation-Id": CHAT},
    )
    assert completion.status_code == 200, completion.text
    assert completion.headers["X-Conversation-Id"] == CHAT
    runs.add(completion.headers["X-Run-Id"])
    native = {"message": asked[2], "context_type": "knowledge", "conversation_id": CHAT}
    status, body = await stream_text(http, "POST", "/v1/agent/chat", json=native, headers=head)
    assert status == 200 and "message_complete" in body, body
    runs |= run_ids_in(body)
    started = await http.post("/v1/agent/runs", json={**native, "message": asked[3]}, headers=head)
    assert started.status_code == 201, started.text
    assert started.json()["conversation_id"] == CHAT
    run_id = started.json()["run_id"]
    status, body = await stream_text(http, "GET", f"/v1/agent/runs/{run_id}/events", headers=head)
    assert status == 200 and "message_complete" in body
    runs.add(run_id)
    return asked, runs


async def scenario(settings: Settings, engine: str = "sqlite") -> None:
    alice, bob = bearer("alice"), bearer("bob")
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        assert app.state.services.storage.engine == engine
        # Bob has no chat of that id yet: his resume is a 204 and his read a 404.
        assert (await http.get(f"/v1/agent/conversations/{CHAT}", headers=bob)).status_code == 404
        alice_asked, alice_runs = await one_user_turns(http, "alice")
        resumed = await http.get(f"/v1/agent/ui-stream/{CHAT}/stream", headers=bob)
        assert resumed.status_code == 204 and resumed.text == ""
        assert (await http.get(f"/v1/agent/conversations/{CHAT}", headers=bob)).status_code == 404
        # ...then he uses the same id on every face, unblocked.
        bob_asked, bob_runs = await one_user_turns(http, "bob")
        assert len(alice_runs) == 4 and len(bob_runs) == 4 and not alice_runs & bob_runs
        await app.state.services.storage.db.flush()

        for head, asked, other in ((alice, alice_asked, bob_asked), (bob, bob_asked, alice_asked)):
            got = await http.get(f"/v1/agent/conversations/{CHAT}", headers=head)
            assert got.status_code == 200 and got.json()["conversation_id"] == CHAT
            users = [m["content"] for m in got.json()["messages"] if m["role"] == "user" and m.get("content")]
            assert users == asked, users  # every turn of theirs, in order, and nothing of the other's
            assert not any(text in str(got.json()) for text in other)
        for head, mine, theirs in ((alice, alice_runs, bob_runs), (bob, bob_runs, alice_runs)):
            status, body = await stream_text(http, "GET", f"/v1/agent/ui-stream/{CHAT}/stream", headers=head)
            assert status == 200 and run_ids_in(body) and run_ids_in(body) <= mine, body[:300]
            assert not run_ids_in(body) & theirs
            # The other user's runs of "the same" conversation stay invisible.
            other_run = sorted(theirs)[0]
            assert (await http.get(f"/v1/agent/runs/{other_run}/events", headers=head)).status_code == 404


async def test_two_users_share_an_id_on_every_face_and_never_meet(tmp_path: Path) -> None:
    await scenario(Settings.from_env(env(tmp_path)))
