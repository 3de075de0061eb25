"""OllamaProvider against the loopback Ollama fake, through the real ``ollama`` client."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from llm.ollama import OllamaProvider
from llm.pool import pooled_transport
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
from tests.fakes import (
    Drop,
    ErrorChunk,
    FakeOllama,
    Hold,
    HttpError,
    Text,
    Thinking,
    ToolCalls,
    Turn,
    running_fake,
)
from tests.fakes import ToolCall as FakeCall
from tests.support.server import free_port

MODEL = "llama3.2"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def user(text: str) -> ChatRequest:
    return ChatRequest(system_prompt="You are terse.", messages=[Message(role="user", content=text)], tools=[WEATHER])


async def collect(provider: OllamaProvider, request: ChatRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream_chat(request)]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def assistant_from(events: list[StreamEvent]) -> Message:
    """Rebuild the assistant message the agent loop would store from a turn's events."""
    names = {e.id: e.name for e in events if isinstance(e, ToolUseStart)}
    args: dict[str, str] = {}
    for e in events:
        if isinstance(e, ToolUseInput):
            args[e.id] = args.get(e.id, "") + e.partial_json
    import orjson

    calls = [ToolCall(id=i, name=n, arguments=orjson.loads(args[i]), raw_arguments=args[i]) for i, n in names.items()]
    return Message(role="assistant", content=text_of(events), tool_calls=calls)


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeOllama, str]]:
    fake = FakeOllama()
    async with running_fake(fake.app) as url:
        yield fake, url


def transport_of(kind: str) -> httpx.AsyncBaseTransport | None:
    """The provider's transport: httpx's default, or the service's model pool
    (``llm.pool.pooled_transport``: ``llm.h1transport.H1Transport`` behind a gate)."""
    return pooled_transport("llm", 8) if kind == "model-pool" else None


TRANSPORTS = ["httpx", "model-pool"]


@pytest.fixture(params=TRANSPORTS)
async def provider(served: tuple[FakeOllama, str], request: pytest.FixtureRequest) -> AsyncIterator[OllamaProvider]:
    transport = transport_of(request.param)
    p = OllamaProvider(served[1], MODEL, timeout=10, num_ctx=16384, keep_alive="5m", transport=transport)
    yield p
    await p.aclose()


async def test_is_a_provider(provider: OllamaProvider) -> None:
    assert isinstance(provider, Provider)


async def test_text_turn_streams_content_and_reports_usage(served, provider) -> None:
    fake, _ = served
    fake.add_turn(Turn([Text("Hel"), Text("lo.")], input_tokens=42, output_tokens=3))

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart)
    assert [e for e in events if isinstance(e, ContentDelta)] == [ContentDelta("Hel"), ContentDelta("lo.")]
    assert events[-1] == MessageComplete(stop_for_tool_use=False, usage=Usage(42, 3), stop_reason="stop")
    body = fake.chat_requests[0]
    assert body["model"] == MODEL
    assert body["stream"] is True
    assert body["options"] == {"num_ctx": 16384, "num_predict": 4096}
    assert body["keep_alive"] == "5m"
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters},
        }
    ]


async def test_thinking_is_never_content(served) -> None:
    fake, url = served
    fake.add_turn([Thinking("The user greets; "), Thinking("answer briefly."), Text("Hi!")])
    provider = OllamaProvider(url, MODEL, timeout=10, think=True)

    events = await collect(provider, user("hi"))

    assert text_of(events) == "Hi!"
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "The user greets; answer briefly."
    assert fake.chat_requests[0]["think"] is True
    await provider.aclose()


