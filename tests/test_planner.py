"""Query decomposition: the router and schema-planner calls go through the real Ollama
client to a loopback fake of Ollama; buckets and schemas come from a real knowledge base."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.kb_file import open_kb_file
from app.planner import PlannerSettings, QueryPlanner
from knowledge.kb import KnowledgeBase
from llm.ollama import OllamaProvider
from tests.fakes import FakeOllama, Hold, HttpError, Text, running_fake
from tests.test_corpus_tools import build_corpus

QUESTION = "Find invoices over $1k from Acme in 2023"
ROUTE = {"buckets": ["invoices"], "intent": "list"}
PLAN = {
    "plans": {
        "invoices": {
            "filters": {
                "amount": {"operator": ">", "value": 1000},
                "vendor": {"like": "%Acme%"},
                "invoice_date": {">=": "2023-01-01", "<": "2024-01-01"},
            },
            "queries": ["invoice"],
            "strategy": "hybrid",
        }
    }
}


def say(obj: Any) -> list[Any]:
    return [Text(orjson.dumps(obj).decode())]


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    kb = await build_corpus(tmp_path / "kb.sqlite3")
    yield kb
    await kb.aclose()


async def plan_with(kb: KnowledgeBase, turns: list[Any], *, timeout_s: float = 10.0) -> tuple[Any, FakeOllama]:
    fake = FakeOllama(turns)
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        try:
            planner = QueryPlanner(provider, kb, PlannerSettings(timeout_s=timeout_s))
            hint = await planner.plan(QUESTION)
        finally:
            await provider.aclose()
    return hint, fake


def chat_bodies(fake: FakeOllama) -> list[dict[str, Any]]:
    return [b for b in fake.chat_requests if b.get("messages")]


async def test_router_then_schema_planner_give_a_validated_hint(kb: KnowledgeBase) -> None:
    hint, fake = await plan_with(kb, [say(ROUTE), [Text("```json\n"), Text(orjson.dumps(PLAN).decode()), Text("\n```")]])
    assert hint is not None
    assert hint.intent == "list" and hint.buckets == ["invoices"]
    (plan,) = hint.plans
    assert plan.filters == PLAN["plans"]["invoices"]["filters"] and plan.strategy == "hybrid"
    assert 'bucket "invoices"' in hint.text and "search_text and search_semantic" in hint.text
    assert '"amount":{"operator":">","value":1000}' in hint.text
    router, planner = chat_bodies(fake)
    # Phase 1 sees bucket names and field names only; phase 2 the typed schema of the chosen bucket only.
    router_system = router["messages"][0]["content"]
    assert "invoices" in router_system and "contracts" in router_system and "datasheets" in router_system
    assert "default" not in router_system.split("Use only bucket names")[1]  # no schema, not offered
    assert router["messages"][-1] == {"role": "user", "content": QUESTION}
    assert not router.get("tools")
    planner_system = planner["messages"][0]["content"]
    assert "amount (REAL)" in planner_system and "invoice_date (DATE)" in planner_system
    assert "party (TEXT)" not in planner_system


async def test_the_hint_filters_run_against_the_knowledge_base(kb: KnowledgeBase) -> None:
    hint, _ = await plan_with(kb, [say(ROUTE), say(PLAN)])
    assert hint is not None
    response = await kb.search("invoice", bucket="invoices", filters=hint.plans[0].filters, top_k=20)
    assert response.hits and all(h.metadata["vendor"] == "ACME" for h in response.hits)
    assert all(h.metadata["amount"] > 1000 and h.metadata["year"] == 2023 for h in response.hits)


@pytest.mark.parametrize(
    ("turns", "requests_made"),
    [
        ([[HttpError(500, "model crashed")]], 1),
        ([[Text("Sure! The bucket is invoices.")]], 1),
        ([say({"buckets": ["receipts"], "intent": "list"})], 1),
        ([say({"buckets": ["invoices"], "intent": "gossip"})], 1),
        ([say(["invoices"])], 1),
        ([say(ROUTE), say({"plans": {"invoices": {"filters": {"colour": "red"}}}})], 2),
        ([say(ROUTE), say({"plans": {"invoices": {"filters": {"amount": {">": "lots"}}}}})], 2),
        ([say(ROUTE), say({"plans": {"contracts": {"filters": {"year": 2023}}}})], 2),
        ([say(ROUTE), [Text('{"plans": {"invoices": ')]], 2),
        ([say(ROUTE), [HttpError(503, "overloaded")]], 2),
    ],
)
async def test_any_failure_skips_the_hint(kb: KnowledgeBase, turns: list[Any], requests_made: int) -> None:
    hint, fake = await plan_with(kb, turns)
    assert hint is None
    assert len(chat_bodies(fake)) == requests_made


async def test_a_model_that_never_answers_times_out_into_no_hint(kb: KnowledgeBase) -> None:
    hint, fake = await plan_with(kb, [say(ROUTE), [Hold()]], timeout_s=0.5)
    assert hint is None
    assert len(chat_bodies(fake)) == 2


async def test_no_schemas_means_no_calls(tmp_path: Path) -> None:
    plain = await open_kb_file(tmp_path / "plain.sqlite3", None)
    try:
        hint, fake = await plan_with(plain, [say(ROUTE)])
    finally:
        await plain.aclose()
    assert hint is None and chat_bodies(fake) == []
