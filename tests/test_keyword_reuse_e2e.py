"""SC-006 end to end: a saved Perplexity answer answers a later, reworded question without a
second Perplexity call.

The whole app runs with its default settings for the flow (the mandatory policy) and
the offline default embedder (``AGENT_EMBEDDER=hashing``); the model is the Ollama
loopback fake, scripted to read what the agent sent it as a model would; Perplexity is
its loopback fake. Run 1: KB → Perplexity → index_keywords → generate_response. Run 2,
in a new conversation, asks the same thing in other words: ``knowledge_base_search``
returns the saved answer as an external source with its web citations' URLs, the model
answers from it, and the Perplexity fake sees no second request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.fakes.perplexity import Answer, FakePerplexity, Source

pytestmark = pytest.mark.slow  # end to end, several runs

DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "text": "Runs outlive their connections. Reconnect with the Last-Event-ID header to resume a stream.",
    }
]
WEB_ANSWER = (
    "Quantum computers matter first for chemistry and materials simulation in drug discovery [1], "
    "for optimisation such as portfolio optimisation [2], and for cryptography: Shor's algorithm "
    "could break RSA on a fault-tolerant machine [3]."
)
WEB_SOURCES = [
    Source("https://www.ibm.com/think/topics/quantum-computing", "What is quantum computing? | IBM"),
    Source("https://www.mckinsey.com/quantum-technology-monitor", "Quantum Technology Monitor"),
    Source("https://www.nist.gov/pqc", "Post-quantum cryptography | NIST"),
]
KEYWORDS = ["quantum computing applications", "drug discovery simulation", "portfolio optimization", "Shor's algorithm"]

Step = Callable[[dict[str, Any]], list[Any]]


def tool_results(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [
        orjson.loads(m["content"].removeprefix("ERROR: "))
        for m in body["messages"]
        if m["role"] == "tool" and m.get("tool_name") == name
    ]


def first_run() -> list[Step]:
    def index(body: dict[str, Any]) -> list[Any]:
        [fresh] = tool_results(body, "perplexity_search")
        args = {"keywords": KEYWORDS, "perplexity_result_id": fresh["perplexity_result_id"]}
        return [ToolCall("index_keywords", args)]

    def answer(body: dict[str, Any]) -> list[Any]:
        [fresh] = tool_results(body, "perplexity_search")
        cited = [fresh["perplexity_result_id"], fresh["citations"][0]["source_id"]]
        return [ToolCall("generate_response", {
            "answer": "Drug discovery, portfolio optimisation and cryptography.", "sources": cited,
            "confidence_score": 0.8, "used_internal_kb": False, "used_external_kb": True,
        })]

    return [
        lambda body: [ToolCall("knowledge_base_search", {"query": "main applications of quantum computing"})],
        lambda body: [ToolCall("perplexity_search", {"query": "current real-world applications of quantum computing"})],
        index,
        answer,
    ]


def second_run(kb_query: str) -> list[Step]:
    def answer(body: dict[str, Any]) -> list[Any]:
        [kb] = tool_results(body, "knowledge_base_search")
        saved = kb["external_answers"]
        if not saved:  # what a model does when the KB has nothing: go to the web
            return [ToolCall("perplexity_search", {"query": "uses of quantum computers"})]
        cited = [saved[0]["source_id"], *(c["source_id"] for c in saved[0]["citations"])]
        return [ToolCall("generate_response", {
            "answer": "Chemistry simulation, optimisation and cryptography.", "sources": cited,
            "confidence_score": 0.8, "used_internal_kb": False, "used_external_kb": True,
        })]

    return [lambda body: [ToolCall("knowledge_base_search", {"query": kb_query})], answer]


async def ask(client: httpx.AsyncClient, base: str, message: str) -> list[Any]:
    return await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                             json={"message": message, "context_type": "knowledge"})


def chat_bodies(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if r.get("messages")]


@pytest.mark.parametrize(
    "kb_query",
    [
        "applications of quantum computing",  # the keyword's words, another order
        "what are quantum computers used for",  # other words: found by meaning
    ],
)
async def test_a_reworded_question_reuses_the_saved_answer(tmp_path: Path, kb_query: str) -> None:
    fake = FakeOllama([*first_run(), *second_run(kb_query)])
    pplx = FakePerplexity()
    pplx.add(Answer(WEB_ANSWER, WEB_SOURCES))
    async with running_fake(fake.app) as ollama_url, running_fake(pplx.app) as pplx_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
            "AGENT_EMBEDDER": "hashing",
            "PERPLEXITY_API_KEY": pplx.api_key,
            "PERPLEXITY_BASE_URL": pplx_url,
        })
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with running_app(settings, provider=provider) as (base, _app), httpx.AsyncClient(timeout=30) as client:
            r = await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})
            assert r.status_code == 200, r.text
            first = await ask(client, base, "What are the main applications of quantum computing?")
            second = await ask(client, base, "Which real-world uses of quantum computers are there?")

    results = [e.json() for e in first if e.event == "tool_call_result"]
    assert [(r["name"], r["is_error"]) for r in results] == [
        ("knowledge_base_search", False), ("perplexity_search", False),
        ("index_keywords", False), ("generate_response", False),
    ]
    assert first[-1].json()["status"] == "completed"
    saved_id = tool_results(chat_bodies(fake)[2], "perplexity_search")[0]["perplexity_result_id"]

    # Run 2: the KB search alone carries the saved answer; Perplexity is not asked again.
    results = [e.json() for e in second if e.event == "tool_call_result"]
    assert [(r["name"], r["is_error"]) for r in results] == [
        ("knowledge_base_search", False), ("generate_response", False),
    ]
    assert len(pplx.calls) == 1 and not pplx.unexpected
    assert second[-1].json()["status"] == "completed"
    assert second[-1].json()["conversation_id"] != first[-1].json()["conversation_id"]

    [kb] = tool_results(chat_bodies(fake)[-1], "knowledge_base_search")
    [saved] = kb["external_answers"]
    assert saved["source_id"] == saved_id and saved["origin"] == "external_indexed"
    assert [c["url"] for c in saved["citations"]] == [s.url for s in WEB_SOURCES]
    assert "Shor's algorithm" in orjson.dumps(saved).decode()
    assert saved["match_score"] >= 0.5
    assert "perplexity_search is not needed" in kb["sufficient_hint"]

    response = next(e.json() for e in second if e.event == "response")
    assert response["used_external_kb"] is True
    external = [s for s in response["sources"] if s["kind"] == "external"]
    assert {s.get("url") for s in external} >= {s.url for s in WEB_SOURCES}
