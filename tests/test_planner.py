"""Query decomposition: the router and schema-planner calls go through the real Ollama
client to a loopback fake of Ollama; buckets and schemas come from a real knowledge base."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import RunToolState
from agenttools.rag.decomposition import (
    DecompositionError,
    plan_filters,
    plan_of,
    raw_text_for,
    schema_errors,
    validate_decomposition,
)
from app.agent.planner import PlannerSettings, QueryPlanner
from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge.kb import KnowledgeBase
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, Hold, HttpError, Text, running_fake
from tests.support.sqlite_templates import copy_database
from tests.test_corpus_tools import build_corpus, corpus_embedder
from tests.test_metrics import get_metrics, value

QUESTION = "Find invoices over $1k from Acme in 2023"
ROUTE = {
    "intent": "list",
    "primary_buckets": ["invoices"],
    "entities": [{"name": "Acme", "role": "company"}],
    "topic_terms": ["invoice"],
    "subqueries": [{"purpose": "filter_docs", "query": "Acme invoice 2023"}],
    "output_preferences": {"format": "table", "needs_citations": True},
}
PLAN = {
    "constraints": [
        {"field": "amount", "operator": ">", "value": 1000, "raw_text": "over $1k"},
        {"field": "vendor", "op": "like", "value": "%Acme%", "raw_text": "from Acme"},
        {"field": "invoice_date", "operator": "gte", "value": "2023-01-01", "raw_text": "in 2023"},
        {"field": "invoice_date", "operator": "<", "value": "2024-01-01", "raw_text": "in 2023"},
    ],
    "strategy": "hybrid",
}
FILTERS = {
    "amount": {">": 1000},
    "vendor": {"like": "%Acme%"},
    "invoice_date": {">=": "2023-01-01", "<": "2024-01-01"},
}


def say(obj: Any) -> list[Any]:
    return [Text(orjson.dumps(obj).decode())]


def constrain(**constraint: Any) -> list[Any]:
    return say({"constraints": [constraint]})


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shared corpus built once for the module, closed (its WAL folded into the file):
    each test opens a copy of its own (``kb``), so nothing one test writes reaches another.
    A build per test (an ingest of the three buckets) was ~70 % of this file's time."""
    path = tmp_path_factory.mktemp("corpus") / "kb.sqlite3"

    async def build() -> None:
        await (await build_corpus(path)).aclose()

    asyncio.run(build())
    assert not path.with_name(path.name + "-wal").exists(), "the corpus file is not whole"
    return path


@pytest.fixture
async def kb(tmp_path: Path, corpus_file: Path) -> AsyncIterator[KnowledgeBase]:
    kb = await open_kb_file(copy_database(corpus_file, tmp_path / "kb.sqlite3"), corpus_embedder())
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


async def test_router_then_schema_planner_give_the_seed_s_whole_object(kb: KnowledgeBase) -> None:
    fenced = [Text("```json\n"), Text(orjson.dumps(PLAN).decode()), Text("\n```")]
    hint, fake = await plan_with(kb, [say(ROUTE), fenced])
    assert hint is not None
    assert hint.intent == "list" and hint.buckets == ["invoices"]
    d = hint.decomposition
    assert schema_errors(d) == []  # the JSON Schema of agenttools/rag/schemas/decomposition.schema.json
    assert set(d) == {
        "intent", "primary_buckets", "entities", "constraints", "topic_terms", "subqueries", "output_preferences"
    }
    assert d["entities"] == [{"name": "Acme", "role": "company"}]
    assert d["subqueries"] == [{"purpose": "filter_docs", "query": "Acme invoice 2023"}]
    assert d["output_preferences"] == {"format": "table", "needs_citations": True}
    assert [(c["field"], c["operator"], c["raw_text"]) for c in d["constraints"]] == [
        ("amount", ">", "over $1k"), ("vendor", "like", "from Acme"),
        ("invoice_date", ">=", "in 2023"), ("invoice_date", "<", "in 2023"),
    ]
    (plan,) = hint.plans
    assert plan.filters == FILTERS and plan.strategy == "hybrid" and plan.queries == ("Acme invoice 2023",)
    assert 'bucket "invoices"' in hint.text and "search_text and search_semantic" in hint.text
    assert '"amount":{">":1000}' in hint.text and '("over $1k")' in hint.text and "answer as table" in hint.text
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


async def test_omitted_fields_get_their_defaults_and_still_validate(kb: KnowledgeBase) -> None:
    hint, _ = await plan_with(kb, [say({"buckets": ["contracts"], "intent": "qa"}), say({})])
    assert hint is not None
    assert hint.decomposition == {
        "intent": "qa", "primary_buckets": ["contracts"], "entities": [], "constraints": [], "topic_terms": [],
        "subqueries": [], "output_preferences": {"format": "natural_language", "needs_citations": True},
    }
    assert schema_errors(hint.decomposition) == [] and hint.plans[0].filters is None


