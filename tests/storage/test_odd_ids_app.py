"""Ids no run or conversation can have (a NUL, a control character) are a 4xx on every
route that reads one, on both engines — never a 500. On PostgreSQL a NUL in a text
parameter is an error of the driver, not "no such row": before, ``GET
/v1/agent/runs/%00`` (and its events, cancel, feedback, approvals, ``GET
/v1/agent/conversations/%00``, an AI SDK approval reply or an edit naming such a run,
a page cursor naming such an id) answered 500 to any signed-in user. Two JWT users
over a real server: the owner's run still answers its owner, and the other user still
gets the 404 an unknown run gets."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import httpx
import orjson

from app.config import Settings
from app.server.auth import sign_hs256
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app

SECRET = "odd-ids-secret-0123456789abcdef"
ODD = ["run_%00", "%00", "a%01b", "run_x%0A"]


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


def ui_turn(chat: str, run_id: str, part: dict[str, object]) -> dict[str, object]:
    """An AI SDK request whose assistant message names ``run_id`` (its metadata and its id)."""
    return {
        "id": chat,
        "trigger": "submit-message",
        "context_type": "knowledge",
        "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "What is a bucket?"}]},
            {"id": run_id, "role": "assistant", "metadata": {"run_id": run_id}, "parts": [part]},
            {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "and a document?"}]},
        ],
    }


async def test_ids_no_run_can_have_are_4xx_on_both_engines(shared_db: dict[str, str], tmp_path: Path) -> None:
    settings = Settings.from_env(
        {
            **shared_db,
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "none",
            "AGENT_LLM_PROVIDER": "extractive",
            "OLLAMA_HOST": "http://127.0.0.1:9",
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_SECRET": SECRET,
        }
    )
    alice, bob = bearer("alice"), bearer("bob")
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, _app),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        started = await http.post(
            "/v1/agent/runs", json={"message": "What is a bucket?", "context_type": "knowledge"}, headers=alice
        )
        assert started.status_code == 201, started.text
        run_id, chat = started.json()["run_id"], started.json()["conversation_id"]
        async with http.stream("GET", started.json()["stream_url"]) as stream:
            assert stream.status_code == 200 and "message_complete" in (await stream.aread()).decode()

        for odd in ODD:
            answers = {
                "run": await http.get(f"/v1/agent/runs/{odd}", headers=alice),
                "events": await http.get(f"/v1/agent/runs/{odd}/events", headers=alice),
                "cancel": await http.post(f"/v1/agent/runs/{odd}/cancel", headers=alice),
                "feedback": await http.post(f"/v1/agent/runs/{odd}/feedback", json={"score": 1}, headers=alice),
                "decide": await http.post(
                    f"/v1/agent/runs/{odd}/approvals/call_1", json={"decision": "approve"}, headers=alice
                ),
                "conversation": await http.get(f"/v1/agent/conversations/{odd}", headers=alice),
            }
            for route, answer in answers.items():
                assert answer.status_code == 404, (odd, route, answer.status_code, answer.text)
                assert answer.json()["error"] == "not_found", (odd, route, answer.text)

        # A page cursor is the client's to send back: one naming no id is refused as any forged one.
        for route in ("/v1/agent/conversations", "/v1/agent/runs"):
            for ident in ("a\x00b", "x\n"):
                cursor = base64.urlsafe_b64encode(orjson.dumps([1e12, ident])).decode().rstrip("=")
                paged = await http.get(route, params={"cursor": cursor}, headers=alice)
                assert paged.status_code == 400 and paged.json()["error"] == "invalid_cursor", (route, paged.text)

        # The AI SDK face reads run ids from the client's messages.
        bad = "run_\x00x"
        approval = {
            "type": "tool-clear_table",
            "toolCallId": "call_1",
            "state": "approval-responded",
            "approval": {"id": "call_1", "approved": True},
        }
        body = ui_turn(chat, bad, approval)
        body["messages"] = body["messages"][:2]  # the approval reply ends on the assistant's message
        reply = await http.post("/v1/agent/ui-stream", json=body, headers=alice)
        assert reply.status_code == 404, reply.text
        edit = ui_turn(chat, bad, {"type": "text", "text": "an answer"})
        edit["messageId"] = "u2"
        edited = await http.post("/v1/agent/ui-stream", json=edit, headers=alice)
        assert edited.status_code == 400 and edited.json()["error"] == "invalid_field", edited.text

        # Well-formed ids: the owner's run is hers, and another user's reads as unknown.
        assert (await http.get(f"/v1/agent/runs/{run_id}", headers=alice)).status_code == 200
        for path in (f"/v1/agent/runs/{run_id}", f"/v1/agent/conversations/{chat}"):
            assert (await http.get(path, headers=bob)).status_code == 404, path
        assert (await http.post(f"/v1/agent/runs/{run_id}/cancel", headers=bob)).status_code == 404
