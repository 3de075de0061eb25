"""/v1/agent/chat end to end: real uvicorn, the real ollama client against a loopback
fake of Ollama, and the stream parsed the way a browser's EventSource parses it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from llm.ollama import OllamaProvider
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ToolDefinition
from tests.conftest import collect_sse, names, running_app
from tests.fakes import ErrorChunk, FakeOllama, Hold, HttpError, Text, ToolCall, ToolCalls, running_fake

ALL = frozenset({"workflow", "tables", "knowledge"})


@dataclass
class ToolProbe:
    """Test tools whose handlers record what happened to them."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def registry(self) -> ToolRegistry:
        reg = ToolRegistry(
            [
                ToolSpec(
                    ToolDefinition(
                        "get_weather",
                        "Current weather for a city.",
                        {
                            "type": "object",
                            "properties": {"city": {"type": "string", "maxLength": 100}},
                            "required": ["city"],
                            "additionalProperties": False,
                        },
                    ),
                    ALL,
                ),
                ToolSpec(
                    ToolDefinition(
                        "wait_for_backend",
                        "Waits for a slow backend.",
                        {"type": "object", "properties": {}, "additionalProperties": False},
                    ),
                    ALL,
                ),
            ]
        )

        async def weather(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            self.calls.append({"args": args, "authorization": ctx.authorization})
            return ToolOutcome({"city": args["city"], "temp_c": 21 if args["city"] == "Paris" else 3})

        async def wait(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return ToolOutcome({})

        reg.set_handler("get_weather", weather)
        reg.set_handler("wait_for_backend", wait)
        return reg


@pytest.fixture
def probe() -> ToolProbe:
    return ToolProbe()


async def chat_events(base: str, body: dict[str, Any], **kw: Any) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body, **kw)


BODY = {"message": "What is the weather in Paris?", "context_type": "workflow", "context": {}}


@pytest.fixture
async def ollama_fake() -> AsyncIterator[tuple[FakeOllama, str]]:
    fake = FakeOllama()
    async with running_fake(fake.app) as url:
        yield fake, url


def turns_sent(fake: FakeOllama) -> list[dict[str, Any]]:
    """Chat requests that carried a conversation (the start-up warm-up carries none)."""
    return [r for r in fake.chat_requests if r.get("messages")]


def ollama_provider(url: str) -> OllamaProvider:
    return OllamaProvider(url, "llama3.2", timeout=10)


async def test_text_only_answer(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([Text("Hello"), Text(", world")])
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    assert names(events) == [
        "run_started", "tool_selection", "message_start", "content_chunk", "content_chunk", "message_complete",
    ]
    assert [e.id for e in events] == [str(i) for i in range(1, len(events) + 1)]
    assert "".join(e.json()["chunk"] for e in events if e.event == "content_chunk") == "Hello, world"
    done = events[-1].json()
    assert done["status"] == "completed" and done["turns"] == 1
    assert done["usage"]["input_tokens"] > 0
    assert events[0].json()["run_id"] == done["run_id"]
    sent = turns_sent(fake)[0]
    assert sent["stream"] is True
    assert {t["function"]["name"] for t in sent["tools"]} == {"get_weather", "wait_for_backend"}
    assert sent["messages"][-1] == {"role": "user", "content": BODY["message"]}


async def test_tool_round_trip_feeds_result_back(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([ToolCall("get_weather", {"city": "Paris"})])
    fake.add_turn([Text("It is 21 °C in Paris.")])
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY, headers={"Authorization": "Bearer abc"})
    assert names(events) == [
        "run_started", "tool_selection", "message_start", "tool_call_start", "tool_call_result",
        "message_start", "content_chunk", "message_complete",
    ]
    start = next(e.json() for e in events if e.event == "tool_call_start")
    result = next(e.json() for e in events if e.event == "tool_call_result")
    assert start["tool_use_id"] == result["tool_use_id"] and start["name"] == "get_weather"
    assert result["is_error"] is False and result["duration_ms"] >= 0
    assert probe.calls == [{"args": {"city": "Paris"}, "authorization": "Bearer abc"}]
    second = turns_sent(fake)[1]["messages"]
    tool_msg = second[-1]
    assert tool_msg["role"] == "tool" and tool_msg["tool_name"] == "get_weather"
    assert orjson.loads(tool_msg["content"]) == {"city": "Paris", "temp_c": 21}
    assert second[-2]["role"] == "assistant" and second[-2]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert events[-1].json()["turns"] == 2


async def test_two_parallel_tool_calls_are_both_kept(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([ToolCalls([ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Oslo"})])])
    fake.add_turn([Text("Paris 21, Oslo 3.")])
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    starts = [e.json() for e in events if e.event == "tool_call_start"]
    results = [e.json() for e in events if e.event == "tool_call_result"]
    assert len(starts) == 2 and len({s["tool_use_id"] for s in starts}) == 2
    assert [r["tool_use_id"] for r in results] == [s["tool_use_id"] for s in starts]
    assert sorted(c["args"]["city"] for c in probe.calls) == ["Oslo", "Paris"]
    tool_msgs = [m for m in turns_sent(fake)[1]["messages"] if m["role"] == "tool"]
    assert [orjson.loads(m["content"])["city"] for m in tool_msgs] == ["Paris", "Oslo"]
    assert events[-1].json()["status"] == "completed"


async def test_provider_http_error_at_start(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([HttpError(500, "model exploded")])
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "provider_error" and "model exploded" in err["message"]
    assert names(events)[-2:] == ["error", "message_complete"]
    assert events[-1].json()["status"] == "failed"


async def test_provider_unreachable(settings: Settings, probe: ToolProbe) -> None:
    provider = OllamaProvider("http://127.0.0.1:9", "llama3.2", timeout=5)
    async with running_app(settings, provider=provider, registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "provider_unreachable"
    assert events[-1].event == "message_complete" and events[-1].json()["status"] == "failed"


async def test_provider_error_mid_stream(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([Text("Partial answ"), ErrorChunk("GPU fell over")])
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    assert names(events)[-3:] == ["content_chunk", "error", "message_complete"]
    assert "GPU fell over" in next(e.json() for e in events if e.event == "error")["message"]
    assert events[-1].json()["status"] == "failed"


async def test_disconnect_mid_stream_closes_the_provider_stream(
    settings: Settings, probe: ToolProbe, ollama_fake: Any
) -> None:
    fake, url = ollama_fake
    fake.add_turn([Text("Thinking about it"), Hold()])
    settings = settings.with_(chat_reattach_s=0)  # cancel on leaving, not after the 3 s re-attach window
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, app):
        events = await chat_events(base, BODY, stop=lambda e: e.event == "content_chunk")
        assert events[-1].event == "content_chunk"
        await asyncio.wait_for(fake.stream_closed_early.wait(), timeout=10)
        runs = app.state.services.runs
        [run] = list(runs._runs.values())
        await asyncio.wait_for(run.wait_finished(), timeout=10)
        assert run.status == "cancelled"
        assert run.task is not None and run.task.done()
        assert [e.event for e in run.events][-1] == "message_complete"
        # The partial answer is kept in the conversation.
        await app.state.services.storage.db.flush()
        stored = await app.state.services.conversations.load(run.conversation_id, run.user_id)
        assert stored[-1].role == "assistant" and stored[-1].content == "Thinking about it"
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("agent:")]


async def test_disconnect_cancels_a_running_tool(settings: Settings, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    fake.add_turn([ToolCall("wait_for_backend", {})])
    settings = settings.with_(chat_reattach_s=0)  # cancel on leaving, not after the 3 s re-attach window
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, app):
        # Stay connected until the tool runs (it starts once the turn is stored), then leave.
        reader = asyncio.create_task(chat_events(base, BODY))
        await asyncio.wait_for(probe.started.wait(), timeout=10)
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await asyncio.wait_for(probe.cancelled.wait(), timeout=10)
        [run] = list(app.state.services.runs._runs.values())
        await asyncio.wait_for(run.wait_finished(), timeout=10)
        assert run.status == "cancelled"
        # The stored conversation answers the call that never finished, so the
        # conversation's next run sends providers a valid history.
        await app.state.services.storage.db.flush()
        stored = await app.state.services.conversations.load(run.conversation_id, run.user_id)
        assert stored[-2].tool_calls[0].name == "wait_for_backend"
        assert stored[-1].tool_results[0].tool_call_id == stored[-2].tool_calls[0].id
        assert stored[-1].tool_results[0].is_error


async def test_max_loops(tmp_path: Any, probe: ToolProbe, ollama_fake: Any) -> None:
    fake, url = ollama_fake
    for _ in range(3):
        fake.add_turn([ToolCall("get_weather", {"city": "Paris"})])
    settings = Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_MANDATORY_CONTEXTS": "none", "AGENT_MAX_LOOPS": "3"}
    )
    async with running_app(settings, provider=ollama_provider(url), registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "max_loops"
    assert names(events).count("message_start") == 3 and len(probe.calls) == 3
    assert events[-1].json()["status"] == "failed"


async def test_malformed_tool_arguments_are_returned_then_fail(settings: Settings, probe: ToolProbe) -> None:
    provider = ScriptedProvider([ScriptedTurn(calls=[ScriptedCall("get_weather", '{"city": "Par')])] * 2)
    async with running_app(settings, provider=provider, registry=probe.registry(), embedder=None) as (base, _):
        events = await chat_events(base, BODY)
    results = [e.json() for e in events if e.event == "tool_call_result"]
    assert [r["is_error"] for r in results] == [True, True]
    assert not probe.calls
    feedback = provider.requests[1].messages[-1].tool_results[0].content
    assert "invalid_arguments_json" in feedback
    assert next(e.json() for e in events if e.event == "error")["code"] == "malformed_tool_call"
    assert events[-1].json()["status"] == "failed"


async def test_a_body_that_is_not_utf8_is_named_as_such(settings: Settings, probe: ToolProbe) -> None:
    """orjson calls any byte that is not UTF-8 "surrogates not allowed" - words about
    something the client never sent; the detail names the byte."""
    async with running_app(settings, provider=ScriptedProvider([]), registry=probe.registry(), embedder=None) as (
        base,
        _,
    ):
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(f"{base}/v1/agent/chat", content=b'{"message": "caf\xe9"}',
                                         headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"] == "invalid_json"
    assert response.json()["detail"] == "the body is not valid JSON: it is not UTF-8 text (byte 0xe9 at offset 16)"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"", 400, "invalid_json"),
        (b"[1, 2]", 400, "invalid_request"),
        (orjson.dumps({"context_type": "workflow"}), 400, "invalid_field"),
        (orjson.dumps({"message": "   ", "context_type": "workflow"}), 400, "invalid_field"),
        (orjson.dumps({"message": 42, "context_type": "workflow"}), 400, "invalid_field"),
        (orjson.dumps({"message": "hi", "context_type": "spreadsheets"}), 400, "unknown_context_type"),
        (orjson.dumps({"message": "hi"}), 400, "unknown_context_type"),
        (orjson.dumps({"message": "hi", "context_type": "tables", "context": [1]}), 400, "invalid_field"),
        (orjson.dumps({"message": "hi", "context_type": "tables", "context": "x"}), 400, "invalid_field"),
        (orjson.dumps({"message": "hi", "context_type": "tables", "conversation_id": "../x"}), 400, "invalid_field"),
        (orjson.dumps({"message": "x" * (1024 * 1024 + 10), "context_type": "tables"}), 413, "payload_too_large"),
    ],
)
async def test_bad_input_is_a_json_4xx(settings: Settings, probe: ToolProbe, body: bytes, status: int, error: str) -> None:
    provider = ScriptedProvider([])
    async with running_app(settings, provider=provider, registry=probe.registry(), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=30) as client:
            response = await client.post(f"{base}/v1/agent/chat", content=body,
                                         headers={"Content-Type": "application/json"})
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    payload = response.json()
    assert payload["error"] == error and payload["detail"]
    assert provider.requests == []


async def test_cors_preflight_and_single_origin_header(tmp_path: Any, probe: ToolProbe) -> None:
    settings = Settings.from_env(
        {
            "AGENT_DB_PATH": str(tmp_path / "a.db"),
            "AGENT_MANDATORY_CONTEXTS": "none",
            "AGENT_CORS_ORIGINS": "https://app.example.com,https://admin.example.com",
        }
    )
    provider = ScriptedProvider([ScriptedTurn(chunks=["hi"])])
    async with running_app(settings, provider=provider, registry=probe.registry(), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=30) as client:
            pre = await client.options(
                f"{base}/v1/agent/chat",
                headers={
                    "Origin": "https://admin.example.com",
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type",
                },
            )
            assert pre.status_code == 200
            assert pre.headers.get_list("access-control-allow-origin") == ["https://admin.example.com"]
            assert "POST" in pre.headers["access-control-allow-methods"]
            bad = await client.options(
                f"{base}/v1/agent/chat",
                headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
            )
            assert bad.status_code == 400
            async with client.stream(
                "POST", f"{base}/v1/agent/chat", json=BODY, headers={"Origin": "https://app.example.com"}
            ) as response:
                assert response.headers.get_list("access-control-allow-origin") == ["https://app.example.com"]
                await response.aread()


async def test_health_and_readiness(settings: Settings, probe: ToolProbe) -> None:
    provider = ScriptedProvider([])
    async with running_app(settings, provider=provider, registry=probe.registry(), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await client.get(f"{base}/healthz")).json() == {"status": "ok"}
            ready = await client.get(f"{base}/readyz")
            assert ready.status_code == 200
            body = ready.json()
            assert body["ready"] is True
            assert body["checks"]["tool_index"]["status"] == "disabled"
            metrics = await client.get(f"{base}/metrics")
            assert "agentchat_runs_started_total 0" in metrics.text
            missing = await client.get(f"{base}/nope")
            assert missing.status_code == 404 and missing.json()["error"] == "not_found"
