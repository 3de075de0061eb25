"""One error order at the per-user run cap, on every face (``docs/http-api.md``): a
request with a fault of its own (an unknown bucket, a busy conversation under
``reject``) is answered that fault's 4xx first, and 429 ``too_many_runs`` only once the
request itself is right. The native faces learn the cap in the run's admission
transaction (no read before it, ``5e859c9``); the OpenAI-compatible and AI SDK faces
read it only just before they import a client's earlier turns, after the request's own
checks, so a refusal still leaves no imported history behind.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.test_limits import settings

QUESTION = "hi"
UNKNOWN = {"bucket": "no-such-bucket"}


def code(response: httpx.Response) -> tuple[int, str]:
    """``(status, error code)`` of a refusal, in the native or the OpenAI error shape."""
    error = response.json()["error"]
    return response.status_code, error["code"] if isinstance(error, dict) else error


def native(**fields: Any) -> dict[str, Any]:
    return {"message": QUESTION, "context_type": "knowledge", **fields}


def openai(**fields: Any) -> dict[str, Any]:
    """A completion request carrying earlier turns: the face imports them when it does not
    know the conversation."""
    messages = [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": QUESTION},
    ]
    return {"model": "agentchat-knowledge", "messages": messages, **fields}


def ui(chat_id: str, **fields: Any) -> dict[str, Any]:
    """An AI SDK request carrying earlier turns (imported for a chat not started here)."""
    messages = [
        {"id": "u0", "role": "user", "parts": [{"type": "text", "text": "first question"}]},
        {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "first answer"}]},
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]},
    ]
    return {"id": chat_id, "messages": messages, "context_type": "knowledge", **fields}


async def test_at_the_cap_every_face_answers_the_requests_own_fault_before_429(tmp_path: Path) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(steps=("a", gate)), GatedTurn(steps=("b",))])
    cap = settings(tmp_path, AGENT_MAX_RUNS_PER_USER="1")
    async with (
        running_app(cap, provider=provider, embedder=None) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as client,
    ):
        held = await client.post("/v1/agent/runs", json=native(conversation_id="busy"))
        assert held.status_code == 201, held.text
        await asyncio.wait_for(gate.reached.wait(), 10)  # the user is at the cap from here on
        try:
            # Two faults: at the cap, and a bucket that does not exist.
            bucket = {
                "chat": await client.post("/v1/agent/chat", json=native(context=UNKNOWN)),
                "runs": await client.post("/v1/agent/runs", json=native(context=UNKNOWN)),
                "openai": await client.post("/v1/chat/completions", json=openai(context=UNKNOWN)),
                "openai, named": await client.post(
                    "/v1/chat/completions", json=openai(context=UNKNOWN, conversation_id="oai-new")
                ),
                "ui": await client.post("/v1/agent/ui-stream", json=ui("ui-new", context=UNKNOWN)),
            }
            # Two faults: at the cap, and a conversation busy with the held run under reject.
            busy = {
                "chat": await client.post("/v1/agent/chat", json=native(conversation_id="busy", multitask="reject")),
                "runs": await client.post("/v1/agent/runs", json=native(conversation_id="busy", multitask="reject")),
                "openai": await client.post(
                    "/v1/chat/completions", json=openai(conversation_id="busy", multitask="reject")
                ),
                "ui": await client.post("/v1/agent/ui-stream", json=ui("busy", multitask="reject")),
            }
            # The request fixed: the cap is all that is left, on every face.
            fixed = {
                "chat": await client.post("/v1/agent/chat", json=native()),
                "runs": await client.post("/v1/agent/runs", json=native()),
                "openai": await client.post("/v1/chat/completions", json=openai()),
                "openai, busy one": await client.post("/v1/chat/completions", json=openai(conversation_id="busy")),
                "ui": await client.post("/v1/agent/ui-stream", json=ui("ui-fixed")),
            }
            left_behind = {
                chat_id: (await client.get(f"/v1/agent/conversations/{chat_id}")).status_code
                for chat_id in ("oai-new", "ui-new", "ui-fixed")
            }
        finally:
            gate.open()
    assert {face: code(r) for face, r in bucket.items()} == dict.fromkeys(bucket, (400, "unknown_bucket"))
    assert {face: code(r) for face, r in busy.items()} == dict.fromkeys(busy, (409, "conversation_busy"))
    assert {face: code(r) for face, r in fixed.items()} == dict.fromkeys(fixed, (429, "too_many_runs"))
    assert all(r.headers.get("retry-after") for r in fixed.values())
    assert left_behind == dict.fromkeys(left_behind, 404)  # no earlier turns imported by a refused request
