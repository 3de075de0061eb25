"""The mandatory RAG flow of seeds 000–002, end to end over real SSE.

The full app runs (catalog, validation, knowledge base, keyword index, Perplexity
client, the four RAG tools); the model is the Ollama loopback fake driven by scripts
that read what the agent sent them, as a model would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, names, running_app
from tests.fakes import FakeOllama, Text, ToolCall, running_fake
from tests.fakes.perplexity import Answer, Fail, FakePerplexity, Source

pytestmark = pytest.mark.slow  # the mandatory flow end to end, an app and several runs a test

DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect to "
        "GET /v1/agent/runs/{run_id}/events with the Last-Event-ID header and the server replays "
        "every event you missed, then follows the run live.",
    },
    {
        "id": "doc-events",
        "title": "Event stream",
        "text": "Every run ends with exactly one message_complete event. Tool calls are reported with "
        "tool_call_start and tool_call_result events.",
    },
]
QUESTION = "How do I resume a stream after a disconnect?"

Step = Callable[[dict[str, Any]], list[Any]]


def tool_results(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """Decoded tool results the model was sent (error results carry Ollama's "ERROR: " prefix)."""
    return [
        orjson.loads(m["content"].removeprefix("ERROR: "))
        for m in body["messages"]
        if m["role"] == "tool" and m.get("tool_name") == name
    ]


def kb_sources(body: dict[str, Any]) -> list[str]:
    return [c["source_id"] for r in tool_results(body, "knowledge_base_search") for c in r.get("chunks", [])]


def search(query: str = "resume stream disconnect Last-Event-ID") -> Step:
    return lambda body: [ToolCall("knowledge_base_search", {"query": query, "top_k": 3})]


def answer(text: str = "Reconnect with Last-Event-ID.", *, external: bool = False) -> Step:
    def step(body: dict[str, Any]) -> list[Any]:
        sources = kb_sources(body)[:1]
        if external:
            sources += [r["perplexity_result_id"] for r in tool_results(body, "perplexity_search") if "perplexity_result_id" in r][:1]
        return [ToolCall("generate_response", {
            "answer": text, "sources": sources, "confidence_score": 0.8,
            "used_internal_kb": True, "used_external_kb": external,
        })]
    return step


def say(text: str) -> Step:
    return lambda body: [Text(text)]


def call(name: str, args: dict[str, Any]) -> Step:
    return lambda body: [ToolCall(name, args)]


@asynccontextmanager
async def flow_app(tmp_path: Path, steps: list[Step], **env: str) -> AsyncIterator[tuple[str, Any, FakeOllama, FakePerplexity]]:
    fake = FakeOllama([lambda body, s=s: s(body) for s in steps])
    pplx = FakePerplexity()
    async with running_fake(fake.app) as ollama_url, running_fake(pplx.app) as pplx_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
            "PERPLEXITY_API_KEY": pplx.api_key,
            "PERPLEXITY_BASE_URL": pplx_url,
            **env,
        })
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with running_app(settings, provider=provider, embedder=None) as (base, app):
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})
                assert r.status_code == 200, r.text
                assert r.json()["added"] == 2
            yield base, app, fake, pplx


async def ask(base: str, message: str = QUESTION, **extra: Any) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                 json={"message": message, "context_type": "knowledge", **extra})


def sent(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if r.get("messages")]


async def test_kb_then_generate_response(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [search(), answer()]) as (base, app, fake, _):
        events = await ask(base)
    assert names(events) == [
        "run_started", "tool_selection",
        "message_start", "tool_call_start", "tool_call_result",
        "message_start", "tool_call_start", "content_chunk", "response", "tool_call_result", "message_complete",
    ]
    response = next(e.json() for e in events if e.event == "response")
    assert response["answer"] == "Reconnect with Last-Event-ID."
    # The answer the call carries is streamed as text as it arrives (here whole: Ollama sends calls whole).
    assert [e.json()["chunk"] for e in events if e.event == "content_chunk"] == [response["answer"]]
    assert response["used_internal_kb"] is True and response["sources"][0]["kind"] == "internal"
    assert events[-1].json()["status"] == "completed"
    first_tools = {t["function"]["name"] for t in sent(fake)[0]["tools"]}
    assert "knowledge_base_search" in first_tools and "generate_response" in first_tools
    assert "perplexity_search" not in first_tools  # only offered once the KB was searched
    assert "perplexity_search" in {t["function"]["name"] for t in sent(fake)[1]["tools"]}
    kb = tool_results(sent(fake)[1], "knowledge_base_search")[0]
    assert kb["chunks"][0]["doc_id"] == "doc-resume"


async def test_model_skips_kb_once_is_reminded(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [say("I think you reconnect."), search(), answer()]) as (base, _, fake, _p):
        events = await ask(base)
    assert events[-1].json()["status"] == "completed"
    reminder = sent(fake)[1]["messages"][-1]
    assert reminder["role"] == "user"
    assert "knowledge_base_search" in reminder["content"] and "ERROR" in reminder["content"]
    assert "response" in names(events)


