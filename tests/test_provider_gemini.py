"""GeminiProvider against the loopback Gemini fake, through the real ``google-genai`` client."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import orjson
import pytest

from llm.gemini import GeminiProvider
from llm.gemini_messages import SKIP_SIGNATURE
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
    FakeGemini,
    Hold,
    HttpError,
    Text,
    Thinking,
    ToolCalls,
    Turn,
    running_fake,
)
from tests.fakes import ToolCall as FakeCall
from tests.fakes.gemini import decode_bytes_field
from tests.support.server import free_port

MODEL = "gemini-2.5-flash"
KEY = "test-key"
WEATHER = ToolDefinition(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def user(text: str, tools: list[ToolDefinition] | None = None) -> ChatRequest:
    return ChatRequest(
        system_prompt="You are terse.", messages=[Message(role="user", content=text)], tools=[WEATHER] if tools is None else tools
    )


async def collect(provider: GeminiProvider, request: ChatRequest) -> list[StreamEvent]:
    return [event async for event in provider.stream_chat(request)]


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, ContentDelta))


def assistant_from(events: list[StreamEvent]) -> Message:
    """Rebuild the assistant message the agent loop would store from a turn's events."""
    names = {e.id: e.name for e in events if isinstance(e, ToolUseStart)}
    args = {e.id: e.partial_json for e in events if isinstance(e, ToolUseInput)}
    complete = events[-1]
    assert isinstance(complete, MessageComplete)
    calls = [ToolCall(id=i, name=n, arguments=orjson.loads(args[i]), raw_arguments=args[i]) for i, n in names.items()]
    return Message(role="assistant", content=text_of(events), tool_calls=calls, replay=complete.replay)


def declared_schema(body: dict[str, Any]) -> Any:
    declaration = body["tools"][0]["functionDeclarations"][0]
    # google-genai sends the declaration's own field names; the API accepts both spellings.
    return declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))


@pytest.fixture
async def served() -> AsyncIterator[tuple[FakeGemini, str]]:
    fake = FakeGemini(api_key=KEY)
    async with running_fake(fake.app) as url:
        yield fake, url


def make(url: str, **kwargs: Any) -> GeminiProvider:
    kwargs.setdefault("timeout_s", 10)
    kwargs.setdefault("retry_attempts", 1)
    return GeminiProvider(KEY, MODEL, base_url=url, **kwargs)


@pytest.fixture
async def provider(served: tuple[FakeGemini, str]) -> AsyncIterator[GeminiProvider]:
    p = make(served[1])
    yield p
    await p.aclose()


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Prove streams are closed deterministically, not by the garbage collector."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_is_a_provider(provider: GeminiProvider) -> None:
    assert isinstance(provider, Provider)


async def test_text_turn_streams_content_and_reports_usage(served, provider) -> None:
    fake, _ = served
    fake.add_turn(Turn([Text("Hel"), Text("lo.")], input_tokens=40, output_tokens=2))

    events = await collect(provider, user("hi", tools=[]))

    assert isinstance(events[0], MessageStart)
    assert [e for e in events if isinstance(e, ContentDelta)] == [ContentDelta("Hel"), ContentDelta("lo.")]
    done = events[-1]
    assert isinstance(done, MessageComplete)
    assert (done.stop_for_tool_use, done.usage, done.stop_reason) == (False, Usage(40, 2), "stop")
    assert done.replay == {"gemini": {"parts": [{"text": "Hel"}, {"text": "lo."}]}}
    rec = fake.requests[0]
    assert rec.path.endswith(f"/models/{MODEL}:streamGenerateContent") and rec.query["alt"] == "sse"
    assert rec.headers["x-goog-api-key"] == KEY
    body = rec.body
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["systemInstruction"]["parts"] == [{"text": "You are terse."}]
    assert body["generationConfig"]["maxOutputTokens"] == 4096
    assert "tools" not in body


