"""A question of only invisible characters is a 400 on every face, like one of only white
space: before, a message of zero-width spaces or control characters started a run that
the tools' argument checks (which strip those characters) then failed with
``mandatory_tool_missing`` - a failed run in the conversation, and a 500 on the OpenAI
face's non-streamed answer (``app/server/visible_text.py``)."""

from __future__ import annotations

import httpx
import pytest

from app.config import Settings
from app.server.visible_text import has_visible_text
from tests.conftest import running_app

INVISIBLE = ["\u200b", "\x00", "\x01\x07", "\u200b \u2060\ufeff", "\u202e\u200d\n"]


def test_what_counts_as_visible() -> None:
    assert not any(has_visible_text(m) for m in [*INVISIBLE, "", "  \t\n", "\u00a0"])
    assert all(has_visible_text(m) for m in ["a", "\u200bhi", "é", "数据", "🙂", "?", "\x00 0"])


@pytest.mark.parametrize("message", INVISIBLE)
async def test_an_invisible_question_is_a_400_on_every_face(settings: Settings, message: str) -> None:
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as client:
        native = await client.post("/v1/agent/chat", json={"message": message, "context_type": "knowledge"})
        assert native.status_code == 400, native.text
        assert native.json() == {
            "error": "invalid_field",
            "detail": "message must not be empty (it holds only white space or invisible characters)",
        }
        runs = await client.post("/v1/agent/runs", json={"message": message, "context_type": "knowledge"})
        assert (runs.status_code, runs.json()["error"]) == (400, "invalid_field"), runs.text

        openai = await client.post("/v1/chat/completions", json={
            "model": "agentchat-knowledge", "messages": [{"role": "user", "content": message}],
        })
        assert openai.status_code == 400, openai.text
        assert openai.json()["error"]["param"] == "messages"

        part = {"type": "text", "text": message}
        ui = await client.post("/v1/agent/ui-stream", json={
            "id": "chat-invisible", "messages": [{"id": "u1", "role": "user", "parts": [part]}],
        })
        assert (ui.status_code, ui.json()["error"]) == (400, "invalid_field"), ui.text
        # Nothing was started or stored.
        assert (await client.get("/v1/agent/conversations")).json()["conversations"] == []


async def test_a_question_with_invisible_characters_around_its_words_runs(settings: Settings) -> None:
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as client:
        body = {"message": "\u200bWhat is a bucket?\x00", "context_type": "knowledge"}
        started = await client.post("/v1/agent/runs", json=body)
        assert started.status_code == 201, started.text