async def test_tool_round_trip_sends_result_as_tool_message(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("Checking."), FakeCall("get_weather", {"city": "Paris"})])
    seen: list[dict[str, Any]] = []

    def second_turn(body: dict[str, Any]) -> list[Any]:
        seen.append(body)
        return [Text("It is sunny in Paris.")]

    fake.add_turn(second_turn)

    first = await collect(provider, user("weather in Paris?"))
    start = next(e for e in first if isinstance(e, ToolUseStart))
    assert start.name == "get_weather" and start.id.startswith("call_") and start.index == 0
    assert [e.partial_json for e in first if isinstance(e, ToolUseInput)] == ['{"city":"Paris"}']
    assert first[-1] == MessageComplete(stop_for_tool_use=True, usage=Usage(11, 7), stop_reason="stop")

    history = [
        Message(role="user", content="weather in Paris?"),
        assistant_from(first),
        Message(role="user", tool_results=[ToolResult(start.id, "get_weather", '{"sky":"sunny"}')]),
    ]
    second = await collect(provider, ChatRequest(system_prompt="S", messages=history, tools=[WEATHER]))

    assert text_of(second) == "It is sunny in Paris."
    assert second[-1].stop_for_tool_use is False  # type: ignore[union-attr]
    assert seen[0]["messages"] == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "tool_name": "get_weather", "content": '{"sky":"sunny"}'},
    ]


async def test_error_results_are_prefixed_and_empty_content_is_kept(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("ok")])
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", tool_calls=[ToolCall("call_1", "a", {}), ToolCall("call_2", "b", {})]),
        Message(
            role="user",
            tool_results=[ToolResult("call_1", "a", "backend said 503", is_error=True), ToolResult("call_2", "b", "")],
        ),
    ]
    await collect(provider, ChatRequest(system_prompt="", messages=history))

    messages = fake.chat_requests[0]["messages"]
    assert messages[0] == {"role": "user", "content": "go"}  # no system message when the prompt is empty
    assert messages[2:] == [
        {"role": "tool", "tool_name": "a", "content": "ERROR: backend said 503"},
        {"role": "tool", "tool_name": "b", "content": ""},
    ]
    assert "tools" not in fake.chat_requests[0]


async def test_every_parallel_tool_call_is_kept_with_distinct_ids(served, provider) -> None:
    fake, _ = served
    fake.add_turn(
        [
            ToolCalls([FakeCall("get_weather", {"city": "Paris"}), FakeCall("get_weather", {"city": "Rome"})]),
            FakeCall("get_time", {"tz": "CET"}),
        ]
    )

    events = await collect(provider, user("weather in Paris and Rome, and the time?"))

    starts = [e for e in events if isinstance(e, ToolUseStart)]
    inputs = {e.id: e.partial_json for e in events if isinstance(e, ToolUseInput)}
    assert [(s.name, s.index) for s in starts] == [("get_weather", 0), ("get_weather", 1), ("get_time", 2)]
    assert len({s.id for s in starts}) == 3
    assert [inputs[s.id] for s in starts] == ['{"city":"Paris"}', '{"city":"Rome"}', '{"tz":"CET"}']
    assert isinstance(events[-1], MessageComplete) and events[-1].stop_for_tool_use


async def test_nested_tool_schema_reaches_the_server_intact(served, provider) -> None:
    fake, _ = served
    schema = {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "description": "what to match",
                "properties": {
                    "since": {"type": "string", "format": "date-time", "default": "2024-01-01T00:00:00Z"},
                    "owner": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]},
                    "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                },
                "required": ["since"],
                "additionalProperties": False,
            },
            "limit": {"type": "integer", "minimum": 1, "default": 10},
        },
        "required": ["filter"],
        "$defs": {"unused": {"type": "string"}},
    }
    fake.add_turn([Text("ok")])
    tool = ToolDefinition("search_rules", "Search workflow rules.", schema)

    await collect(provider, ChatRequest(system_prompt="", messages=[Message("user", "x")], tools=[tool]))

    assert fake.chat_requests[0]["tools"][0]["function"]["parameters"] == schema


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "provider_error"), (429, "provider_rate_limited"), (404, "provider_error")],
)
async def test_http_error_at_start(served, provider, status: int, code: str) -> None:
    fake, _ = served
    fake.add_turn([HttpError(status, f"failure {status}")])

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart)
    assert len(events) == 2
    error = events[1]
    assert isinstance(error, StreamError) and error.code == code
    assert f"failure {status}" in error.message


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_connection_refused_is_provider_unreachable(kind: str) -> None:
    provider = OllamaProvider(f"http://127.0.0.1:{free_port()}", MODEL, timeout=5, transport=transport_of(kind))

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart)
    assert isinstance(events[1], StreamError) and events[1].code == "provider_unreachable"
    assert len(events) == 2
    await provider.aclose()