async def test_thoughts_are_thinking_never_content(served) -> None:
    fake, url = served
    fake.add_turn([Thinking("**Planning** a greeting."), Text("Hi!")])
    provider = make(url, include_thoughts=True)

    events = await collect(provider, user("hi"))

    assert text_of(events) == "Hi!"
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == ["**Planning** a greeting."]
    # google-genai passes nested config models with their own (snake_case) field names,
    # which proto3 JSON parsing accepts as well as camelCase.
    thinking = fake.generate_requests[0]["generationConfig"]["thinkingConfig"]
    assert thinking in ({"includeThoughts": True}, {"include_thoughts": True})
    await provider.aclose()


async def test_tool_round_trip(served, provider) -> None:
    fake, _ = served
    fake.add_turn([FakeCall("get_weather", {"city": "Paris"})])
    fake.add_turn([Text("Sunny in Paris.")])

    first = await collect(provider, user("weather in Paris?"))
    start = next(e for e in first if isinstance(e, ToolUseStart))
    assert (start.name, start.index) == ("get_weather", 0) and start.id.startswith("call_")
    assert [e.partial_json for e in first if isinstance(e, ToolUseInput)] == ['{"city":"Paris"}']
    assert isinstance(first[-1], MessageComplete) and first[-1].stop_for_tool_use
    assert declared_schema(fake.generate_requests[0]) == WEATHER.parameters

    history = [
        Message(role="user", content="weather in Paris?"),
        assistant_from(first),
        Message(role="user", tool_results=[ToolResult(start.id, "get_weather", '{"sky":"sunny","c":21}')]),
    ]
    second = await collect(provider, ChatRequest(system_prompt="S", messages=history, tools=[WEATHER]))

    assert text_of(second) == "Sunny in Paris."
    contents = fake.generate_requests[1]["contents"]
    assert contents[1] == {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]}
    # the generated id is ours, not the model's: it is not sent back
    assert contents[2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": {"sky": "sunny", "c": 21}}}}],
    }


async def test_model_call_ids_are_used_and_echoed_and_errors_reported(served, provider) -> None:
    fake, _ = served
    fake.add_turn([FakeCall("get_weather", {"city": "Oslo"}, id="fc-123")])
    fake.add_turn([Text("Sorry.")])

    first = await collect(provider, user("weather in Oslo?"))
    start = next(e for e in first if isinstance(e, ToolUseStart))
    assert start.id == "fc-123"

    history = [
        Message(role="user", content="weather in Oslo?"),
        assistant_from(first),
        Message(role="user", tool_results=[ToolResult("fc-123", "get_weather", "upstream timeout", is_error=True)]),
    ]
    await collect(provider, ChatRequest(system_prompt="S", messages=history, tools=[WEATHER]))

    response = fake.generate_requests[1]["contents"][2]["parts"][0]["functionResponse"]
    assert response == {"id": "fc-123", "name": "get_weather", "response": {"error": "upstream timeout"}}


async def test_every_parallel_tool_call_is_kept_with_distinct_ids(served, provider) -> None:
    fake, _ = served
    fake.add_turn(
        [
            ToolCalls([FakeCall("get_weather", {"city": "Paris"}), FakeCall("get_weather", {"city": "Rome"})]),
            FakeCall("get_time", {"tz": "CET"}),
        ]
    )

    events = await collect(provider, user("Paris and Rome weather, and the time?"))

    starts = [e for e in events if isinstance(e, ToolUseStart)]
    inputs = {e.id: e.partial_json for e in events if isinstance(e, ToolUseInput)}
    assert [(s.name, s.index) for s in starts] == [("get_weather", 0), ("get_weather", 1), ("get_time", 2)]
    assert len({s.id for s in starts}) == 3
    assert [inputs[s.id] for s in starts] == ['{"city":"Paris"}', '{"city":"Rome"}', '{"tz":"CET"}']
    assert isinstance(events[-1], MessageComplete) and events[-1].stop_for_tool_use


