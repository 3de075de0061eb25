"""Conversation titles (issue 25 item 1): by default (``AGENT_CONVERSATION_TITLES=auto``)
from a real model (a short call after the run, never failing it), the question's first
words when that call fails or the provider is not a real LLM; ``model`` asks any provider."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from app.config import Settings
from app.history import TITLE_PROMPT, Titler, clean_model_title, title_model_wanted, words_title
from app.ops.history_metrics import HistoryMetrics
from llm.provider import ProviderHealth
from llm.types import ChatRequest, ContentDelta, MessageStart, StreamError, StreamEvent
from storage.errors import StorageUnavailable
from storage.history_records import ConversationSummary
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, Text, running_fake
from tests.support.gated_provider import GatedProvider, GatedTurn
from tests.test_compat_faces_owners import bearer, env

ALICE = bearer("alice")


def test_words_title_cuts_on_a_word_boundary() -> None:
    assert words_title("  How   do I\nresume a stream? ") == "How do I resume a stream?"
    long = "Why does my workflow never trigger on updates to the stock table at night?"
    assert words_title(long) == "Why does my workflow never trigger on updates to the stock…"
    assert words_title("x" * 100) == "x" * 59 + "…"  # one long word is cut where it must be


async def test_the_model_titles_a_conversation_once(tmp_path: Path) -> None:
    asked: list[str] = []

    def turn(request: ChatRequest, _i: int) -> GatedTurn:
        if request.system_prompt == TITLE_PROMPT:
            asked.append(request.messages[-1].content)
            return GatedTurn(['"Resuming streams."\n'])
        return GatedTurn(["An answer."])

    settings = Settings.from_env(env(tmp_path, AGENT_CONVERSATION_TITLES="model"))
    async with (
        running_app(settings, provider=GatedProvider(turn)) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        for question in ("How do I resume a stream after a disconnect?", "And a second question"):
            body = {"message": question, "context_type": "workflow", "conversation_id": "titled"}
            events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
            assert events[-1].event == "message_complete"
            for _ in range(500):
                listed = (await http.get("/v1/agent/conversations", headers=ALICE)).json()["conversations"]
                if listed and listed[0]["title"]:
                    break
                await asyncio.sleep(0.02)
            assert listed[0]["title"] == "Resuming streams"
        metrics = (await http.get("/metrics")).text
    assert asked == ["How do I resume a stream after a disconnect?"]  # the second run finds a title
    assert 'agentchat_conversation_titles_total{source="model"} 1.0' in metrics


class FailingModel:
    name, model = "failing", "failing"

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        yield StreamError("the model is down", "provider_unreachable")

    async def health(self) -> ProviderHealth:
        return ProviderHealth(False, "down")

    async def aclose(self) -> None:
        return None


class OneConversation:
    """A history store holding one untitled conversation (what ``Titler`` reads and writes)."""

    def __init__(self) -> None:
        self.title: str | None = None

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary:
        return ConversationSummary(conversation_id, self.title, 0.0, 0.0, "completed")

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool:
        if self.title is not None:
            return False
        self.title = title
        return True


async def test_a_failed_model_call_falls_back_to_the_words_visibly() -> None:
    store = OneConversation()
    metrics = HistoryMetrics(CollectorRegistry())
    titler = Titler(store, metrics, FailingModel())  # type: ignore[arg-type]
    titler.after_run("alice", "c", "Why does my workflow never trigger on updates to the stock table at night?")
    await asyncio.gather(*titler._tasks)
    assert store.title == "Why does my workflow never trigger on updates to the stock…"
    assert metrics.titles.labels(source="words_after_model_failed")._value.get() == 1


def test_model_titles_are_cleaned() -> None:
    assert clean_model_title('**Title: "Resuming streams."**\nmore') == "Resuming streams"
    assert clean_model_title("   \n") == ""


async def listed_title(http: httpx.AsyncClient, headers: dict[str, str]) -> str | None:
    """The first listed conversation's title, once the background titler has set one."""
    for _ in range(500):
        listed = (await http.get("/v1/agent/conversations", headers=headers)).json()["conversations"]
        if listed and listed[0]["title"]:
            return str(listed[0]["title"])
        await asyncio.sleep(0.02)
    return None