async def test_model_skips_kb_twice_fails(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [say("Just reconnect."), say("Really, reconnect.")]) as (base, _, _f, _p):
        events = await ask(base)
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "mandatory_tool_missing" and "knowledge_base_search" in err["message"]
    assert events[-1].json()["status"] == "failed"


async def test_first_call_to_another_tool_is_not_executed(tmp_path: Path) -> None:
    steps = [call("index_keywords", {"keywords": ["resume stream", "last event id", "reconnect"]}), search(), answer()]
    async with flow_app(tmp_path, steps) as (base, app, fake, _):
        events = await ask(base)
        keywords = app.state.services.rooms.keywords
        assert await keywords.lookup("resume stream") == []
    first = [e.json() for e in events if e.event == "tool_call_result"][0]
    assert first["name"] == "index_keywords" and first["is_error"] is True
    refused = [m for m in sent(fake)[1]["messages"] if m["role"] == "tool"][-1]
    assert "not_executed" in refused["content"]
    assert events[-1].json()["status"] == "completed"


async def test_plain_text_answer_is_streamed_then_generate_response_enforced(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [search(), say("Reconnect with Last-Event-ID."), answer()]) as (base, _, fake, _p):
        events = await ask(base)
    assert "Reconnect with Last-Event-ID." in "".join(e.json()["chunk"] for e in events if e.event == "content_chunk")
    assert "generate_response" in sent(fake)[2]["messages"][-1]["content"]
    assert events[-1].json()["status"] == "completed" and "response" in names(events)


async def test_generate_response_missing_twice_fails(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [search(), say("Reconnect."), say("Reconnect!")]) as (base, _, _f, _p):
        events = await ask(base)
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "mandatory_tool_missing" and "generate_response" in err["message"]
    assert events[-1].json()["status"] == "failed"


async def test_perplexity_then_keywords_then_answer_and_sc006_reuse(tmp_path: Path) -> None:
    keywords = ["Last-Event-ID header", "SSE resume", "EventSource reconnect"]
    steps = [
        search(),
        call("perplexity_search", {"query": "EventSource Last-Event-ID reconnect behaviour", "context": "KB covers resume"}),
        answer("too early", external=True),  # keywords not indexed yet: rejected
        call("index_keywords", {"keywords": keywords}),
        answer("Browsers resend Last-Event-ID on reconnect.", external=True),
    ]
    async with flow_app(tmp_path, steps) as (base, app, fake, pplx):
        pplx.add(Answer("Browsers resend the Last-Event-ID header when an EventSource reconnects.",
                        [Source("https://html.spec.whatwg.org/multipage/server-sent-events.html", "HTML SSE")]))
        events = await ask(base)
        results = [e.json() for e in events if e.event == "tool_call_result"]
        assert [(r["name"], r["is_error"]) for r in results] == [
            ("knowledge_base_search", False), ("perplexity_search", False), ("generate_response", True),
            ("index_keywords", False), ("generate_response", False),
        ]
        response = next(e.json() for e in events if e.event == "response")
        assert response["used_external_kb"] is True
        assert any(s["kind"] == "external" for s in response["sources"])
        assert events[-1].json()["status"] == "completed"
        # SC-006: the next question mentioning an indexed keyword gets the stored answer from the KB tool.
        fake.add_turn(lambda body: [ToolCall("knowledge_base_search", {"query": "SSE resume after reconnect"})])
        fake.add_turn(lambda body: [Text("done")])
        fake.add_turn(lambda body: [ToolCall("generate_response", {"answer": "ok", "sources": [],
                                                                    "used_internal_kb": False, "used_external_kb": False})])
        await ask(base, "Tell me about SSE resume")
        kb_second = tool_results(sent(fake)[-2], "knowledge_base_search")[-1]
        assert kb_second["external_answers"] and "Last-Event-ID" in kb_second["external_answers"][0]["answer"]


async def test_perplexity_rate_limited_is_a_readable_tool_error(tmp_path: Path) -> None:
    steps = [search(), call("perplexity_search", {"query": "latest SSE spec changes"}), answer()]
    async with flow_app(tmp_path, steps) as (base, _, fake, pplx):
        pplx.add(Fail(429, "slow down", retry_after="3"))
        events = await ask(base)
    result = [e.json() for e in events if e.event == "tool_call_result"][1]
    assert result["name"] == "perplexity_search" and result["is_error"] is True
    feedback = tool_results(sent(fake)[2], "perplexity_search")[-1]
    assert feedback["reason"] == "rate_limited" and "used_external_kb=false" in feedback["guidance"]
    assert events[-1].json()["status"] == "completed"


async def test_bad_keywords_come_back_with_reasons(tmp_path: Path) -> None:
    steps = [
        search(),
        call("perplexity_search", {"query": "EventSource reconnect"}),
        call("index_keywords", {"keywords": ["a", "the", "information"]}),
        call("index_keywords", {"keywords": ["EventSource reconnect", "Last-Event-ID", "SSE replay"]}),
        answer(external=True),
    ]
    async with flow_app(tmp_path, steps) as (base, _, fake, pplx):
        pplx.add(Answer("EventSource reconnects by itself.", [Source("https://example.org/sse", "SSE")]))
        events = await ask(base)
    bad = tool_results(sent(fake)[3], "index_keywords")[-1]
    text = orjson.dumps(bad).decode()
    assert "a" in text and ("generic" in text or "short" in text)
    assert events[-1].json()["status"] == "completed"