async def test_thought_signatures_come_back_byte_identical(served) -> None:
    fake, url = served
    sig_call = bytes([0xFB, 0xFF, 0xBF, 0x00, 0x3E, 0x3F]) * 5  # '+' and '/' in standard base64
    sig_text = b"\x00\x01opaque\xfe\xff"
    fake.add_turn(
        [
            Thinking("weighing options"),
            Text("Let me check.", signature=sig_text),
            ToolCalls(
                [FakeCall("get_weather", {"city": "Paris"}, signature=sig_call), FakeCall("get_weather", {"city": "Rome"})]
            ),
        ]
    )
    fake.add_turn([Text("Done.")])
    provider = make(url, include_thoughts=True)

    first = await collect(provider, user("weather?"))
    calls = assistant_from(first).tool_calls
    history = [
        Message(role="user", content="weather?"),
        assistant_from(first),
        Message(role="user", tool_results=[ToolResult(c.id, c.name, '"ok"') for c in calls]),
    ]
    await collect(provider, ChatRequest(system_prompt="S", messages=history, tools=[WEATHER]))

    sent = fake.generate_requests[1]["contents"][1]["parts"]
    assert [p.get("text") for p in sent] == ["weighing options", "Let me check.", None, None]
    assert sent[0]["thought"] is True
    assert decode_bytes_field(sent[1]["thoughtSignature"]) == sig_text
    assert decode_bytes_field(sent[2]["thoughtSignature"]) == sig_call
    assert "thoughtSignature" not in sent[3]
    assert [p["functionCall"]["args"] for p in sent[2:]] == [{"city": "Paris"}, {"city": "Rome"}]
    await provider.aclose()


async def test_history_without_gemini_replay_gets_the_documented_skip_signature(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("ok")])
    history = [
        Message(role="user", content="go"),
        Message(role="assistant", content="Calling.", tool_calls=[ToolCall("call_x", "get_weather", {"city": "Rome"})]),
        Message(role="user", tool_results=[ToolResult("call_x", "get_weather", "plain text result")]),
    ]
    await collect(provider, ChatRequest(system_prompt="", messages=history, tools=[WEATHER]))

    body = fake.generate_requests[0]
    assert "systemInstruction" not in body
    model_parts = body["contents"][1]["parts"]
    assert model_parts[0] == {"text": "Calling."}
    assert decode_bytes_field(model_parts[1]["thoughtSignature"]) == SKIP_SIGNATURE
    assert body["contents"][2]["parts"][0]["functionResponse"]["response"] == {"output": "plain text result"}


async def test_nested_tool_schema_reaches_the_server_intact(served, provider) -> None:
    fake, _ = served
    schema = {
        "type": "object",
        "properties": {
            "filter": {
                "type": "object",
                "properties": {
                    "since": {"type": "string", "format": "date-time", "default": "2024-01-01T00:00:00Z"},
                    "owner": {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]},
                },
                "additionalProperties": False,
            }
        },
        "required": ["filter"],
    }
    fake.add_turn([Text("ok")])
    await collect(provider, user("x", tools=[ToolDefinition("search_rules", "Search.", schema)]))
    assert declared_schema(fake.generate_requests[0]) == schema


@pytest.mark.parametrize(
    ("status", "code"),
    [(500, "provider_error"), (429, "provider_rate_limited"), (404, "provider_error"), (504, "provider_timeout")],
)
async def test_http_error_at_start(served, provider, status: int, code: str) -> None:
    fake, _ = served
    fake.add_turn([HttpError(status, f"failure {status}")])

    events = await collect(provider, user("hi"))

    assert isinstance(events[0], MessageStart) and len(events) == 2
    error = events[1]
    assert isinstance(error, StreamError) and error.code == code
    assert f"failure {status}" in error.message


async def test_bad_api_key_is_reported(served) -> None:
    _, url = served
    provider = GeminiProvider("wrong-key", MODEL, base_url=url, retry_attempts=1)
    events = await collect(provider, user("hi"))
    assert isinstance(events[-1], StreamError) and "API key" in events[-1].message
    await provider.aclose()


async def test_retryable_status_is_retried(served) -> None:
    fake, url = served
    fake.add_turn([HttpError(503, "overloaded")])
    fake.add_turn([Text("fine now")])
    provider = make(url, retry_attempts=2, retry_initial_delay_s=0.01, retry_jitter_s=0.0)

    events = await collect(provider, user("hi"))

    assert text_of(events) == "fine now" and isinstance(events[-1], MessageComplete)
    assert len(fake.generate_requests) == 2
    await provider.aclose()