async def test_error_line_mid_stream(served, provider) -> None:
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


@pytest.mark.parametrize("kind", TRANSPORTS)
async def test_silent_stall_is_provider_timeout(served, kind: str) -> None:
    fake, url = served
    fake.add_turn([Text("a"), Hold()])
    provider = OllamaProvider(url, MODEL, timeout=0.3, transport=transport_of(kind))

    events = await collect(provider, user("hi"))

    assert text_of(events) == "a"
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_timeout"
    await provider.aclose()


async def test_consumer_stopping_closes_the_http_stream(served, provider) -> None:
    fake, _ = served
    gc.disable()  # the close must be deterministic, not left to the garbage collector
    try:
        await _stop_consuming_after_first_chunk(fake, provider)
    finally:
        gc.enable()


async def _stop_consuming_after_first_chunk(fake: FakeOllama, provider: OllamaProvider) -> None:
    fake.add_turn([Text("first"), Hold(), Text("never sent")])

    stream = provider.stream_chat(user("hi"))
    async for event in stream:
        if isinstance(event, ContentDelta):
            break
    assert not fake.stream_closed_early.is_set()
    await stream.aclose()  # type: ignore[attr-defined]

    await asyncio.wait_for(fake.stream_closed_early.wait(), timeout=5)
    assert fake.requests[-1].closed_early


async def test_cancelled_consumer_closes_the_http_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("first"), Hold()])
    got_first = asyncio.Event()

    async def consume() -> None:
        async for event in provider.stream_chat(user("hi")):
            if isinstance(event, ContentDelta):
                got_first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_first.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    await asyncio.wait_for(fake.stream_closed_early.wait(), timeout=5)


async def test_health_reports_model_presence(served) -> None:
    fake, url = served
    present = OllamaProvider(url, "llama3.2", timeout=5)  # listed as llama3.2:latest
    absent = OllamaProvider(url, "qwen3:14b", timeout=5)

    ok = await present.health()
    missing = await absent.health()

    assert ok.ok
    assert not missing.ok and "ollama pull qwen3:14b" in missing.detail
    assert [r.path for r in fake.requests] == ["/api/tags", "/api/tags"]
    await present.aclose()
    await absent.aclose()


async def test_health_when_unreachable() -> None:
    provider = OllamaProvider(f"http://127.0.0.1:{free_port()}", MODEL, timeout=5)
    health = await provider.health()
    assert not health.ok and "unreachable" in health.detail
    await provider.aclose()


async def test_warm_loads_the_model_without_a_scripted_turn(served, provider) -> None:
    fake, _ = served

    assert await provider.warm() is True

    [body] = fake.chat_requests
    assert (body["model"], body["messages"], body["keep_alive"]) == (MODEL, [], "5m")
    assert fake.turns.remaining == 0


async def test_warm_failure_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    provider = OllamaProvider(f"http://127.0.0.1:{free_port()}", MODEL, timeout=5)
    assert await provider.warm() is False
    assert "warming Ollama model" in caplog.text
    await provider.aclose()


