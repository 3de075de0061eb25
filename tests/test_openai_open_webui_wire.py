"""The OpenAI-compatible face takes what Open WebUI sends, byte for byte as its source
builds it, through a live server (real uvicorn on loopback, the offline extractive
answerer over a small knowledge base).

The README says Open WebUI works as LibreChat and the OpenAI SDKs do; these requests are
the ones Open WebUI's backend makes to an "OpenAI API" connection
(``backend/open_webui/routers/openai.py`` and ``routers/tasks.py`` in open-webui/open-webui):

- ``GET {base}/models`` with ``Authorization: Bearer <key>`` only when a key is set, and,
  with ``ENABLE_FORWARD_USER_INFO_HEADERS``, the ``X-OpenWebUI-User-*`` headers; it reads
  ``data`` and each model's ``id`` (``name`` defaults to it).
- ``POST {base}/chat/completions`` with ``Content-Type: application/json``, ``Authorization:
  Bearer <key>`` - sent with an empty key too by releases that always set it (the server
  reads ``Bearer``: a header value's trailing space is not part of it) - and the
  ``X-OpenWebUI-*`` headers (``X-OpenWebUI-Chat-Id`` among them). The body: ``model``,
  ``stream``, ``messages`` (the user's system prompt first, the whole transcript resent
  each turn, the assistant turns as they were shown), ``stream_options: {include_usage:
  true}`` when streaming (the frontend adds it for a model with the usage capability; some
  releases always), and the chat's advanced parameters when the user set them
  (``temperature``, ``top_p``, ``seed``, ``stop`` as a list...).
- Its background tasks (title, tags, follow-ups, queries) ask the same model, not
  streamed, one user message with the task's prompt; the title's carries
  ``max_completion_tokens: 1000``, which its router renames ``max_tokens`` for a server
  other than api.openai.com in some releases and not in others.

The stream is read the way Open WebUI's middleware reads it: ``data:`` lines up to
``[DONE]``, a chunk without choices carries ``usage``, ``choices[0].delta.content`` is
the text, and an extra top-level field (``agentchat``) is not looked at.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from agenttools.core.catalog import CONTEXT_TYPES
from app.config import Settings
from tests.conftest import running_app

DOCS = [
    {
        "id": "doc-refunds",
        "title": "Refunds",
        "text": "Refunds are paid back to the original card. A refund takes five business days to arrive.",
    },
]
MODEL = "agentchat-knowledge"
#: The headers Open WebUI adds with ENABLE_FORWARD_USER_INFO_HEADERS (the name URL-quoted, spaces kept).
USER_INFO = {
    "X-OpenWebUI-User-Name": "Jane Doe",
    "X-OpenWebUI-User-Id": "8d6f0c1e-1c1b-4c59-9d4b-2b0e4f1f1a11",
    "X-OpenWebUI-User-Email": "jane@example.com",
    "X-OpenWebUI-User-Role": "user",
}
#: A chat request's headers: the key may be empty (``Bearer `` on the wire, ``Bearer`` read).
CHAT_HEADERS = {
    "Content-Type": "application/json",
    "Authorization": "Bearer",
    **USER_INFO,
    "X-OpenWebUI-Chat-Id": "5f0e3a5c-7d3e-4d8c-9a41-6a3c1f0b2e77",
}
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
TITLE_PROMPT = (
    "### Task:\nGenerate a concise, 3-5 word title with an emoji summarizing the chat history.\n"
    "### Output:\nJSON format: { \"title\": \"your concise title here\" }\n"
    "### Chat History:\n<chat_history>\nUSER: How long does a refund take to arrive?\n"
    "ASSISTANT: A refund takes five business days to arrive.\n</chat_history>"
)


@pytest.fixture
async def base(offline: Settings) -> AsyncIterator[str]:
    async with running_app(offline) as (url, _):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert (await http.post("/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        yield url


async def _stream_as_open_webui_reads_it(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` (as JSON text, as Open WebUI's aiohttp call sends it) and read the
    stream as its middleware does: the text, the usage, the finish reason, and whether
    ``[DONE]`` ended it."""
    text, usage, finish, done = "", None, None, False
    async with http.stream("POST", "/chat/completions", content=json.dumps(body), headers=CHAT_HEADERS) as r:
        assert r.status_code == 200, await r.aread()
        assert "text/event-stream" in r.headers["content-type"]
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                break
            data = json.loads(line[len("data: "):])
            assert "error" not in data, data
            choices = data.get("choices", [])
            if not choices:
                usage = data.get("usage")
                continue
            text += choices[0].get("delta", {}).get("content") or ""
            finish = choices[0].get("finish_reason") or finish
    return {"text": text, "usage": usage, "finish": finish, "done": done}


async def test_the_model_list_call(base: str) -> None:
    """With a key and without one (no Authorization header then), user info forwarded."""
    async with httpx.AsyncClient(base_url=f"{base}/v1", timeout=30) as http:
        for auth in ({"Authorization": "Bearer sk-open-webui"}, {}):
            r = await http.get("/models", headers={**auth, **USER_INFO})
            assert r.status_code == 200, r.text
            listed = r.json()["data"]
            assert all(m["id"] for m in listed)
            assert [m.get("name", m["id"]) for m in listed] == [f"agentchat-{c}" for c in CONTEXT_TYPES]


async def test_a_streamed_chat_and_its_next_turn(base: str) -> None:
    """The first turn, then the transcript resent with the answer as it was shown."""
    question = {"role": "user", "content": "How long does a refund take to arrive?"}
    body = {
        "stream": True,
        "model": MODEL,
        "stream_options": {"include_usage": True},
        "messages": [SYSTEM, question],
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 42,
        "stop": ["<|im_end|>"],
    }
    async with httpx.AsyncClient(base_url=f"{base}/v1", timeout=60) as http:
        first = await _stream_as_open_webui_reads_it(http, body)
        assert "five business days" in first["text"], first
        assert first["finish"] == "stop" and first["done"], first
        assert first["usage"] is not None and set(first["usage"]) >= {"prompt_tokens", "completion_tokens"}

        shown = {"role": "assistant", "content": first["text"]}
        follow_up = {"role": "user", "content": "Where is a refund paid back to?"}
        second = await _stream_as_open_webui_reads_it(
            http, {**body, "messages": [SYSTEM, question, shown, follow_up]}
        )
        assert "original card" in second["text"], second
        assert second["finish"] == "stop" and second["done"], second


@pytest.mark.parametrize("limit", ["max_tokens", "max_completion_tokens"])
async def test_a_background_task_call(base: str, limit: str) -> None:
    """The title task: not streamed, one user message, a token limit under either name."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": TITLE_PROMPT}], "stream": False, limit: 1000}
    async with httpx.AsyncClient(base_url=f"{base}/v1", timeout=60) as http:
        r = await http.post("/chat/completions", content=json.dumps(body), headers=CHAT_HEADERS)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["finish_reason"] == "stop"
    assert isinstance(answer["choices"][0]["message"]["content"], str) and answer["choices"][0]["message"]["content"]