async def test_connection_refused_is_provider_unreachable() -> None:
    provider = make(f"http://127.0.0.1:{free_port()}")
    events = await collect(provider, user("hi"))
    assert isinstance(events[0], MessageStart) and len(events) == 2
    assert isinstance(events[1], StreamError) and events[1].code == "provider_unreachable"
    await provider.aclose()


async def test_error_event_mid_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("partial "), ErrorChunk("backend overloaded", code=503)])

    events = await collect(provider, user("hi"))

    assert text_of(events) == "partial "
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_error"
    assert "backend overloaded" in events[-1].message


async def test_connection_dropped_mid_stream(served, provider) -> None:
    fake, _ = served
    fake.add_turn([Text("partial "), Drop()])

    events = await collect(provider, user("hi"))

    assert text_of(events) == "partial "
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_error"
    assert len(fake.generate_requests) == 1  # not silently resumed


async def test_silent_stall_is_provider_timeout(served) -> None:
    fake, url = served
    fake.add_turn([Text("a"), Hold()])
    provider = make(url, timeout_s=0.3)

    events = await collect(provider, user("hi"))

    assert text_of(events) == "a"
    assert isinstance(events[-1], StreamError) and events[-1].code == "provider_timeout"
    await provider.aclose()


@pytest.mark.parametrize("shared_client", [False, True])
async def test_consumer_stopping_closes_the_http_stream(served, no_gc, shared_client: bool) -> None:
    fake, url = served
    fake.add_turn([Text("first"), Hold(), Text("never sent")])
    async with httpx.AsyncClient() as shared:
        provider = make(url, http_client=shared if shared_client else None)

        stream = provider.stream_chat(user("hi"))
        async for event in stream:
            if isinstance(event, ContentDelta):
                break
        assert not fake.stream_closed_early.is_set()
        await stream.aclose()  # type: ignore[attr-defined]

        await asyncio.wait_for(fake.stream_closed_early.wait(), timeout=5)
        assert fake.requests[-1].closed_early
        await provider.aclose()


async def test_cancelled_consumer_closes_the_http_stream(served, provider, no_gc) -> None:
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


async def test_health(served) -> None:
    fake, url = served
    good = make(url)
    assert (await good.health()).ok
    assert fake.requests[-1].path.endswith(f"/models/{MODEL}") and fake.requests[-1].method == "GET"
    fake.models = ["gemini-other"]
    missing = await good.health()
    assert not missing.ok and "404" in missing.detail
    await good.aclose()


async def test_health_when_unreachable() -> None:
    provider = make(f"http://127.0.0.1:{free_port()}")
    health = await provider.health()
    assert not health.ok and "cannot reach" in health.detail
    await provider.aclose()


async def test_fake_embeddings_follow_the_real_api(served) -> None:
    """The fake's embedding endpoints, driven by the real client (other suites rely on them)."""
    from google import genai
    from google.genai import errors, types

    fake, url = served
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=url))
    full = await client.aio.models.embed_content(model="gemini-embedding-001", contents=["alpha beta", "alpha beta"])
    short = await client.aio.models.embed_content(
        model="gemini-embedding-001",
        contents=["alpha beta"],
        config=types.EmbedContentConfig(task_type="RETRIEVAL_QUERY", output_dimensionality=8),
    )
    with pytest.raises(errors.ClientError) as too_many:
        await client.aio.models.embed_content(model="gemini-embedding-001", contents=[f"t{i}" for i in range(101)])

    a, b = (e.values or [] for e in full.embeddings or [])
    assert len(a) == 3072 and a == b
    assert abs(sum(x * x for x in a) - 1.0) < 1e-4
    assert (short.embeddings or [])[0].values == a[:8]  # truncated, not renormalised
    assert too_many.value.code == 400
    assert fake.embed_requests[1]["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    await client.aio.aclose()