async def test_fake_embed_endpoint_follows_the_real_api(served) -> None:
    """The fake's ``/api/embed``, driven by the real client (other suites rely on it)."""
    import ollama

    fake, url = served
    client = ollama.AsyncClient(host=url, timeout=5)
    result = await client.embed(model="nomic-embed-text", input=["search_query: alpha", "search_query: alpha", "zeta"])
    single = await client.embed(model="nomic-embed-text", input="zeta")
    fake.embed_error = HttpError(404, 'model "nomic-embed-text" not found, try pulling it first')
    with pytest.raises(ollama.ResponseError) as missing:
        await client.embed(model="nomic-embed-text", input="x")

    a, b, z = result.embeddings
    assert len(a) == 64 and a == b and a != z
    assert abs(sum(x * x for x in a) - 1.0) < 1e-4
    assert single.embeddings == [z]
    assert missing.value.status_code == 404
    assert fake.embed_requests[0]["input"][2] == "zeta"
    await client.close()


# --- the lean reader: the library's wire contract, read for less --------------------------------


async def test_lean_reader_reads_what_the_library_reads(served, provider) -> None:
    """The provider reads ``/api/chat`` itself (no pydantic model per line); the same
    answer read through the library's own ``ChatResponse`` gives the same turn."""
    import ollama

    fake, url = served
    script = [Thinking("hmm; "), Text("Hel"), Text("lo."), ToolCalls([FakeCall("get_weather", {"city": "Oslo"})])]
    fake.add_turn(Turn(script, input_tokens=42, output_tokens=3))
    fake.add_turn(Turn(script, input_tokens=42, output_tokens=3))
    ours = await collect(provider, user("hi"))

    client = ollama.AsyncClient(host=url, timeout=10)
    parts = [p async for p in await client._request(ollama.ChatResponse, "POST", "/api/chat",
                                                    json=provider.request_body(user("hi")), stream=True)]
    assert all(isinstance(p, ollama.ChatResponse) for p in parts)  # the fake speaks the library's types
    theirs_thinking = "".join(p.message.thinking or "" for p in parts)
    theirs_calls = [(c.function.name, dict(c.function.arguments)) for p in parts for c in p.message.tool_calls or ()]
    final = parts[-1]

    assert "".join(e.text for e in ours if isinstance(e, ThinkingDelta)) == theirs_thinking == "hmm; "
    assert text_of(ours) == "".join(p.message.content or "" for p in parts) == "Hello."
    assert [(c.name, c.arguments) for c in assistant_from(ours).tool_calls] == theirs_calls
    assert ours[-1] == MessageComplete(
        stop_for_tool_use=True, usage=Usage(final.prompt_eval_count or 0, final.eval_count or 0),
        stop_reason=final.done_reason or "stop",
    )


async def test_lean_reader_joins_lines_split_across_reads_and_refuses_a_line_that_is_not_an_object() -> None:
    """NDJSON cut anywhere by the network (here: mid-key, mid-line, the last line without
    its newline) reads as the same lines; a line that is not a JSON object is a malformed
    answer, never a crash."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from tests.support.server import serve_app

    pieces: list[list[bytes]] = [
        [b'{"model":"m","message":{"role":"assistant","con', b'tent":"Hel"},"done":false}\n{"model":"m",',
         b'"message":{"role":"assistant","content":"lo"},"done":false}\n',
         b'{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop",'
         b'"prompt_eval_count":5,"eval_count":2}'],
        [b'{"model":"m","message":{"role":"assistant","content":"a"},"done":false}\n[1, 2]\n'],
    ]

    async def chat(request: Request) -> StreamingResponse:
        await request.body()
        chunks = pieces.pop(0)

        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk
                await asyncio.sleep(0)

        return StreamingResponse(body(), media_type="application/x-ndjson")

    async with serve_app(Starlette(routes=[Route("/api/chat", chat, methods=["POST"])]), lifespan="off") as url:
        provider = OllamaProvider(url, MODEL, timeout=10)
        try:
            split = await collect(provider, user("hi"))
            bad = await collect(provider, user("hi"))
        finally:
            await provider.aclose()
    assert text_of(split) == "Hello"
    assert split[-1] == MessageComplete(stop_for_tool_use=False, usage=Usage(5, 2), stop_reason="stop")
    assert text_of(bad) == "a"
    assert isinstance(bad[-1], StreamError) and bad[-1].code == "provider_error" and "malformed" in bad[-1].message
