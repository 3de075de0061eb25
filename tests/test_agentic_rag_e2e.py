"""Seed 004 end to end: the app on real uvicorn, the real Ollama client against a loopback
fake of Ollama scripting the model, the real catalog with the corpus and RAG tools over a
real knowledge base, and the SSE stream parsed as a browser parses it."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import ToolRegistry
from agenttools.rag.corpus_deps import CorpusToolDeps
from agenttools.rag.corpus_tools import register_corpus_tools
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.tools import RagToolDeps, register_rag_tools
from app.agent.planner import QueryPlanner
from app.config import Settings
from app.factory import create_app
from llm.ollama import OllamaProvider
from storage.sqlite import open_sqlite_storage
from tests.conftest import collect_sse, names
from tests.fakes import FakeOllama, Text, ToolCall, ToolCalls, running_fake
from tests.support.server import serve_app
from tests.test_corpus_tools import build_corpus, invoice_rows

pytestmark = pytest.mark.slow  # seed 004 end to end

BODY = {"message": "Which invoices are over 2500 EUR?", "context_type": "knowledge", "context": {}}


def make_settings(tmp_path: Path, **env: str) -> Settings:
    base = {
        "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "none",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        "AGENT_MAX_TOOL_CALLS": "20",
    }
    return Settings.from_env({**base, **env})


@asynccontextmanager
async def agentic_app(
    tmp_path: Path, fake: FakeOllama, *, env: dict[str, str] | None = None, planner: bool = False, **deps: Any
) -> AsyncIterator[str]:
    """The app with the corpus + RAG tools on a real KB, the model played by ``fake``."""
    kb = await build_corpus(tmp_path / "kb.sqlite3")
    storage = await open_sqlite_storage(tmp_path / "stores.sqlite3")
    keywords = KeywordIndex(storage.keywords, storage.external_results)
    registry = ToolRegistry(build_catalog())
    register_rag_tools(
        registry, RagToolDeps(knowledge=kb, keywords=keywords, external_results=storage.external_results)
    )
    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb, **deps))
    try:
        async with running_fake(fake.app) as url:
            provider = OllamaProvider(url, "llama3.2", timeout=10)
            extra: dict[str, Any] = {}
            if planner:
                extra["planner"] = QueryPlanner(provider, kb)
            app = create_app(make_settings(tmp_path, **(env or {})), provider=provider, registry=registry, embedder=None, **extra)
            try:
                async with serve_app(app) as base:
                    yield base
            finally:
                await provider.aclose()
    finally:
        await storage.close()
        await kb.aclose()


async def chat(base: str, body: dict[str, Any] = BODY) -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)


def turns_sent(fake: FakeOllama) -> list[dict[str, Any]]:
    return [r for r in fake.chat_requests if r.get("messages")]


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def result_json(message: dict[str, Any]) -> dict[str, Any]:
    content = message["content"]
    return orjson.loads(content[content.index("{"):])


def of(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [e.json() for e in events if e.event == name]


#: A first step that satisfies "search the knowledge first".
SEARCH = [ToolCall("search_text", {"bucket": "invoices", "query": "invoice payable"})]
#: The run's last step under the default mandatory flow: an answer that cites nothing.
DONE = [ToolCall("generate_response", {"answer": "Done.", "sources": [], "used_internal_kb": False,
                                       "used_external_kb": False})]


def answer_turn(answer: str, sources: list[str]) -> list[Any]:
    return [ToolCall("generate_response", {"answer": answer, "sources": sources, "used_internal_kb": True, "used_external_kb": False})]


def invoices_where(pred: Any) -> set[str]:
    return {r["id"] for r in invoice_rows() if pred(r["metadata"])}


# --------------------------------------------------------------------------- filters through the tools


FILTER_CASES = [
    ({"amount": {">": 2500}}, lambda m: m["amount"] > 2500),
    ({"amount": {"<=": 300}}, lambda m: m["amount"] <= 300),
    ({"amount": {">=": 2900}, "paid": False}, lambda m: m["amount"] >= 2900 and not m["paid"]),
    ({"year": {"<": 2023}, "vendor": {"=": "hooli"}}, lambda m: m["year"] < 2023 and m["vendor"] == "Hooli"),
    ({"vendor": {"!=": "ACME"}, "year": 2024, "paid": True}, lambda m: m["vendor"] != "ACME" and m["year"] == 2024 and m["paid"]),
    ({"vendor": {"in": ["Globex", "Initech"]}, "year": 2022}, lambda m: m["vendor"] in ("Globex", "Initech") and m["year"] == 2022),
    ({"vendor": {"nin": ["ACME", "Globex", "Initech", "Hooli"]}}, lambda m: m["vendor"] == "Umbrella"),
    ({"vendor": {"like": "%tech"}}, lambda m: m["vendor"] == "Initech"),
    ({"$or": [{"invoice_date": {"<": "2022-03-01"}}, {"amount": {">": 2950}}]}, lambda m: m["invoice_date"] < "2022-03-01" or m["amount"] > 2950),
]


async def test_every_operator_through_the_model_s_tool_calls(tmp_path: Path) -> None:
    calls = [
        ToolCall("search_text" if i % 2 == 0 else "search_semantic", {"bucket": "invoices", "query": "invoice payable", "filters": f, "top_k": 20})
        for i, (f, _) in enumerate(FILTER_CASES)
    ]
    fake = FakeOllama([[ToolCalls(calls)], DONE])
    async with agentic_app(tmp_path, fake) as base:
        events = await chat(base)
    assert of(events, "message_complete")[0]["status"] == "completed"
    results = [r for r in of(events, "tool_call_result") if r["name"] != "generate_response"]
    assert len(results) == len(FILTER_CASES) and not any(r["is_error"] for r in results)
    fed_back = tool_messages(turns_sent(fake)[1])
    assert len(fed_back) == len(FILTER_CASES)
    for message, (filters, pred) in zip(fed_back, FILTER_CASES, strict=True):
        got = {r["doc_id"] for r in result_json(message)["results"]}
        assert got == invoices_where(pred), filters


async def test_bad_fields_bad_types_and_injection_come_back_as_fixable_errors(tmp_path: Path) -> None:
    bad = [
        {"bucket": "invoices", "query": "invoice", "filters": {"colour": "red"}},
        {"bucket": "invoices", "query": "invoice", "filters": {"amount": {">": "a lot"}}},
        {"bucket": "invoices", "query": "invoice", "filters": {"vendor'); DROP TABLE kb_documents; --": "x"}},
        {"bucket": "receipts", "query": "invoice"},
    ]
    fixed = {"bucket": "invoices", "query": "invoice payable", "filters": {"vendor": "ACME' OR '1'='1"}}
    # (A good filter after these is test_every_operator_through_the_model_s_tool_calls: here
    # the literal ends the run with a clarification.)
    fake = FakeOllama(
        [[ToolCalls([ToolCall("search_text", a) for a in bad])], [ToolCall("search_text", fixed)]]
    )
    async with agentic_app(tmp_path, fake) as base:
        events = await chat(base)
    assert [r["is_error"] for r in of(events, "tool_call_result")] == [True, True, True, True, False]
    second = tool_messages(turns_sent(fake)[1])
    colour, amount, injected, bucket = (result_json(m) for m in second)
    assert "unknown filter field 'colour'" in colour["error"] and colour["allowed_fields"]["amount"] == "REAL"
    assert "bad value 'a lot' for 'amount'" in amount["error"] and "like" in amount["operators"]
    # Refused either by argument validation (injection pattern) or by the schema check; never run.
    assert injected["error"] == "invalid_parameters" or "unknown filter field" in injected["error"]
    assert bucket["reason"] == "unknown_bucket" and {"invoices", "contracts"} <= {b["bucket"] for b in bucket["available_buckets"]}
    # The quote-injection value is a literal that matches nothing: the user is asked about that
    # condition (named as it was sent), it is neither executed nor silently dropped.
    (clar,) = of(events, "clarification")
    assert clar["type"] == "no_results" and "vendor = ACME' OR '1'='1" in clar["missing_info"]
    assert len(turns_sent(fake)) == 2


# --------------------------------------------------------------------------- clarification


async def test_no_results_ends_the_run_with_a_clarification(tmp_path: Path) -> None:
    fake = FakeOllama([[ToolCall("search_text", {"bucket": "contracts", "query": "zeppelin airship", "filters": {"year": 2031}})]])
    async with agentic_app(tmp_path, fake) as base:
        events = await chat(base)
    order = names(events)
    assert order[-3:] == ["clarification", "tool_call_result", "message_complete"]
    (clar,) = of(events, "clarification")
    assert clar["type"] == "no_results" and "zeppelin" in clar["missing_info"] and "2031" in clar["missing_info"]
    assert of(events, "message_complete")[0]["status"] == "completed"
    assert len(turns_sent(fake)) == 1  # the run ended; the model was not asked again


async def test_overload_ends_the_run_asking_to_narrow_by_schema_fields(tmp_path: Path) -> None:
    fake = FakeOllama([[ToolCall("search_text", {"bucket": "invoices", "query": "payable", "top_k": 5})]])
    async with agentic_app(tmp_path, fake, overload_threshold=20) as base:
        events = await chat(base, {**BODY, "message": "List every invoice"})
    (clar,) = of(events, "clarification")
    assert clar["type"] == "overload"
    assert all(f in clar["missing_info"] for f in ("vendor", "invoice_date", "amount"))
    done = of(events, "message_complete")[0]
    assert done["status"] == "completed" and done["turns"] == 1
    assert "response" not in names(events)


# --------------------------------------------------------------------------- citations


async def test_invented_citation_is_reported_once_then_removed(tmp_path: Path) -> None:
    search = ToolCall("search_text", {"bucket": "contracts", "query": "termination notice", "filters": {"party": "ACME"}})
    answer = "ACME may terminate with ninety days notice [ctr-acme-2023]; penalties are 5% [ctr-acme-2019]."
    fake = FakeOllama(
        [[search], answer_turn(answer, ["ctr-acme-2023"]), answer_turn(answer, ["ctr-acme-2023"])]
    )
    async with agentic_app(tmp_path, fake) as base:
        events = await chat(base)
    gr = [r for r in of(events, "tool_call_result") if r["name"] == "generate_response"]
    assert [r["is_error"] for r in gr] == [True, False]
    bounced = result_json(tool_messages(turns_sent(fake)[2])[-1])
    assert bounced["unknown_ids"] == ["ctr-acme-2019"]
    assert "ctr-acme-2023" in [s["source_id"] for s in bounced["valid_sources"]]
    (response,) = of(events, "response")
    assert response["answer"] == "ACME may terminate with ninety days notice [ctr-acme-2023]; penalties are 5%."
    (source,) = response["sources"]
    assert source["id"] == "ctr-acme-2023" and source["title"] == "Master services agreement ACME 2023"
    assert source["location"].startswith("chunk 0")
    assert of(events, "message_complete")[0]["status"] == "completed"


# --------------------------------------------------------------------------- pruning


async def test_old_tool_results_are_pruned_under_a_tiny_budget(tmp_path: Path) -> None:
    big = {"bucket": "invoices", "query": "invoice payable interest", "top_k": 20, "context_chars": 2000}
    # A corpus search whose review says "enough" ends the searching (seed 004), so the
    # older big result comes from the knowledge-base search, which has no review.
    kb = {"query": "invoice payable interest", "kb_id": "invoices", "top_k": 20}
    fake = FakeOllama(
        [[ToolCall("knowledge_base_search", kb)], [ToolCall("search_text", big)], [Text("Twenty invoices.")], DONE]
    )
    async with agentic_app(tmp_path, fake, env={"AGENT_CONTEXT_BUDGET_TOKENS": "256"}, overload_threshold=10_000) as base:
        events = await chat(base)
    assert of(events, "message_complete")[0]["status"] == "completed"
    first, second, third, *_ = turns_sent(fake)
    (r1,) = tool_messages(second)
    assert len(r1["content"]) > 6000 and result_json(r1)["chunks"]  # the latest result is whole
    old, latest = tool_messages(third)
    note = result_json(old)
    assert note["pruned"] is True and "knowledge_base_search" in note["note"] and "Call the tool again" in note["note"]
    assert len(result_json(latest)["results"]) == 20  # the newest result is kept
    assert sum(len(m["content"]) for m in third["messages"]) < sum(len(m["content"]) for m in second["messages"]) + 2000


# --------------------------------------------------------------------------- decomposition

_PLANNER_WIRED = "planner" in inspect.signature(create_app).parameters
needs_planner = pytest.mark.skipif(not _PLANNER_WIRED, reason="create_app(planner=...) not wired by the lead yet")

ROUTE = {"primary_buckets": ["invoices"], "intent": "list", "topic_terms": ["invoice"]}
PLAN = {"constraints": [{"field": "amount", "operator": ">", "value": 2500, "raw_text": "over 2500 EUR"}], "strategy": "keyword"}


@needs_planner
async def test_decomposition_puts_a_plan_hint_in_the_system_prompt(tmp_path: Path) -> None:
    fake = FakeOllama([[Text(orjson.dumps(ROUTE).decode())], [Text(orjson.dumps(PLAN).decode())], SEARCH, DONE])
    async with agentic_app(tmp_path, fake, planner=True) as base:
        events = await chat(base)
    assert of(events, "message_complete")[0]["status"] == "completed"
    router, planner, agent, *_ = turns_sent(fake)
    assert not router.get("tools") and not planner.get("tools")
    system = agent["messages"][0]["content"]
    assert "## Search plan" in system and '"amount":{">":2500}' in system and 'bucket "invoices"' in system
    assert '("over 2500 EUR")' in system


@needs_planner
async def test_failed_decomposition_just_skips_the_hint(tmp_path: Path) -> None:
    fake = FakeOllama([[Text(orjson.dumps({"primary_buckets": ["receipts"], "intent": "list"}).decode())], SEARCH, DONE])
    async with agentic_app(tmp_path, fake, planner=True) as base:
        events = await chat(base)
    assert of(events, "message_complete")[0]["status"] == "completed"
    router, agent, *_ = turns_sent(fake)
    assert "## Search plan" not in agent["messages"][0]["content"]
    assert [r["name"] for r in of(events, "tool_call_result")] == ["search_text", "generate_response"]