@pytest.mark.parametrize(
    "args",
    [
        {"query": "resume " * 100},  # over the 500-character limit
        {"query": "resume", "kb_id": "default_kb'; DROP TABLE kb_chunks; --"},
        {"query": "resume", "kb_id": "../../etc/passwd"},
    ],
)
async def test_injection_strings_are_rejected_before_execution(tmp_path: Path, args: dict[str, Any]) -> None:
    steps = [call("knowledge_base_search", args), search(), answer()]
    async with flow_app(tmp_path, steps) as (base, app, fake, _):
        events = await ask(base)
        await app.state.services.storage.db.flush()
        rows = await app.state.services.storage.db.fetchall("SELECT tool_name, status, retry_count FROM tool_calls ORDER BY id")
    first = [e.json() for e in events if e.event == "tool_call_result"][0]
    assert first["is_error"] is True
    feedback = tool_results(sent(fake)[1], "knowledge_base_search")[0]
    assert feedback["error"] == "invalid_parameters" and feedback["reason"] and feedback["guidance"]
    assert rows[0] == ("knowledge_base_search", "rejected", 0)
    assert rows[1] == ("knowledge_base_search", "retry", 1)
    assert events[-1].json()["status"] == "completed"


async def test_two_turn_conversation_carries_history(tmp_path: Path) -> None:
    steps = [search(), answer("Use Last-Event-ID."), search("message_complete event"), answer("Exactly one.")]
    async with flow_app(tmp_path, steps) as (base, app, fake, _):
        first = await ask(base)
        conversation_id = first[-1].json()["conversation_id"]
        second = await ask(base, "And how many message_complete events does a run end with?",
                           conversation_id=conversation_id)
        assert second[-1].json()["conversation_id"] == conversation_id
        history = sent(fake)[2]["messages"]
        contents = [m.get("content", "") for m in history]
        assert QUESTION in contents
        assert any(m["role"] == "assistant" for m in history[:-1])
        async with httpx.AsyncClient() as client:
            convo = (await client.get(f"{base}/v1/agent/conversations/{conversation_id}")).json()
        assert [m["content"] for m in convo["messages"] if m["role"] == "user" and m["content"]][:1] == [QUESTION]


async def test_extractive_provider_end_to_end(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_ADMIN_OPEN": "true"}
    )
    async with running_app(settings, provider=ExtractiveProvider(), embedder=None) as (base, _):
        async with httpx.AsyncClient(timeout=30) as client:
            assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        events = await ask(base)
    response = next(e.json() for e in events if e.event == "response")
    assert "Last-Event-ID" in response["answer"]
    assert response["sources"] and response["used_internal_kb"] is True
    streamed = "".join(e.json()["chunk"] for e in events if e.event == "content_chunk")
    assert streamed == response["answer"]
    assert events[-1].json()["status"] == "completed"


async def test_metrics_of_runs_through_the_loop(tmp_path: Path) -> None:
    """Time to first token, tokens in/out, provider errors by code and open streams move
    with real runs (read with Prometheus' own parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.fakes import HttpError

    def fail(body: dict[str, Any]) -> list[Any]:
        return [HttpError(503, "the model is overloaded")]

    def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    async with flow_app(tmp_path, [say("Let me look. "), search(), answer(), fail]) as (base, _app, _fake, _p):
        async with httpx.AsyncClient(timeout=30) as client:
            before = samples((await client.get(f"{base}/metrics")).text)
            assert before[("agentchat_open_streams", ())] == 0
            assert before[("agentchat_time_to_first_token_seconds_count", ())] == 0
            async with client.stream(
                "POST", f"{base}/v1/agent/chat", json={"message": QUESTION, "context_type": "knowledge"}
            ) as response:
                lines = response.aiter_lines()
                async for line in lines:
                    if line.startswith("event:"):
                        break  # the stream is open and has begun
                during = samples((await client.get(f"{base}/metrics")).text)
                async for _ in lines:
                    pass
            failed = await ask(base)
            after = samples((await client.get(f"{base}/metrics")).text)
    assert during[("agentchat_open_streams", ())] == 1
    assert after[("agentchat_open_streams", ())] == 0
    assert failed[-1].json()["status"] == "failed"
    assert after[("agentchat_time_to_first_token_seconds_count", ())] == 1  # the failed run streamed no text
    # Three scripted turns of the fake at 11 tokens in and 7 out each.
    assert after[("agentchat_tokens_total", (("direction", "in"),))] == 33
    assert after[("agentchat_tokens_total", (("direction", "out"),))] == 21
    codes = {labels: v for (name, labels), v in after.items() if name == "agentchat_provider_errors_total"}
    assert sum(codes.values()) == 1 and all(v == 1 for v in codes.values()), codes
