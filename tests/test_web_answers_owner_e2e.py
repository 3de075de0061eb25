"""Issue 21 item 1 end to end: one user's saved web answer never reaches another user.

Two JWT users on one server. Alice asks about quantum computing; the agent searches
Perplexity (its loopback fake) and saves the answer with keywords (SC-006). Then Bob and
Alice each ask related questions — once in the keywords' words (found by terms), once
in other words (found by meaning). Bob's ``knowledge_base_search`` must not return
Alice's question or answer; Alice's must. With ``AGENT_SHARED_WEB_ANSWERS=true`` (the
single-tenant pool) Bob sees it too. The model is the Ollama fake, scripted as in
``tests/test_keyword_reuse_e2e.py``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from app.server.auth import sign_hs256
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, running_fake
from tests.fakes.perplexity import Answer, FakePerplexity
from tests.test_keyword_reuse_e2e import WEB_ANSWER, WEB_SOURCES, chat_bodies, first_run, tool_results

pytestmark = pytest.mark.slow  # two JWT users end to end

SECRET = "owner-test-secret-0123456789abcdef"
BY_TERMS = "applications of quantum computing"  # the keyword's words, another order
BY_MEANING = "what are quantum computers used for"  # other words


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


def look_up_run() -> list[Any]:
    """Two KB searches in one turn (terms, meaning), then an answer citing what came back."""

    def answer(body: dict[str, Any]) -> list[Any]:
        saved = [a for kb in tool_results(body, "knowledge_base_search") for a in kb["external_answers"]]
        return [ToolCall("generate_response", {
            "answer": "From the saved web answer." if saved else "I could not find this.",
            "sources": sorted({a["source_id"] for a in saved}), "confidence_score": 0.5,
            "used_internal_kb": False, "used_external_kb": bool(saved),
        })]

    return [
        lambda body: [
            ToolCall("knowledge_base_search", {"query": BY_TERMS}),
            ToolCall("knowledge_base_search", {"query": BY_MEANING}),
        ],
        answer,
    ]


async def ask(client: httpx.AsyncClient, base: str, who: str, message: str) -> list[Any]:
    events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", headers=bearer(who),
                               json={"message": message, "context_type": "knowledge"})
    assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"
    return events


def seen_by_last_run(fake: FakeOllama) -> list[list[dict[str, Any]]]:
    """The external answers each of the last run's two KB searches returned to the model."""
    return [kb["external_answers"] for kb in tool_results(chat_bodies(fake)[-1], "knowledge_base_search")]


@pytest.mark.parametrize("shared", [False, True], ids=["per-user", "shared-pool"])
async def test_a_saved_web_answer_reaches_only_its_user(tmp_path: Path, shared: bool) -> None:
    fake = FakeOllama([*first_run(), *look_up_run(), *look_up_run()])
    pplx = FakePerplexity()
    pplx.add(Answer(WEB_ANSWER, WEB_SOURCES))
    async with running_fake(fake.app) as ollama_url, running_fake(pplx.app) as pplx_url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_EMBEDDER": "hashing",
            "AGENT_AUTH": "jwt",
            "AGENT_JWT_SECRET": SECRET,
            "AGENT_SHARED_WEB_ANSWERS": "true" if shared else "false",
            "PERPLEXITY_API_KEY": pplx.api_key,
            "PERPLEXITY_BASE_URL": pplx_url,
        })
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with running_app(settings, provider=provider) as (base, app), httpx.AsyncClient(timeout=30) as client:
            first = await ask(client, base, "alice", "What are the main applications of quantum computing?")
            assert [e.json()["name"] for e in first if e.event == "tool_call_result"] == [
                "knowledge_base_search", "perplexity_search", "index_keywords", "generate_response"]
            saved_id = tool_results(chat_bodies(fake)[2], "perplexity_search")[0]["perplexity_result_id"]
            storage = app.state.services.storage
            stored = await storage.external_results.get(saved_id, owner="alice")
            assert stored is not None and stored.owner == "alice"
            assert await storage.external_results.get(saved_id, owner="bob") is None
            assert await storage.keywords.get("shor's algorithm", owner="alice") is not None
            assert await storage.keywords.get("shor's algorithm", owner="bob") is None

            await ask(client, base, "bob", "Which real-world uses of quantum computers are there?")
            bob_saw = seen_by_last_run(fake)
            await ask(client, base, "alice", "Which real-world uses of quantum computers are there?")
            alice_saw = seen_by_last_run(fake)

    assert len(pplx.calls) == 1 and not pplx.unexpected  # nobody's lookup went to the web
    assert [[a["source_id"] for a in found] for found in alice_saw] == [[saved_id], [saved_id]]
    if shared:
        assert [[a["source_id"] for a in found] for found in bob_saw] == [[saved_id], [saved_id]]
    else:
        assert bob_saw == [[], []]
        sent_to_bob_model = orjson.dumps(chat_bodies(fake)[-3]).decode()  # Bob's answering turn
        for alices in (saved_id, "Shor", "current real-world applications"):  # her answer, and her query
            assert alices not in sent_to_bob_model
