"""A conversation's title in one non-streamed model call (issue 23): Ollama ``stream:
false``, OpenAI-compatible without ``stream``, Gemini ``generateContent`` — one JSON body
instead of a stream of lines. Each provider against its loopback fake speaking that
documented non-streamed format; the title still generated, stored for its owner only and
counted; a failed call is a value (the words fallback, counted), never raised; the call
is counted among the replica's open model calls while in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from app.config import Settings
from app.history import TITLE_MAX_TOKENS, TITLE_PROMPT, Titler
from app.ops.history_metrics import HistoryMetrics
from app.ops.load import StreamCounter
from llm.gemini import GeminiProvider
from llm.ollama import OllamaProvider
from llm.openai import OpenAIProvider
from llm.provider import Completer, Completion
from llm.types import ChatRequest, Message, StreamError, Usage
from storage.history_records import ConversationSummary
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeGemini, FakeOllama, HttpError, Text, running_fake
from tests.fakes._script import RecordedRequest, is_title_request
from tests.fakes.openai import FakeOpenAI
from tests.support.deadline import within
from tests.test_compat_faces_owners import bearer, env

ALICE, BOB = bearer("alice"), bearer("bob")
GEMINI_KEY = "gemini-test-key"

Fake = FakeOllama | FakeOpenAI | FakeGemini


def title_request(question: str) -> ChatRequest:
    return ChatRequest(TITLE_PROMPT, [Message("user", question)], max_tokens=TITLE_MAX_TOKENS, temperature=0.2)


@asynccontextmanager
async def ollama() -> AsyncIterator[tuple[Fake, Any, dict[str, str]]]:
    fake = FakeOllama(lambda _body: [Text("An answer.")])
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        try:
            yield fake, provider, {"AGENT_LLM_PROVIDER": "ollama", "OLLAMA_HOST": url, "OLLAMA_MODEL": "llama3.2"}
        finally:
            await provider.aclose()


@asynccontextmanager
async def openai() -> AsyncIterator[tuple[Fake, Any, dict[str, str]]]:
    fake = FakeOpenAI(lambda _body: [Text("An answer.")], api_key="sk-test")
    async with running_fake(fake.app) as url:
        provider = OpenAIProvider(url + "/v1", "gpt-test", api_key="sk-test", timeout_s=10)
        try:
            yield (
                fake,
                provider,
                {
                    "AGENT_LLM_PROVIDER": "openai",
                    "OPENAI_BASE_URL": url + "/v1",
                    "OPENAI_API_KEY": "sk-test",
                    "OPENAI_MODEL": "gpt-test",
                },
            )
        finally:
            await provider.aclose()


@asynccontextmanager
async def gemini() -> AsyncIterator[tuple[Fake, Any, dict[str, str]]]:
    fake = FakeGemini(lambda _body: [Text("An answer.")], api_key=GEMINI_KEY)
    async with running_fake(fake.app) as url:
        provider = GeminiProvider(GEMINI_KEY, "gemini-2.5-flash", base_url=url, timeout_s=10, retry_attempts=1)
        try:
            yield fake, provider, {"AGENT_LLM_PROVIDER": "gemini", "GEMINI_API_KEY": GEMINI_KEY, "GEMINI_BASE_URL": url}
        finally:
            await provider.aclose()


PROVIDERS: dict[str, Callable[[], AbstractAsyncContextManager[tuple[Fake, Any, dict[str, str]]]]] = {
    "ollama": ollama,
    "openai": openai,
    "gemini": gemini,
}


def title_calls(fake: Fake) -> list[RecordedRequest]:
    return [r for r in fake.requests if r.method == "POST" and is_title_request(r.body)]


def assert_not_streamed(kind: str, rec: RecordedRequest) -> None:
    """The request asked for one whole answer in the provider's own documented way."""
    body = rec.body
    assert isinstance(body, dict)
    if kind == "ollama":
        assert rec.path == "/api/chat" and body["stream"] is False
        assert "tools" not in body
    elif kind == "openai":
        assert rec.path == "/v1/chat/completions"
        assert "stream" not in body and "stream_options" not in body and "tools" not in body
    else:
        assert rec.path.endswith(":generateContent") and "alt" not in rec.query
        assert "tools" not in body


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
async def test_complete_reads_one_whole_answer(kind: str) -> None:
    async with PROVIDERS[kind]() as (fake, provider, _env):
        fake.turns.title_turn = [Text("Resuming "), Text("dropped streams")]
        assert isinstance(provider, Completer)
        done = await provider.complete(title_request("How do I resume a stream?"))
    assert done.error is None
    assert done.text == "Resuming dropped streams"
    calls = title_calls(fake)
    assert len(calls) == 1
    assert_not_streamed(kind, calls[0])
    assert "How do I resume a stream?" in str(calls[0].body)


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
async def test_a_failed_complete_is_a_value_never_raised(kind: str) -> None:
    async with PROVIDERS[kind]() as (fake, provider, _env):
        fake.turns.title_turn = [HttpError(500, "the model fell over")]
        done = await provider.complete(title_request("How do I resume a stream?"))
    assert done.text == ""
    assert done.error is not None and done.error.code == "provider_error"
    assert "500" in done.error.message