async def test_by_default_a_real_model_titles_the_conversation(tmp_path: Path) -> None:
    """The default configuration with Ollama (a loopback fake speaking its NDJSON API):
    the run's answer streams, then the model's own title is the conversation's."""
    fake = FakeOllama(lambda _body: [Text("Resume with Last-Event-ID.")])
    fake.turns.title_turn = [Text('"Resuming a dropped stream."')]
    async with running_fake(fake.app) as url:
        settings = Settings.from_env(
            env(tmp_path, AGENT_LLM_PROVIDER="ollama", OLLAMA_HOST=url, OLLAMA_MODEL="llama3.2")
        )
        assert settings.conversation_titles == "auto"
        async with (
            running_app(settings) as (base, _),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            body = {"message": "How do I resume a stream after a disconnect?", "context_type": "workflow"}
            events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
            assert events[-1].event == "message_complete"
            assert await listed_title(http, ALICE) == "Resuming a dropped stream"
            metrics = (await http.get("/metrics")).text
    assert len(fake.turns.title_requests) == 1
    assert "How do I resume a stream after a disconnect?" in str(fake.turns.title_requests[0]["messages"])
    assert 'agentchat_conversation_titles_total{source="model"} 1.0' in metrics


async def test_by_default_a_scripted_provider_gets_no_title_call(tmp_path: Path) -> None:
    """``auto`` asks only a real LLM: a scripted provider's turns stay the run's own."""
    asked: list[ChatRequest] = []

    def turn(request: ChatRequest, _i: int) -> GatedTurn:
        asked.append(request)
        return GatedTurn(["An answer."])

    async with (
        running_app(Settings.from_env(env(tmp_path)), provider=GatedProvider(turn)) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        body = {"message": "Why does my workflow never trigger?", "context_type": "workflow"}
        events = await collect_sse(http, "POST", "/v1/agent/chat", json=body, headers=ALICE)
        assert events[-1].event == "message_complete"
        assert await listed_title(http, ALICE) == "Why does my workflow never trigger?"
    assert all(r.system_prompt != TITLE_PROMPT for r in asked)


def test_which_providers_write_titles() -> None:
    assert [title_model_wanted("auto", p) for p in ("ollama", "gemini", "openai")] == [True, True, True]
    assert not title_model_wanted("auto", "extractive") and not title_model_wanted("auto", "gated")
    assert title_model_wanted("model", "gated") and not title_model_wanted("model", "extractive")
    assert not title_model_wanted("words", "ollama") and not title_model_wanted("off", "ollama")


class RamblingModel:
    """A model that ignores ``max_tokens``: its title line, then lines without end.
    Counts the deltas it was asked for and whether its stream was closed."""

    name, model = "rambling", "rambling"

    def __init__(self, first: list[str]) -> None:
        self.first = first
        self.sent = 0
        self.closed = False

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        try:
            for text in self.first:
                self.sent += 1
                yield ContentDelta(text)
            while True:
                self.sent += 1
                yield ContentDelta("and then some more words about it ")
        finally:
            self.closed = True

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "up")

    async def aclose(self) -> None:
        return None


async def test_the_title_call_reads_only_the_first_line() -> None:
    """Issue 23: a title is the reply's first line, so the call stops reading there
    (each run's title call must not cost as much as its answer)."""
    store = OneConversation()
    model = RamblingModel(["\n", '"Resuming', " streams", '."', "\nA longer explanation"])
    titler = Titler(store, HistoryMetrics(CollectorRegistry()), model)  # type: ignore[arg-type]
    titler.after_run("alice", "c", "How do I resume a stream?")
    await asyncio.gather(*titler._tasks)
    assert store.title == "Resuming streams"
    assert model.sent == 5 and model.closed


async def test_a_title_without_a_line_end_is_read_to_a_bound() -> None:
    store = OneConversation()
    model = RamblingModel(["Resuming streams "])
    titler = Titler(store, HistoryMetrics(CollectorRegistry()), model)  # type: ignore[arg-type]
    titler.after_run("alice", "c", "How do I resume a stream?")
    await asyncio.gather(*titler._tasks)
    assert store.title is not None and store.title.startswith("Resuming streams and then")
    assert len(store.title) <= 60
    assert model.closed and model.sent < 20


class CountingConversation(OneConversation):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary:
        self.reads += 1
        return await super().conversation(user_id, conversation_id)


async def test_a_conversation_the_run_created_is_titled_without_a_read_and_a_title_set_meanwhile_stays() -> None:
    """Issue 23: the run created the conversation, so the titler does not read it first;
    a title set meanwhile (``PATCH``) is still never overwritten."""
    store = CountingConversation()
    model = RamblingModel(["Resuming streams\n"])
    titler = Titler(store, HistoryMetrics(CollectorRegistry()), model)  # type: ignore[arg-type]
    titler.after_run("alice", "c", "How do I resume a stream?", new=True)
    await asyncio.gather(*titler._tasks)
    assert store.title == "Resuming streams" and store.reads == 0
    store.title = "Set by the user"
    titler.after_run("alice", "c", "Another question", new=True)
    await asyncio.gather(*titler._tasks)
    assert store.title == "Set by the user"
    asked = model.sent
    titler.after_run("alice", "c", "A later run", new=False)  # reads, finds the title, asks no model
    await asyncio.gather(*titler._tasks)
    assert store.reads == 1 and store.title == "Set by the user" and model.sent == asked


class UnreachableHistory:
    """A history store whose database is away (what PostgreSQL's stores raise then)."""

    async def conversation(self, user_id: str, conversation_id: str) -> ConversationSummary:
        raise StorageUnavailable("database unreachable: PoolTimeout: couldn't get a connection after 10.00 sec")

    async def set_title_if_unset(self, user_id: str, conversation_id: str, title: str) -> bool:
        raise StorageUnavailable("database unreachable: PoolTimeout: couldn't get a connection after 10.00 sec")


async def test_a_database_outage_is_one_line_per_title_not_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """Walking two replicas through a 40 s PostgreSQL stop, every run that ended meanwhile
    logged 'could not title a conversation' with a ~3 kB traceback of the pool's timeout:
    the only tracebacks of the outage, for a cause /readyz and the writer already name."""
    titler = Titler(UnreachableHistory(), HistoryMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="agentchat.history"):
        titler.after_run("alice", "c", "How do I resume a stream?", new=True)
        titler.after_run("alice", "d", "How do I resume a stream?")
        await asyncio.gather(*titler._tasks)
    said = [r for r in caplog.records if r.name == "agentchat.history"]
    assert [r.getMessage() for r in said] == ["could not title a conversation: the database is unavailable"] * 2
    assert all(r.exc_info is None for r in said)
    assert all("PoolTimeout" in r.__dict__["error"] for r in said)
