"""The defaults users run, proved: this is where they are.

Each row is ``agentchat serve`` as a real process on a fresh database with the default
settings (provider and embedder ``auto``, the sample knowledge base ingested on first
start); only the URLs and keys of the services it should find point at loopback fakes
that behave like the real servers: the Ollama fake tells its embedding length through
``/api/show`` only, and its first embedding is slow (it loads the model); the Gemini and
OpenAI-compatible fakes are slow on their first embedding too. ``make dev``'s exact
environment (``AGENT_LLM_PROVIDER=ollama AGENT_EMBEDDER=ollama OLLAMA_MODEL=qwen3:4b``)
is one row. For every row:

* ``/readyz`` answers 200, naming the embedder and why it was chosen, with the sample
  knowledge base ingested and semantic search running on vectors;
* ``search_semantic`` (called by the model the fake plays) runs in ``semantic`` mode and
  the knowledge question is answered with sources — offline, the extractive answerer
  asks ``knowledge_base_search``, whose hybrid search must not have fallen back to text
  (``agentchat_kb_semantic_fallbacks`` stays 0);
* and after a restart over the same database ``/readyz`` does not say ready while the
  embedder cannot embed (so an ingest would fail), then does once it can, and a document
  posted then is stored and found by meaning.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from client import AgentClient
from tests.fakes import FakeGemini, FakeOllama, HttpError, ToolCall, running_fake
from tests.fakes.openai import FakeOpenAI
from tests.support.procs import AgentServer, until
from tests.support.readyz_counts import counts_current, current

pytestmark = pytest.mark.slow  # real `agentchat serve` processes against fakes, a restart each

QUESTION = "How do I resume a stream after a disconnect?"
#: Longer than the old 2 s Ollama probe timeout: a first embedding that loads a model.
COLD_START_S = 2.5
UNREACHABLE = "http://127.0.0.1:9"

_MODE = re.compile(r'\\*"mode\\*":\s*\\*"(\w+)')
_DOC_ID = re.compile(r'\\*"doc_id\\*":\s*\\*"([^"\\]+)')


@dataclass
class KnowledgeModel:
    """Plays the chat model: ``search_semantic`` first, then ``generate_response`` citing
    the first passage found. Records the ``mode`` each search result reported."""

    query: str = QUESTION
    modes: list[str] = field(default_factory=list)

    def __call__(self, body: Any) -> list[Any]:
        text = orjson.dumps(body).decode()
        if "cite_with" not in text:  # no search result yet in the conversation
            return [ToolCall("search_semantic", {"bucket": "default", "query": self.query})]
        tail = text[max(0, text.rindex("cite_with") - 20_000) :] if len(text) > 20_000 else text
        self.modes.extend(_MODE.findall(tail)[-1:])
        doc_id = _DOC_ID.findall(tail)[0]
        answer = f"Reconnect and send the last event id you saw [{doc_id}]."
        return [
            ToolCall(
                "generate_response",
                {"answer": answer, "sources": [doc_id], "used_internal_kb": True, "used_external_kb": False},
            )
        ]


@dataclass
class Row:
    """One configuration: its environment (only service URLs and keys, or ``make dev``'s),
    the embedder and provider ``auto`` must land on, and the model the fake plays."""

    env: dict[str, str]
    embedder: str
    provider: str
    model: KnowledgeModel | None


@asynccontextmanager
async def ollama_row(**env: str) -> AsyncIterator[Row]:
    model = KnowledgeModel()
    fake = FakeOllama(
        model, models=["qwen3:4b", "nomic-embed-text:latest"], embed_dim=256, first_embed_delay_s=COLD_START_S
    )
    async with running_fake(fake.app) as url:
        yield Row({"OLLAMA_HOST": url, **env}, "ollama", "ollama", model)


@asynccontextmanager
async def gemini_row() -> AsyncIterator[Row]:
    model = KnowledgeModel()
    fake = FakeGemini(model, api_key="gemini-test-key", first_embed_delay_s=COLD_START_S)
    async with running_fake(fake.app) as url:
        env = {"GEMINI_API_KEY": "gemini-test-key", "GEMINI_BASE_URL": url, "OLLAMA_HOST": UNREACHABLE}
        yield Row(env, "gemini", "gemini", model)


@asynccontextmanager
async def openai_row() -> AsyncIterator[Row]:
    model = KnowledgeModel()
    fake = FakeOpenAI(
        model, models=("gpt-4o-mini", "text-embedding-3-small"), api_key="sk-test", first_embed_delay_s=COLD_START_S
    )
    async with running_fake(fake.app) as url:
        env = {"OPENAI_BASE_URL": url + "/v1", "OPENAI_API_KEY": "sk-test", "OLLAMA_HOST": UNREACHABLE}
        yield Row(env, "openai", "openai", model)


@asynccontextmanager
async def offline_row() -> AsyncIterator[Row]:
    # The embedder is the local MiniLM when its extra is installed, else the hashing one.
    yield Row({"OLLAMA_HOST": UNREACHABLE}, "", "extractive", None)


MAKE_DEV = {"AGENT_LLM_PROVIDER": "ollama", "AGENT_EMBEDDER": "ollama", "OLLAMA_MODEL": "qwen3:4b",
            "AGENT_LOG_FORMAT": "text"}

ROWS: dict[str, Callable[[], Any]] = {
    "ollama": ollama_row,
    "make-dev": lambda: ollama_row(**MAKE_DEV),
    "gemini": gemini_row,
    "openai-compatible": openai_row,
    "offline": offline_row,
}


def check(body: dict[str, Any] | None, name: str) -> dict[str, Any]:
    return dict(((body or {}).get("checks") or {}).get(name) or {})


async def chat(base: str, question: str) -> list[tuple[str, dict[str, Any]]]:
    async with AgentClient(base) as agent:
        return [(event.name, event.to_dict()) async for event in agent.chat(question, "knowledge")]


async def semantic_fallbacks(base: str) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"{base}/metrics")).text
    found = re.search(r"^agentchat_kb_semantic_fallbacks_total (\S+)$", text, re.M)
    assert found, "agentchat_kb_semantic_fallbacks is not exported"
    return float(found.group(1))


def answered_from_the_kb(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    responses = [data for name, data in events if name == "response"]
    assert responses, [name for name, _ in events]
    response = responses[-1]
    assert response.get("used_internal_kb") and response.get("sources"), response
    return response


@pytest.mark.parametrize("row_name", list(ROWS))
async def test_the_default_configuration_answers_from_vectors(row_name: str, tmp_path: Path) -> None:
    async with ROWS[row_name]() as row:
        server = AgentServer(tmp_path, row.env)
        server.start()
        try:
            history: list[tuple[int, dict[str, Any] | None]] = []
            ready = await server.wait_ready(timeout=180, history=history)
            assert all(status in (0, 503) for status, _ in history[:-1]), history[-3:]
            embedder, knowledge = check(ready, "embedder"), check(ready, "knowledge")
            provider = check(ready, "provider")
            assert provider.get("name") == row.provider, provider
            if row.embedder:
                assert embedder.get("name") == row.embedder, embedder
            assert embedder.get("ok") and embedder.get("dim"), embedder
            assert str(knowledge.get("sample_kb", "")).startswith("ingested"), knowledge
            if not counts_current(ready):  # counted in the background: a probe never waits for it
                async with httpx.AsyncClient() as http:
                    knowledge = check((await current(lambda: server.readyz(http), lambda a: a[1]))[1], "knowledge")
            assert knowledge.get("vectors") and knowledge["vectors"] > 0, knowledge
            assert knowledge.get("semantic_search", {}).get("ok") is True, knowledge

            events = await chat(server.base, QUESTION)
            answered_from_the_kb(events)
            if row.model is not None:
                assert row.model.modes == ["semantic"], (row.model.modes, server.tail())
            assert await semantic_fallbacks(server.base) == 0
        finally:
            await server.kill()
            server.close()


async def test_after_a_restart_readyz_waits_for_an_embedder_that_can_embed(tmp_path: Path) -> None:
    model = KnowledgeModel()
    fake = FakeOllama(
        model, models=["qwen3:4b", "nomic-embed-text:latest"], embed_dim=256, first_embed_delay_s=COLD_START_S
    )
    async with running_fake(fake.app) as url:
        # AGENT_ADMIN_OPEN lets this test post a document; nothing else is pinned.
        server = AgentServer(tmp_path, {"OLLAMA_HOST": url, "AGENT_ADMIN_OPEN": "true"})
        server.start()
        try:
            await server.wait_ready(timeout=180)
            await server.kill()

            # The same database, and an Ollama that cannot embed: never ready.
            fake.embed_error = HttpError(500, "llama runner process has terminated")
            started_with = len(fake.embed_requests)
            server.start()
            seen: list[tuple[int, dict[str, Any] | None]] = []
            async with httpx.AsyncClient() as http:

                await until(lambda: bool(fake.embed_requests[started_with:]), "the restarted server to embed", 120)
                async with asyncio.timeout(120):  # a bound, not an expectation of speed
                    while check(seen[-1][1], "embedder").get("status") != "failed" if seen else True:
                        seen.append(await server.readyz(http))
                        assert server.running, server.tail()
                        await asyncio.sleep(0.05)
                assert {status for status, _ in seen} <= {0, 503}, seen[-3:]
                failed = check(seen[-1][1], "embedder")
                assert failed.get("ok") is False and "HTTP 500" in str(failed.get("detail")), failed

                # The server recovers: ready, and a posted document is stored and found by meaning.
                fake.embed_error = None
                ready = await server.wait_ready(timeout=120)
                assert check(ready, "knowledge").get("semantic_search", {}).get("ok") is True, ready
                doc = {"id": "restart-note", "title": "Zebra rotation",
                       "text": "The zebra rotation schedule moves the on-call pager every Tuesday at noon."}
                response = await http.post(f"{server.base}/v1/kb/documents", json={"documents": [doc]})
                assert response.status_code == 200, response.text
                report = response.json()
                assert report["added"] == 1 and not report["rejected"], report

            model.query = "When does the zebra rotation move the pager?"
            events = await chat(server.base, model.query)
            response_data = answered_from_the_kb(events)
            assert "restart-note" in orjson.dumps(response_data).decode(), response_data
            assert model.modes == ["semantic"], model.modes
        finally:
            await server.kill()
            server.close()