async def test_an_unreachable_server_is_a_value_never_raised() -> None:
    provider = OllamaProvider("http://127.0.0.1:9", "llama3.2", timeout=5)
    try:
        done = await provider.complete(title_request("How do I resume a stream?"))
    finally:
        await provider.aclose()
    assert done.error is not None and done.error.code == "provider_unreachable"


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
async def test_each_users_new_conversation_is_titled_by_one_non_streamed_call(kind: str, tmp_path: Path) -> None:
    """The default configuration (``AGENT_CONVERSATION_TITLES=auto``) with each real
    provider: two JWT users' runs stream as before, then each conversation gets the
    model's title through one non-streamed call, stored for its owner only."""
    async with PROVIDERS[kind]() as (fake, _provider, provider_env):
        fake.turns.title_turn = [Text('"Resuming a dropped stream."')]
        settings = Settings.from_env(env(tmp_path, **provider_env))
        assert settings.conversation_titles == "auto"
        async with (
            running_app(settings) as (base, _),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            for who, question in ((ALICE, "How do I resume a stream?"), (BOB, "Why did my stream drop?")):
                body = {"message": question, "context_type": "workflow"}
                events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=who)
                assert [e.event for e in events].count("message_complete") == 1
                assert any(e.event == "content_chunk" for e in events)
            listed = {name: await titled(http, who) for name, who in (("alice", ALICE), ("bob", BOB))}
            metrics = (await http.get("/metrics")).text
    assert listed == {"alice": ["Resuming a dropped stream"], "bob": ["Resuming a dropped stream"]}
    calls = title_calls(fake)
    assert len(calls) == 2
    for rec in calls:
        assert_not_streamed(kind, rec)
    questions = sorted(str(rec.body) for rec in calls)
    assert "Why did my stream drop?" in questions[0] + questions[1]
    assert "How do I resume a stream?" in questions[0] + questions[1]
    assert 'agentchat_conversation_titles_total{source="model"} 2.0' in metrics


async def titled(http: httpx.AsyncClient, who: dict[str, str]) -> list[str] | None:
    """The caller's conversations' titles, once the background titler has set them."""
    for _ in range(500):
        listed = (await http.get("/v1/agent/conversations", headers=who)).json()["conversations"]
        if listed and all(c["title"] for c in listed):
            return [str(c["title"]) for c in listed]
        await asyncio.sleep(0.02)
    return None


class _Store:
    def __init__(self) -> None:
        self.title: str | None = None

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary | None:
        raise AssertionError("a new conversation is titled without a read")

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool:
        if self.title is None:
            self.title = title
            return True
        return False


class _Completing:
    """A provider with a non-streamed call only: ``stream_chat`` must not be used for titles."""

    name, model = "ollama", "fake"

    def __init__(self, answer: Completion, gate: asyncio.Event | None = None) -> None:
        self.answer, self.gate, self.asked = answer, gate, 0

    async def complete(self, request: ChatRequest) -> Completion:
        self.asked += 1
        if self.gate is not None:
            await self.gate.wait()
        return self.answer

    def stream_chat(self, request: ChatRequest) -> Any:
        raise AssertionError("the title asks the non-streamed call")