async def test_attach_keeps_the_plan_with_the_run(kb: KnowledgeBase) -> None:
    hint, _ = await plan_with(kb, [say(ROUTE), say(PLAN)])
    assert hint is not None
    state = RunToolState()
    hint.attach(state)
    assert plan_of(state) == hint.decomposition and plan_filters(state, "invoices") == FILTERS
    assert plan_filters(state, "contracts") is None
    assert raw_text_for(state, {"amount": {">": 1000}}) == "over $1k"


def test_the_schema_rejects_what_the_seed_does_not_allow() -> None:
    good = {
        "intent": "compare", "primary_buckets": ["datasheets"], "entities": [{"name": "BC547", "role": "product"}],
        "constraints": [{"field": "type", "operator": "in", "value": ["NPN", "PNP"], "raw_text": "NPN or PNP"}],
        "topic_terms": ["gain"], "subqueries": [{"purpose": "find_properties", "query": "hFE gain"}],
        "output_preferences": {"format": "table", "needs_citations": True},
    }
    assert validate_decomposition(good) is good
    bad = [
        {**good, "intent": "gossip"},
        {**good, "primary_buckets": []},
        {**good, "entities": [{"name": "BC547"}]},
        {**good, "constraints": [{"field": "type", "operator": "in", "value": "NPN", "raw_text": "NPN"}]},
        {**good, "constraints": [{"field": "type", "operator": "~", "value": 1, "raw_text": "x"}]},
        {**good, "constraints": [{"field": "type", "operator": "=", "value": "NPN"}]},  # raw_text is required
        {**good, "subqueries": [{"query": "gain"}]},
        {**good, "output_preferences": {"format": "csv", "needs_citations": True}},
        {k: v for k, v in good.items() if k != "topic_terms"},
        {**good, "extra": 1},
    ]
    for obj in bad:
        assert schema_errors(obj), obj
        with pytest.raises(DecompositionError):
            validate_decomposition(obj)


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
        ([say({"primary_buckets": ["receipts"], "intent": "list"})], 1),
        ([say({"primary_buckets": ["invoices"], "intent": "gossip"})], 1),
        ([say(["invoices"])], 1),
        ([say(ROUTE), constrain(field="colour", operator="=", value="red", raw_text="red")], 2),
        ([say(ROUTE), constrain(field="amount", operator=">", value="lots", raw_text="a lot")], 2),
        ([say(ROUTE), constrain(field="year", value=2023, raw_text="2023", bucket="contracts")], 2),
        ([say(ROUTE), constrain(field="amount", operator="between", value=5, raw_text="x")], 2),
        ([say({**ROUTE, "entities": [{"name": "Acme"}]}), say(PLAN)], 2),  # schema: an entity needs its role
        ([say({**ROUTE, "output_preferences": {"format": "csv"}}), say(PLAN)], 2),
        ([say(ROUTE), [Text('{"constraints": [')]], 2),
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


async def test_skipped_plans_are_counted_by_why_and_reach_metrics(kb: KnowledgeBase, tmp_path: Path) -> None:
    """A plan skipped (the model's answer does not fit, it timed out, its call failed)
    leaves the run searching without its filters: counted by why on the planner and in
    ``agentchat_query_plans_total{outcome}``, where it was a log line only."""
    fake = FakeOllama([[Text("Sure! The bucket is invoices.")], [Text("No plan needed.")]])
    async with running_fake(fake.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        planner = QueryPlanner(provider, kb)
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.db"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_MANDATORY_CONTEXTS": "none",
        })
        async with (
            running_app(settings, provider=provider, embedder=None, planner=planner) as (base, _app),
            httpx.AsyncClient(timeout=30) as client,
        ):
            events = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                       json={"message": QUESTION, "context_type": "knowledge"})
            assert events[-1].json()["status"] == "completed"
            metrics = await get_metrics(client, base)
    assert planner.outcomes == {"rejected": 1}
    assert value(metrics, "agentchat_query_plans", "agentchat_query_plans_total", outcome="rejected") == 1
    made = FakeOllama([say(ROUTE), say(PLAN)])
    async with running_fake(made.app) as url:
        provider = OllamaProvider(url, "llama3.2", timeout=10)
        try:
            planner = QueryPlanner(provider, kb)
            assert await planner.plan(QUESTION) is not None
        finally:
            await provider.aclose()
    assert planner.outcomes == {"planned": 1}
