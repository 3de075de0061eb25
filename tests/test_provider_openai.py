"""OpenAIProvider and OpenAIEmbedder against the loopback OpenAI-format fake, through the
real ``openai`` SDK; and one run of the mandatory RAG flow with ``AGENT_LLM_PROVIDER=openai``."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.config import Settings
from llm.openai import OpenAIProvider
from llm.provider import Provider
from llm.types import (
    ChatRequest,
    ContentDelta,
    Message,
    MessageComplete,
    MessageStart,
    StreamError,
    StreamEvent,
    ThinkingDelta,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolUseInput,
    ToolUseStart,
    Usage,
)
from tests.conftest import collect_sse, names, running_app
from tests.fakes import Drop, ErrorChunk, Hold, HttpError, Text, Thinking, ToolCalls, Turn, running_fake
from tests.fakes import ToolCall as FakeCall
from tests.fakes.openai import FakeOpenAI
from tests.support.server import free_port
from toolindex.embedder import EmbeddingError
from toolindex.factory import choose_embedder
from toolindex.openai import OpenAIEmbedder

MODEL = "gpt-test"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def user(text: str, tools: list[ToolDefinition] | None = None) -> ChatRequest:
    return ChatRequest(
        system_prompt="You are terse.",
        messages=[Message(role="user", content=text)],
        tools=[WEATHER] if tools is None else tools,
    )


async def collect(provider: OpenAIProvider, request: ChatRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream_chat(request)]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def calls_of(events: list[StreamEvent]) -> list[ToolCall]:
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    args: dict[str, str] = {}
    for e in events:
        if isinstance(e, ToolUseInput):
            args[e.id] = args.get(e.id, "") + e.partial_json
    return [ToolCall(s.id, s.name, orjson.loads(args[s.id]), raw_arguments=args[s.id]) for s in starts]


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI(api_key="sk-test")
    async with running_fake(fake.app) as url:
        yield fake, url + "/v1"


@pytest.fixture
async def provider(served: tuple[FakeOpenAI, str]) -> AsyncIterator[OpenAIProvider]:
    p = OpenAIProvider(served[1], MODEL, api_key="sk-test", timeout_s=10)
    yield p
    await p.aclose()


async def test_is_a_provider(provider: OpenAIProvider) -> None:
    assert isinstance(provider, Provider)


async def test_text_turn_streams_content_and_reports_usage(served, provider) -> None:
    fake, _ = served
    fake.add_turn(Turn([Text("Hel"), Text("lo.")], input_tokens=42, output_tokens=3))

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart)
    assert [e for e in events if isinstance(e, ContentDelta)] == [ContentDelta("Hel"), ContentDelta("lo.")]
    assert events[-1] == MessageComplete(stop_for_tool_use=False, usage=Usage(42, 3), stop_reason="stop")
    body = fake.chat_requests[0]
    assert body["model"] == MODEL and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["parallel_tool_calls"] is True
    assert body["messages"] == [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters},
        }
    ]
    assert fake.requests[0].headers["authorization"] == "Bearer sk-test"


async def test_no_tools_sends_no_parallel_flag(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("ok")])
    events = await collect(provider, user("hi", tools=[]))
    assert isinstance(events[-1], MessageComplete)
    assert "tools" not in fake.chat_requests[0] and "parallel_tool_calls" not in fake.chat_requests[0]


async def test_reasoning_is_thinking_not_content(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Thinking("Greeting; "), Thinking("be brief."), Text("Hi!")])
    events = await collect(provider, user("hi"))
    assert text_of(events) == "Hi!"
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Greeting; be brief."


async def test_parallel_calls_with_split_argument_deltas_are_all_kept(served, provider) -> None:
    fake, _ = served
    fake.split_arguments = 4
    fake.add_turn(
        [
            Text("Checking both."),
            ToolCalls([FakeCall("get_weather", {"city": "Paris"}), FakeCall("get_weather", {"city": "Tokyo, Japan"})]),
            FakeCall("get_weather", {"city": "Oslo"}, id="call_given"),
        ]
    )

    events = await collect(provider, user("weather in Paris, Tokyo and Oslo?"))

    inputs = [e for e in events if isinstance(e, ToolUseInput)]
    assert len(inputs) > 3  # the arguments really arrived in pieces
    calls = calls_of(events)
    assert [c.arguments for c in calls] == [{"city": "Paris"}, {"city": "Tokyo, Japan"}, {"city": "Oslo"}]
    assert len({c.id for c in calls}) == 3 and calls[2].id == "call_given"
    assert [e.index for e in events if isinstance(e, ToolUseStart)] == [0, 1, 2]
    assert events[-1] == MessageComplete(stop_for_tool_use=True, usage=Usage(11, 7), stop_reason="tool_calls")


async def test_whole_calls_all_on_index_zero_are_told_apart() -> None:
    """Some servers send each call whole, every one with index 0 and its own id."""
    chunks = [
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"A"}'},
                }
            ]
        },
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"B"}'},
                }
            ]
        },
    ]

    async def raw(request: Any) -> Any:
        from starlette.responses import Response

        lines = [
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [{"index": 0, "delta": d, "finish_reason": None}],
            }
            for d in chunks
        ]
        lines.append(
            {
                "id": "x",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": MODEL,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            }
        )
        body = b"".join(b"data: " + orjson.dumps(line) + b"\n\n" for line in lines) + b"data: [DONE]\n\n"
        return Response(body, media_type="text/event-stream")

    from starlette.applications import Starlette
    from starlette.routing import Route

    async with running_fake(Starlette(routes=[Route("/v1/chat/completions", raw, methods=["POST"])])) as base:
        p = OpenAIProvider(base + "/v1", MODEL, timeout_s=5)
        events = await collect(p, user("two cities"))
        await p.aclose()
    calls = calls_of(events)
    assert [(c.id, c.arguments) for c in calls] == [("a", {"city": "A"}), ("b", {"city": "B"})]
    assert isinstance(events[-1], MessageComplete) and events[-1].stop_for_tool_use
    assert events[-1].usage == Usage()  # this server sent no usage chunk


async def test_tool_round_trip_sends_calls_and_tool_messages(served, provider) -> None:
    fake, _ = served
    fake.add_turn([FakeCall("get_weather", {"city": "Paris"}, id="call_1"), FakeCall("get_weather", {"city": "Rome"})])
    fake.add_turn([Text("Sunny in both.")])

    first = await collect(provider, user("weather?"))
    calls = calls_of(first)
    history = [
        Message(role="user", content="weather?"),
        Message(role="assistant", content="", tool_calls=calls),
        Message(
            role="user",
            tool_results=[
                ToolResult(calls[0].id, "get_weather", '{"sky":"sun"}'),
                ToolResult(calls[1].id, "get_weather", "city unknown", is_error=True),
            ],
        ),
    ]
    second = await collect(provider, ChatRequest("You are terse.", history, tools=[WEATHER]))

    assert text_of(second) == "Sunny in both."
    sent = fake.chat_requests[1]["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
            {
                "id": calls[1].id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
            },
        ],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": '{"sky":"sun"}'}
    assert sent[4] == {"role": "tool", "tool_call_id": calls[1].id, "content": "ERROR: city unknown"}
    assert len(sent) == 5


@pytest.mark.parametrize(
    ("status", "code"),
    [(429, "provider_rate_limited"), (500, "provider_error"), (400, "provider_error"), (504, "provider_timeout")],
)
async def test_http_error_at_start(served, provider, status: int, code: str) -> None:
    fake, _ = served
    fake.add_turn([HttpError(status, f"failure {status}")])

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart) and len(events) == 2
    assert isinstance(events[1], StreamError) and events[1].code == code
    assert f"failure {status}" in events[1].message


async def test_wrong_key_is_provider_error(served) -> None:
    fake, url = served
    fake.add_turn([Text("never")])
    p = OpenAIProvider(url, MODEL, api_key="sk-wrong", timeout_s=5)
    events = await collect(p, user("hi"))
    await p.aclose()
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_error" and "401" in events[-1].message


async def test_connection_refused_is_provider_unreachable() -> None:
    p = OpenAIProvider(f"http://127.0.0.1:{free_port()}/v1", MODEL, timeout_s=5)
    events = await collect(p, user("hi"))
    await p.aclose()
    assert isinstance(events[0], MessageStart) and len(events) == 2
    assert isinstance(events[1], StreamError) and events[1].code == "provider_unreachable"


async def test_error_event_mid_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("partial "), ErrorChunk("model runner crashed")])
    events = await collect(provider, user("hi"))
    assert text_of(events) == "partial "
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_error"
    assert "model runner crashed" in events[-1].message


async def test_connection_dropped_mid_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("partial "), Drop()])
    events = await collect(provider, user("hi"))
    assert text_of(events) == "partial "
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_error"
    assert not any(isinstance(e, MessageComplete) for e in events)


async def test_silent_stall_is_provider_timeout(served) -> None:
    fake, url = served
    fake.add_turn([Text("a"), Hold()])
    p = OpenAIProvider(url, MODEL, api_key="sk-test", timeout_s=0.3)
    events = await collect(p, user("hi"))
    await p.aclose()
    assert text_of(events) == "a"
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_timeout"


async def test_consumer_stopping_closes_the_http_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("first"), Hold(), Text("never sent")])
    stream = provider.stream_chat(user("hi"))
    async for event in stream:
        if isinstance(event, ContentDelta):
            break
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(fake.stream_closed_early.wait(), timeout=5)


async def test_shared_http_client_is_not_closed(served) -> None:
    fake, url = served
    fake.add_turn([Text("ok")])
    async with httpx.AsyncClient() as shared:
        p = OpenAIProvider(url, MODEL, api_key="sk-test", http_client=shared)
        assert text_of(await collect(p, user("hi"))) == "ok"
        await p.aclose()
        assert not shared.is_closed


async def test_health(served) -> None:
    _, url = served
    good = OpenAIProvider(url, MODEL, api_key="sk-test")
    missing = OpenAIProvider(url, "gpt-absent", api_key="sk-test")
    refused = OpenAIProvider(f"http://127.0.0.1:{free_port()}/v1", MODEL, health_timeout=2)
    assert (await good.health()).ok
    assert not (await missing.health()).ok
    assert not (await refused.health()).ok
    for p in (good, missing, refused):
        await p.aclose()


# --- embeddings ------------------------------------------------------------------------


async def test_embedder_returns_unit_rows_in_order(served) -> None:
    fake, url = served
    embedder = OpenAIEmbedder(url, "embed-test", api_key="sk-test", batch_size=2)
    matrix = await embedder.embed_batch(["alpha beta", "gamma", "alpha beta"])
    assert matrix.shape == (3, 64) and matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)
    assert np.allclose(matrix[0], matrix[2])
    assert embedder.dim == 64
    assert [len(b["input"]) for b in fake.embed_requests] == [2, 1]
    assert all(b["encoding_format"] == "float" for b in fake.embed_requests)
    vector = await embedder.embed("gamma")
    assert math.isclose(float(vector @ matrix[1]), 1.0, rel_tol=1e-5)
    await embedder.aclose()


async def test_embedder_failures_are_embedding_errors(served) -> None:
    fake, url = served
    fake.embed_error = HttpError(500, "embedding backend down")
    embedder = OpenAIEmbedder(url, "embed-test", api_key="sk-test")
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        await embedder.embed("x")
    await embedder.aclose()
    refused = OpenAIEmbedder(f"http://127.0.0.1:{free_port()}/v1", "embed-test")
    with pytest.raises(EmbeddingError, match="unreachable"):
        await refused.embed("x")
    await refused.aclose()


async def test_factory_builds_the_openai_embedder(served) -> None:
    _, url = served
    embedder, reason = await choose_embedder(
        "openai", gemini_api_key=None, openai_base_url=url, openai_api_key="sk-test", openai_model="embed-test"
    )
    assert isinstance(embedder, OpenAIEmbedder) and "openai" in reason
    assert (await embedder.embed("hello")).shape == (64,)
    await embedder.aclose()


# --- end to end ------------------------------------------------------------------------

DOC = {
    "id": "doc-resume",
    "title": "Resuming a run",
    "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect with the "
    "Last-Event-ID header and the server replays every event you missed.",
}


def _kb_sources(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for m in body["messages"]:
        if m["role"] == "tool":
            result = orjson.loads(m["content"].removeprefix("ERROR: "))
            out += [c["source_id"] for c in result.get("chunks", [])]
    return out


async def test_mandatory_flow_end_to_end_with_openai_provider_and_embedder(tmp_path: Path) -> None:
    def search(body: dict[str, Any]) -> list[Any]:
        return [Text("Let me look. "), FakeCall("knowledge_base_search", {"query": "resume stream disconnect"})]

    def answer(body: dict[str, Any]) -> list[Any]:
        sources = _kb_sources(body)[:1]
        return [
            FakeCall(
                "generate_response",
                {
                    "answer": "Reconnect with Last-Event-ID.",
                    "sources": sources,
                    "confidence_score": 0.8,
                    "used_internal_kb": True,
                    "used_external_kb": False,
                },
            )
        ]

    fake = FakeOpenAI([search, answer], split_arguments=5)
    async with running_fake(fake.app) as url:
        settings = Settings.from_env(
            {
                "AGENT_DB_PATH": str(tmp_path / "agent.db"),
                "AGENT_INGEST_SAMPLE_KB": "false",
                "AGENT_ADMIN_OPEN": "true",
                "AGENT_LLM_PROVIDER": "openai",
                "OPENAI_BASE_URL": url + "/v1",
                "OPENAI_MODEL": MODEL,
                "AGENT_EMBEDDER": "openai",
                "OPENAI_EMBED_MODEL": "embed-test",
            }
        )
        async with running_app(settings) as (base, app):
            assert app.state.services.agent.provider.name == "openai"
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(f"{base}/v1/kb/documents", json={"documents": [DOC]})
                assert r.status_code == 200, r.text
                events = await collect_sse(
                    client,
                    "POST",
                    f"{base}/v1/agent/chat",
                    json={"message": "How do I resume a stream after a disconnect?", "context_type": "knowledge"},
                )
    assert "tool_call_start" in names(events)
    response = next(e.json() for e in events if e.event == "response")
    assert response["answer"] == "Reconnect with Last-Event-ID."
    assert response["sources"] and response["sources"][0]["kind"] == "internal"
    assert events[-1].json()["status"] == "completed"
    assert fake.embed_requests, "the knowledge base embedded through /v1/embeddings"
    second = [r for r in fake.chat_requests][1]
    assert any(m["role"] == "tool" for m in second["messages"])
    assert {t["function"]["name"] for t in fake.chat_requests[0]["tools"]} >= {
        "knowledge_base_search",
        "generate_response",
    }


async def test_factory_disables_an_unreachable_openai_embedder() -> None:
    embedder, reason = await choose_embedder(
        "openai", gemini_api_key=None, openai_base_url=f"http://127.0.0.1:{free_port()}/v1", http_timeout=2
    )
    assert embedder is None and "unreachable" in reason