async def _titled(provider: Any) -> tuple[_Store, str]:
    store, registry = _Store(), CollectorRegistry()
    titler = Titler(store, HistoryMetrics(registry), provider)  # type: ignore[arg-type]
    titler.after_run("alice", "c", "How do I resume a stream after a disconnect?", new=True)
    await within(asyncio.gather(*titler._tasks), "the background titler")
    sample = registry.get_sample_value
    sources = {
        s: sample("agentchat_conversation_titles_total", {"source": s}) for s in ("model", "words_after_model_failed")
    }
    return store, next(s for s, v in sources.items() if v == 1.0)


async def test_the_titler_asks_the_non_streamed_call_and_cleans_its_answer() -> None:
    store, source = await _titled(_Completing(Completion(text='**"Resuming streams."**\nmore', usage=Usage(9, 3))))
    assert store.title == "Resuming streams" and source == "model"


async def test_a_failed_non_streamed_title_falls_back_to_the_words_visibly() -> None:
    failed = Completion(error=StreamError("Ollama returned HTTP 500: boom", "provider_error"))
    store, source = await _titled(_Completing(failed))
    assert store.title == "How do I resume a stream after a disconnect?"
    assert source == "words_after_model_failed"


async def test_a_non_streamed_call_is_counted_open_while_in_flight() -> None:
    gate = asyncio.Event()
    inner = _Completing(Completion(text="Resuming streams"), gate)
    counter = StreamCounter(inner)
    call = asyncio.create_task(counter.complete(title_request("q")))
    for _ in range(100):
        if inner.asked:
            break
        await asyncio.sleep(0)
    assert inner.asked == 1 and counter.open == 1 and counter.started == 1
    gate.set()
    assert (await call).text == "Resuming streams"
    assert counter.open == 0 and counter.started == 1


def test_a_provider_without_a_non_streamed_call_has_none_behind_the_counter() -> None:
    class StreamOnly:
        name, model = "scripted", "fake"

        def stream_chat(self, request: ChatRequest) -> Any:
            raise NotImplementedError

    assert not hasattr(StreamCounter(StreamOnly()), "complete")
    assert not isinstance(StreamCounter(StreamOnly()), Completer)


async def test_a_traced_non_streamed_call_is_one_span_with_its_outcome() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.ops.tracing import TracedProvider

    tracer_provider, memory = TracerProvider(), InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = tracer_provider.get_tracer("test")
    try:
        ok = TracedProvider(_Completing(Completion(text="Resuming streams")), tracer)  # type: ignore[arg-type]
        refused = Completion(error=StreamError("Ollama returned HTTP 500: boom", "provider_error"))
        failed = TracedProvider(_Completing(refused), tracer)  # type: ignore[arg-type]
        assert (await ok.complete(title_request("q"))).text == "Resuming streams"  # type: ignore[attr-defined]
        assert (await failed.complete(title_request("q"))).error is not None  # type: ignore[attr-defined]
        first, second = memory.get_finished_spans()
    finally:
        tracer_provider.shutdown()
    assert first.name == second.name == "chat fake"
    assert dict(first.attributes or {})["agentchat.outcome"] == "complete" and first.status.is_ok
    a = dict(second.attributes or {})
    assert a["agentchat.outcome"] == "error" and a["error.type"] == "provider_error" and not second.status.is_ok


async def test_a_complete_on_a_closed_ollama_client_is_a_value_never_raised() -> None:
    """The Completer contract (only cancellation is raised) holds for an error outside
    the HTTP and JSON ones too: the titler then falls back to the words, counted."""
    async with ollama() as (fake, provider, _env):
        await provider.aclose()
        done = await provider.complete(title_request("How do I resume a stream?"))
    assert done.text == ""
    assert done.error is not None and done.error.code == "provider_error"
    assert title_calls(fake) == []
