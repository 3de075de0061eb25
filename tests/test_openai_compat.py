"""``GET /v1/models`` and ``POST /v1/chat/completions`` driven by the official ``openai``
SDK against a live server (real uvicorn on loopback).

The default configuration with the offline extractive provider answers from a small
knowledge base through the mandatory flow, so the answers, their tool activity and their
sources are real. History is checked with the real Ollama client against the loopback
Ollama fake, whose answer is built from the conversation it is sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from agenttools.core.catalog import CONTEXT_TYPES
from app.config import Settings
from llm.ollama import OllamaProvider
from llm.scripted import ScriptedProvider, ScriptedTurn
from tests.conftest import running_app
from tests.fakes import FakeOllama, Text, running_fake

DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "url": "https://docs.example.com/resume",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to "
        "GET /v1/agent/runs/{run_id}/events with the Last-Event-ID header and the server replays "
        "every event you missed, then follows the run live.",
    },
    {
        "id": "doc-refunds",
        "title": "Refunds",
        "text": "Refunds are paid back to the original card. A refund takes five business days to arrive.",
    },
]
RESUME_Q = "How do I resume a stream after a disconnect?"
#: What the answers cite, as an OpenAI client is shown it: a number, and the list at the end.
RESUME_SOURCES = "\n\nSources:\n- [1] Resuming a run — https://docs.example.com/resume"
RESUME_CITED = {
    "number": 1, "ids": ["doc-resume#0"], "title": "Resuming a run", "url": "https://docs.example.com/resume",
    "location": "api",  # posted over HTTP without a source of its own
}
REFUND_Q = "How long does a refund take to arrive?"


@pytest.fixture
async def server(offline: Settings) -> AsyncIterator[tuple[str, Any]]:
    async with running_app(offline) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.post("/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        yield base, app


def sdk(base: str) -> openai.AsyncOpenAI:
    # The SDK always sends its api_key as a bearer token; with AGENT_AUTH=none it is only forwarded.
    return openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0)


def native_events(chunks: list[Any]) -> list[dict[str, Any]]:
    return [c.model_extra["agentchat"] for c in chunks if (c.model_extra or {}).get("agentchat")]


async def test_models_are_the_catalog_contexts(server: tuple[str, Any]) -> None:
    base, _ = server
    async with sdk(base) as client:
        models = [m async for m in client.models.list()]
        one = await client.models.retrieve("agentchat-knowledge")
        with pytest.raises(openai.NotFoundError) as missing:
            await client.models.retrieve("gpt-4o")
    assert [m.id for m in models] == [f"agentchat-{c}" for c in CONTEXT_TYPES]
    assert {m.owned_by for m in models} == {"agentchat"} and one.id == "agentchat-knowledge"
    assert missing.value.status_code == 404 and missing.value.code == "model_not_found"


async def test_a_completion_is_a_run_answered_from_the_knowledge_base(server: tuple[str, Any]) -> None:
    base, app = server
    async with sdk(base) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="agentchat-knowledge",
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": RESUME_Q}],
            max_tokens=1000,  # honoured (tests/test_openai_options.py): this answer is shorter
            temperature=0.2,  # within range: accepted and ignored, the agent's model samples as configured
        )
        completion = raw.parse()
    assert completion.object == "chat.completion" and completion.model == "agentchat-knowledge"
    [choice] = completion.choices
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert "Last-Event-ID" in (choice.message.content or "")
    extra = completion.model_extra["agentchat"]["events"]
    names = [e["event"] for e in extra]
    assert names[0] == "run_started" and names[-1] == "message_complete" and "content_chunk" not in names
    response = next(e["data"] for e in extra if e["event"] == "response")
    # The run's answer cites the passage by its id; the client reads a number and the list
    # (the extension keeps the raw ids and the numbering).
    assert response["answer"].endswith("[doc-resume#0]")
    assert choice.message.content == response["answer"].replace("[doc-resume#0]", "[1]") + RESUME_SOURCES
    assert "doc-resume#0" in {s["id"] for s in response["sources"]}
    assert completion.model_extra["agentchat"]["citations"] == [RESUME_CITED]
    calls = [e["data"]["name"] for e in extra if e["event"] == "tool_call_start"]
    assert calls[0] == "knowledge_base_search" and calls[-1] == "generate_response"
    # It is a run like any other: stored, with its conversation, under the ids the headers name.
    run_id, conversation_id = raw.headers["x-run-id"], raw.headers["x-conversation-id"]
    assert completion.id == f"chatcmpl-{run_id}"
    stored = await app.state.services.run_store.get(run_id)
    assert stored is not None and stored.status == "completed" and stored.conversation_id == conversation_id
    async with httpx.AsyncClient(base_url=base) as http:
        convo = (await http.get(f"/v1/agent/conversations/{conversation_id}")).json()
    assert [m["content"] for m in convo["messages"] if m["role"] == "user" and not m.get("tool_results")] == [
        RESUME_Q
    ]


async def test_streamed_chunks_carry_the_answer_tool_activity_and_usage(server: tuple[str, Any]) -> None:
    base, _ = server
    async with sdk(base) as client:
        stream = await client.chat.completions.create(
            model="agentchat-knowledge",
            messages=[{"role": "user", "content": RESUME_Q}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason is not None]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"] and finals[0] is chunks[-2]
    usage = chunks[-1]
    assert usage.choices == [] and usage.usage is not None and usage.usage.total_tokens == 0  # no model, no tokens
    native = native_events(chunks)
    assert native[-1]["event"] == "message_complete" and native[-1]["data"]["status"] == "completed"
    response = next(e["data"] for e in native if e["event"] == "response")
    # Shown once, not twice; its citation numbered, the sources listed at its end.
    assert text == response["answer"].replace("[doc-resume#0]", "[1]") + RESUME_SOURCES
    assert "Last-Event-ID" in text and "doc-resume" not in text
    assert native[-1]["citations"] == [RESUME_CITED]
    tools = [(e["event"], e["data"]["name"]) for e in native if e["event"].startswith("tool_call")]
    assert tools == [
        ("tool_call_start", "knowledge_base_search"), ("tool_call_result", "knowledge_base_search"),
        ("tool_call_start", "search_text"), ("tool_call_result", "search_text"),  # the found page read again
        ("tool_call_start", "generate_response"), ("tool_call_result", "generate_response"),
    ]
    # Tool activity rides on chunks with an empty delta, which text-only clients skip.
    assert all(not c.choices[0].delta.content for c in chunks if (c.model_extra or {}).get("agentchat"))


async def test_errors_have_openais_shape(server: tuple[str, Any]) -> None:
    base, _ = server
    async with sdk(base) as client:
        with pytest.raises(openai.NotFoundError) as unknown:
            await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as empty:
            await client.chat.completions.create(model="agentchat-knowledge", messages=[])
        with pytest.raises(openai.BadRequestError) as last:
            await client.chat.completions.create(
                model="agentchat-knowledge",
                messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
            )
    assert unknown.value.status_code == 404 and unknown.value.code == "model_not_found"
    assert unknown.value.param == "model"
    assert empty.value.status_code == 400 and empty.value.param == "messages"
    assert last.value.status_code == 400 and "last message must be a user message" in last.value.message
    async with httpx.AsyncClient(base_url=base) as http:
        broken = await http.post(
            "/v1/chat/completions", content=b"{not json", headers={"Content-Type": "application/json"}
        )
    body = broken.json()
    assert broken.status_code == 400 and set(body) == {"error"}
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["code"] == "invalid_json"


async def test_a_failure_after_the_stream_started_is_an_error_chunk_then_done(settings: Settings) -> None:
    provider = ScriptedProvider(lambda request, index: ScriptedTurn(chunks=["Partial answer. "], error="it fell over"))
    async with running_app(settings, provider=provider, embedder=None) as (base, _):
        seen: list[Any] = []
        async with sdk(base) as client:
            stream = await client.chat.completions.create(
                model="agentchat-knowledge", messages=[{"role": "user", "content": "Tell me."}], stream=True
            )
            with pytest.raises(openai.APIError) as failed:
                async for chunk in stream:
                    seen.append(chunk)
        assert "".join(c.choices[0].delta.content or "" for c in seen if c.choices) == "Partial answer. "
        assert "it fell over" in failed.value.message and failed.value.code == "provider_error"
        # On the wire: the error chunk, then [DONE].
        body = {"model": "agentchat-knowledge", "messages": [{"role": "user", "content": "Again."}], "stream": True}
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            lines = [ln for ln in (await http.post("/v1/chat/completions", json=body)).text.split("\n") if ln]
            plain = await http.post("/v1/chat/completions", json={**body, "stream": False})
    assert lines[-1] == "data: [DONE]"
    assert orjson.loads(lines[-2].removeprefix("data: "))["error"]["code"] == "provider_error"
    assert plain.status_code == 502 and plain.json()["error"]["code"] == "provider_error"


async def test_the_second_turn_is_answered_with_the_first_in_its_history(server: tuple[str, Any]) -> None:
    """Offline: the client resends the transcript; the second question is the one answered."""
    base, _ = server
    async with sdk(base) as client:
        first = await client.chat.completions.create(
            model="agentchat-knowledge", messages=[{"role": "user", "content": RESUME_Q}]
        )
        answer = first.choices[0].message.content or ""
        raw = await client.chat.completions.with_raw_response.create(
            model="agentchat-knowledge",
            messages=[
                {"role": "user", "content": RESUME_Q},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": REFUND_Q},
            ],
        )
    second = raw.parse().choices[0].message.content or ""
    assert "five business days" in second and "Last-Event-ID" not in second
    async with httpx.AsyncClient(base_url=base) as http:
        convo = (await http.get(f"/v1/agent/conversations/{raw.headers['x-conversation-id']}")).json()
    questions = [m["content"] for m in convo["messages"] if m["role"] == "user" and m["content"]]
    assert questions == [RESUME_Q, REFUND_Q]
    # The first turn came with its tool calls and results: the server's own history was continued.
    assert any(m.get("tool_calls") for m in convo["messages"][:-1])


def remembering_model(body: dict[str, Any]) -> list[Any]:
    """A model whose answer is built from the conversation it is sent."""
    said = [m["content"] for m in body["messages"] if m["role"] == "user"]
    earlier = [m["content"] for m in body["messages"] if m["role"] == "assistant"]
    return [Text(f"Turn {len(said)}. Before you said {said[:-1]!r}; I said {earlier!r}.")]


@pytest.mark.parametrize("history", ["resent", "edited", "conversation-id"])
async def test_multi_turn_history_reaches_the_model(settings: Settings, history: str) -> None:
    fake = FakeOllama(remembering_model)
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        async with running_app(settings, provider=provider, embedder=None) as (base, _), sdk(base) as client:
            headers = {"X-Conversation-Id": "conv-ada-1"} if history == "conversation-id" else {}
            # Workflow: the model answers in plain text, which owes no knowledge flow there.
            first = await client.chat.completions.create(
                model="agentchat-workflow", messages=[{"role": "user", "content": "My name is Ada."}],
                extra_headers=headers,
            )
            said = first.choices[0].message.content or ""
            assert said == "Turn 1. Before you said []; I said []."
            held = "I will remember that, Ada." if history == "edited" else said
            turns = [] if history == "conversation-id" else [
                {"role": "user", "content": "My name is Ada."}, {"role": "assistant", "content": held},
            ]
            second = await client.chat.completions.create(
                model="agentchat-workflow", messages=[*turns, {"role": "user", "content": "What is my name?"}],
                extra_headers=headers,
            )
    answer = second.choices[0].message.content
    assert answer == f"Turn 2. Before you said ['My name is Ada.']; I said [{held!r}]."
    sent = [m for m in fake.chat_requests[-1]["messages"] if m["role"] != "system"]
    assert [(m["role"], m["content"]) for m in sent] == [
        ("user", "My name is Ada."), ("assistant", held), ("user", "What is my name?")
    ]


async def test_the_same_transcript_again_is_answered_again(server: tuple[str, Any]) -> None:
    """A regenerate resends the very same messages: a new run answers (OpenAI is stateless)."""
    base, _ = server
    messages = [{"role": "user", "content": RESUME_Q}]
    async with sdk(base) as client:
        first = await client.chat.completions.with_raw_response.create(model="agentchat-knowledge", messages=messages)
        again = await client.chat.completions.with_raw_response.create(model="agentchat-knowledge", messages=messages)
    assert first.headers["x-run-id"] != again.headers["x-run-id"]
    assert first.headers["x-conversation-id"] != again.headers["x-conversation-id"]
    assert first.parse().choices[0].message.content == again.parse().choices[0].message.content
