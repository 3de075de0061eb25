"""The corpus tools (``search_text``, ``search_semantic``, ``get_document_metadata``)
over a real ``KnowledgeBase`` on a temp SQLite file, called the way the agent calls them:
the real catalog specs, the real argument validation and the real executor."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from agenttools.core.catalog import build_catalog
from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.validation import validate_arguments
from agenttools.rag.corpus_deps import CorpusToolDeps
from agenttools.rag.corpus_tools import register_corpus_tools
from agenttools.rag.policy import kb_searched
from app.cli.kb_file import open_kb_file
from knowledge.kb import KnowledgeBase
from llm.types import ToolCall
from tests.support.events import wire
from toolindex.hashing import HashingEmbedder

VENDORS = ["ACME", "Globex", "Initech", "Umbrella", "Hooli"]
SERVICES = ["consulting services", "cloud hosting", "office furniture", "security audit", "travel expenses"]

INVOICE_FIELDS = {"vendor": "TEXT", "invoice_date": "DATE", "amount": "REAL", "paid": "BOOLEAN", "year": "INTEGER"}


def invoice_rows() -> list[dict[str, Any]]:
    """30 invoices; every metadata field varies so each operator selects a distinct set."""
    rows = []
    for i in range(30):
        vendor = VENDORS[i % 5]
        service = SERVICES[(i * 3) % 5]
        date = dt.date(2022 + i % 3, 1 + i % 12, 1 + i % 27).isoformat()
        amount = float(100 * (i + 1))
        rows.append(
            {
                "id": f"inv-{i:03d}",
                "title": f"Invoice {i:03d} from {vendor}",
                "text": f"Invoice {i:03d} issued by {vendor} for {service}. The total amount due is {amount:.2f} EUR, "
                "payable within 30 days of receipt. Late payment incurs interest.",
                "metadata": {"vendor": vendor, "invoice_date": date, "amount": amount, "paid": i % 2 == 0, "year": int(date[:4])},
            }
        )
    return rows


CONTRACTS = [
    {
        "id": "ctr-acme-2023",
        "title": "Master services agreement ACME 2023",
        "text": "This agreement between ACME and the Company covers consulting. Termination: either party may terminate "
        "with ninety days written notice. Force majeure excuses delays caused by events beyond control.",
        "metadata": {"party": "ACME", "year": 2023},
    },
    {
        "id": "ctr-globex-2021",
        "title": "Supply contract Globex 2021",
        "text": "Globex supplies components. Termination for convenience requires thirty days notice and a fee.",
        "metadata": {"party": "Globex", "year": 2021},
    },
]

DATASHEETS = [
    {
        "id": "ds-bc547",
        "title": "BC547 NPN transistor",
        "text": "The BC547 is an NPN bipolar junction transistor for general purpose switching and amplification.",
        "metadata": {"part": "BC547", "type": "NPN"},
    },
    {
        "id": "ds-bc557",
        "title": "BC557 PNP transistor",
        "text": "The BC557 is a PNP bipolar junction transistor, the complement of the BC547.",
        "metadata": {"part": "BC557", "type": "PNP"},
    },
]


def corpus_embedder() -> HashingEmbedder:
    """The embedder the shared corpus is built with, and a copy of its file opened with."""
    return HashingEmbedder(dim=128)


async def build_corpus(path: Path) -> KnowledgeBase:
    """The shared test corpus: invoices, contracts and datasheets with typed schemas."""
    kb = await open_kb_file(path, corpus_embedder())
    await kb.create_bucket("invoices", INVOICE_FIELDS)
    await kb.create_bucket("contracts", {"party": "TEXT", "year": "INTEGER"})
    await kb.create_bucket("datasheets", {"part": "TEXT", "type": "TEXT"})
    for bucket, docs in (("invoices", invoice_rows()), ("contracts", CONTRACTS), ("datasheets", DATASHEETS)):
        report = await kb.ingest_documents(docs, bucket=bucket)
        assert not report.rejected, report.rejected
    return kb


@dataclass
class Harness:
    kb: KnowledgeBase
    executor: ToolExecutor
    http: httpx.AsyncClient

    def context(self, state: RunToolState | None = None) -> ToolContext:
        return ToolContext(
            user_id="u1",
            authorization=None,
            conversation_id="c1",
            run_id="r1",
            context_type="knowledge",
            context={},
            http=self.http,
            state=state or RunToolState(),
        )

    async def call(self, name: str, args: dict[str, Any], ctx: ToolContext | None = None) -> tuple[ToolOutcome, ToolContext]:
        ctx = ctx or self.context()
        outcome = await self.executor.execute(ToolCall("call-1", name, args, orjson.dumps(args).decode()), ctx)
        return outcome, ctx


def build_registry(kb: KnowledgeBase, **deps: Any) -> ToolRegistry:
    registry = ToolRegistry(build_catalog())
    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb, **deps))
    return registry


#: The module's tests run on one event loop, the shared corpus's connection's.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def corpus(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[KnowledgeBase]:
    """The corpus built once for the module: every test but one only searches it (each
    call with a context of its own), and the one that adds a document builds its own.
    Built per test it was most of this module's time (a database opened and 34
    documents ingested for each of some 45 tests)."""
    kb = await build_corpus(tmp_path_factory.mktemp("corpus") / "kb.sqlite3")
    try:
        yield kb
    finally:
        await kb.aclose()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def harness(corpus: KnowledgeBase) -> AsyncIterator[Harness]:
    async with httpx.AsyncClient() as http:
        yield Harness(corpus, ToolExecutor(build_registry(corpus), validator=validate_arguments), http)


def ids(outcome: ToolOutcome) -> set[str]:
    assert not outcome.is_error, outcome.content
    return {r["doc_id"] for r in outcome.content["results"]}


def expected(pred: Callable[[dict[str, Any]], bool]) -> set[str]:
    return {r["id"] for r in invoice_rows() if pred(r["metadata"])}


async def search_invoices(h: Harness, filters: Any, tool: str = "search_text") -> ToolOutcome:
    outcome, _ = await h.call(tool, {"bucket": "invoices", "query": "invoice payable", "filters": filters, "top_k": 20})
    return outcome


# --------------------------------------------------------------------------- filter language


@pytest.mark.parametrize(
    ("filters", "pred"),
    [
        ({"vendor": "ACME"}, lambda m: m["vendor"] == "ACME"),
        ({"vendor": {"=": "globex"}}, lambda m: m["vendor"] == "Globex"),  # TEXT compares case-insensitively
        ({"vendor": {"!=": "ACME"}, "year": 2022}, lambda m: m["vendor"] != "ACME" and m["year"] == 2022),
        ({"amount": {">": 2500}}, lambda m: m["amount"] > 2500),
        ({"amount": {">=": 2500}}, lambda m: m["amount"] >= 2500),
        ({"amount": {"<": 400}}, lambda m: m["amount"] < 400),
        ({"amount": {"<=": 400}}, lambda m: m["amount"] <= 400),
        ({"amount": {">": 1000, "<=": 1500}}, lambda m: 1000 < m["amount"] <= 1500),
        ({"vendor": {"in": ["Initech", "Hooli"]}}, lambda m: m["vendor"] in ("Initech", "Hooli")),
        ({"vendor": ["Initech", "Hooli"], "paid": True}, lambda m: m["vendor"] in ("Initech", "Hooli") and m["paid"]),
        ({"vendor": {"nin": ["ACME", "Globex", "Initech"]}}, lambda m: m["vendor"] in ("Umbrella", "Hooli")),
        ({"vendor": {"like": "%brell%"}}, lambda m: m["vendor"] == "Umbrella"),
        ({"vendor": {"like": "hoo"}}, lambda m: m["vendor"] == "Hooli"),  # no wildcard: contains
        ({"invoice_date": {">=": "2024-01-01"}}, lambda m: m["invoice_date"] >= "2024-01-01"),
        (
            {"invoice_date": {">=": "2023-03-01", "<": "2023-07-01"}},
            lambda m: "2023-03-01" <= m["invoice_date"] < "2023-07-01",
        ),
        ({"paid": False, "year": {"in": [2022, 2024]}}, lambda m: not m["paid"] and m["year"] in (2022, 2024)),
        (
            {"$or": [{"vendor": "ACME"}, {"amount": {">": 2800}}]},
            lambda m: m["vendor"] == "ACME" or m["amount"] > 2800,
        ),
        (
            {"$and": [{"year": 2023}, {"$or": [{"vendor": "Globex"}, {"paid": True}]}]},
            lambda m: m["year"] == 2023 and (m["vendor"] == "Globex" or m["paid"]),
        ),
        ({"amount": {"operator": ">", "value": 2000}}, lambda m: m["amount"] > 2000),  # the planner's shape
        ({"amount": {"gte": "2900"}}, lambda m: m["amount"] >= 2900),  # numeric strings are coerced
    ],
)
async def test_every_operator_selects_exactly_the_matching_documents(
    harness: Harness, filters: dict[str, Any], pred: Callable[[dict[str, Any]], bool]
) -> None:
    want = expected(pred)
    assert want and len(want) < 30  # each case really filters
    for tool in ("search_text", "search_semantic"):
        outcome = await search_invoices(harness, filters, tool)
        assert ids(outcome) == want, (tool, filters)
        assert "relaxed" not in outcome.content


@pytest.mark.parametrize(
    ("filters", "needle"),
    [
        ({"colour": "red"}, "unknown filter field 'colour'"),
        ({"amount": "lots"}, "bad value 'lots' for 'amount'"),
        ({"invoice_date": {">": "last tuesday"}}, "expected a date as YYYY-MM-DD"),
        ({"paid": "maybe"}, "expected true or false"),
        ({"year": {">": 2022.5}}, "expected an integer"),
        ({"amount": {"like": "%1%"}}, "'like' only works on TEXT or DATE"),
        ({"vendor": {"in": []}}, "needs a non-empty list"),
    ],
)
async def test_bad_filters_are_tool_errors_naming_fields_and_operators(
    harness: Harness, filters: dict[str, Any], needle: str
) -> None:
    for tool in ("search_text", "search_semantic"):
        outcome = await search_invoices(harness, filters, tool)
        assert outcome.is_error
        assert outcome.content["reason"] == "invalid_filters"
        assert needle in outcome.content["error"]
        assert set(outcome.content["allowed_fields"]) >= set(INVOICE_FIELDS) | {"doc_id", "title"}
        assert outcome.content["allowed_fields"]["invoice_date"] == "DATE"
        assert outcome.content["operators"] == ["=", "!=", ">", ">=", "<", "<=", "in", "nin", "like"]


@pytest.mark.parametrize(
    "filters",
    [
        {"vendor = vendor OR 1=1 --": "x"},
        {'vendor" OR 1=1 --': "x"},
        {"amount; DROP TABLE kb_documents; --": 1},
        {"amount": {"> 0 OR 1=1 --": 5}},
        {"vendor": {"like": "%' OR '1'='1"}},
        {"vendor": "ACME' OR '1'='1"},
        {"vendor": {"in": ["ACME') OR 1=1 --"]}},
    ],
)
async def test_injection_attempts_never_widen_the_match_or_touch_the_tables(
    harness: Harness, filters: dict[str, Any]
) -> None:
    outcome = await search_invoices(harness, filters)
    if outcome.is_error:
        assert outcome.content["reason"] in ("invalid_filters", "invalid_arguments") or "error" in outcome.content
    else:
        # The injected text is a literal value: it matches nothing, so the user is asked
        # about that condition instead of it being executed; nothing leaked through the filter.
        assert outcome.content["clarification_requested"] == "no_results"
        assert outcome.content["total_matches"] == 0 and "results" not in outcome.content
        assert len(outcome.content["unmatched_conditions"]) == 1
        assert outcome.content["unmatched_conditions"][0].startswith("vendor ")
    stats = await harness.kb.status.stats()
    assert stats["documents"] == 34
    again = await search_invoices(harness, {"vendor": "ACME"})
    assert ids(again) == expected(lambda m: m["vendor"] == "ACME")


@pytest.mark.parametrize(("filters", "needle"), [({"amount": {"~": 3}}, "operator"), ({"$or": "ACME"}, "$or")])
async def test_malformed_filter_shapes_are_refused_before_the_search_runs(
    harness: Harness, filters: dict[str, Any], needle: str
) -> None:
    outcome = await search_invoices(harness, filters)
    assert outcome.is_error and not outcome.counts_as_execution  # argument validation caught it
    assert needle in orjson.dumps(outcome.content).decode()


async def test_filters_sent_as_a_json_string_are_decoded(harness: Harness) -> None:
    outcome = await search_invoices(harness, '{"vendor": "ACME"}')
    assert ids(outcome) == expected(lambda m: m["vendor"] == "ACME")


# --------------------------------------------------------------------------- results and evidence


async def test_results_carry_ids_snippets_and_register_evidence_by_doc_id(harness: Harness) -> None:
    outcome, ctx = await harness.call(
        "search_text", {"bucket": "contracts", "query": "termination notice", "context_chars": 60}
    )
    assert not outcome.is_error
    results = outcome.content["results"]
    first = results[0]
    assert set(first) >= {"source_id", "doc_id", "chunk_id", "title", "snippet", "score", "metadata", "location"}
    assert first["source_id"] == first["doc_id"]
    assert first["chunk_id"].startswith(first["doc_id"] + "#")
    assert 0 < first["score"] <= 1
    assert len(first["snippet"]) <= 64 and "ermination" in first["snippet"]
    assert first["metadata"]["party"] in ("ACME", "Globex")
    src = ctx.state.sources[first["doc_id"]]
    assert src.title == first["title"] and src.kind == "internal"
    assert src.location is not None and src.location == first["location"]
    assert src.location.startswith("chunk ")
    assert src.metadata["bucket"] == "contracts" and src.metadata["chunks"] == [first["chunk_id"]]
    assert kb_searched(ctx.state)  # counts as the knowledge-base step of the RAG flow
    assert f"[{first['doc_id']}]" in outcome.content["cite_with"]


async def test_semantic_search_and_doc_id_scope(harness: Harness) -> None:
    outcome, _ = await harness.call(
        "search_semantic", {"bucket": "datasheets", "query": "NPN transistor for switching", "top_k": 1}
    )
    assert ids(outcome) == {"ds-bc547"} and outcome.content["mode"] == "semantic"
    scoped, _ = await harness.call("search_text", {"bucket": "datasheets", "query": "transistor", "doc_id": "ds-bc557"})
    assert ids(scoped) == {"ds-bc557"}


async def test_unknown_bucket_lists_the_buckets_and_their_fields(harness: Harness) -> None:
    outcome, ctx = await harness.call("search_text", {"bucket": "receipts", "query": "coffee"})
    assert outcome.is_error and outcome.content["reason"] == "unknown_bucket"
    assert "receipts" in outcome.content["error"]
    listed = {b["bucket"]: b for b in outcome.content["available_buckets"]}
    assert {"invoices", "contracts", "datasheets"} <= set(listed)
    assert listed["contracts"]["fields"] == {"party": "TEXT", "year": "INTEGER"}
    assert not ctx.state.sources


async def test_get_document_metadata_returns_typed_fields_and_registers_the_document(harness: Harness) -> None:
    outcome, ctx = await harness.call("get_document_metadata", {"doc_id": "inv-007"})
    assert not outcome.is_error
    row = invoice_rows()[7]
    assert outcome.content["fields"] == row["metadata"]
    assert outcome.content["fields"]["paid"] is False and outcome.content["fields"]["invoice_date"] == "2023-08-08"
    assert outcome.content["bucket"] == "invoices" and outcome.content["source_id"] == "inv-007"
    assert ctx.state.sources["inv-007"].title == row["title"]
    missing, _ = await harness.call("get_document_metadata", {"doc_id": "inv-999"})
    assert missing.is_error and missing.content["reason"] == "unknown_document"


# --------------------------------------------------------------------------- clarification


async def test_a_filter_that_matches_nothing_is_named_and_offered_not_dropped(harness: Harness) -> None:
    outcome, ctx = await harness.call(
        "search_text",
        {"bucket": "invoices", "query": "invoice payable", "filters": {"vendor": "ACME", "year": 2031}, "top_k": 20},
    )
    assert not outcome.is_error and outcome.ends_run
    (event,) = [data for name, data in wire(outcome.events) if name == "clarification"]
    assert event["type"] == "no_results"
    assert "year = 2031" in event["missing_info"] and "vendor" not in event["missing_info"].split("Without")[0]
    assert "6 matching documents" in event["missing_info"] and "search without year = 2031" in event["missing_info"]
    assert outcome.content["unmatched_conditions"] == ["year = 2031"]
    assert outcome.content["documents_without_them"] == len(expected(lambda m: m["vendor"] == "ACME"))
    assert outcome.content["filters_without_them"] == {"vendor": "ACME"}
    assert "results" not in outcome.content and not ctx.state.sources  # other years are not passed off


async def test_conditions_that_match_only_apart_are_named_together(harness: Harness) -> None:
    outcome, _ = await harness.call(
        "search_text", {"bucket": "invoices", "query": "invoice", "filters": {"vendor": "ACME", "year": 2023, "amount": 100}}
    )
    event = wire(outcome.events)[0][1]
    assert event["type"] == "no_results" and "all the conditions together" in event["missing_info"]
    assert outcome.content["unmatched_conditions"]  # the most restrictive one, offered for dropping


async def test_with_clarification_off_an_empty_filter_is_relaxed_once(corpus: KnowledgeBase) -> None:
    async with httpx.AsyncClient() as http:
        h = Harness(corpus, ToolExecutor(build_registry(corpus, clarify=False), validator=validate_arguments), http)
        outcome = await search_invoices(h, {"vendor": "ACME", "year": 2031})
    assert not outcome.is_error and not outcome.events
    assert outcome.content["relaxed"] is True and outcome.content["dropped_filter"] == '{"year":2031}'
    assert ids(outcome) == expected(lambda m: m["vendor"] == "ACME")
    assert "dropped" in outcome.content["note"]


async def test_no_results_after_relaxing_asks_the_user(harness: Harness) -> None:
    outcome, ctx = await harness.call(
        "search_text", {"bucket": "contracts", "query": "zeppelin", "filters": {"party": "Initech"}}
    )
    assert not outcome.is_error and outcome.ends_run
    assert outcome.events and wire(outcome.events)[0][0] == "clarification"
    event = wire(outcome.events)[0][1]
    assert event["type"] == "no_results" and set(event) == {"type", "missing_info"}
    assert "zeppelin" in event["missing_info"] and "Initech" in event["missing_info"]
    assert ctx.state.clarification == event
    assert "run ends here" in outcome.content["note"]
    assert not ctx.state.sources


async def test_overload_with_flat_scores_asks_to_narrow_by_schema_fields(corpus: KnowledgeBase) -> None:
    async with httpx.AsyncClient() as http:
        registry = build_registry(corpus, overload_threshold=20)
        h = Harness(corpus, ToolExecutor(registry, validator=validate_arguments), http)
        outcome, ctx = await h.call("search_text", {"bucket": "invoices", "query": "payable", "top_k": 5})
        assert outcome.events and wire(outcome.events)[0][0] == "clarification", outcome.content
        event = wire(outcome.events)[0][1]
        assert event["type"] == "overload"
        assert "30" in event["missing_info"]
        for field_name in INVOICE_FIELDS:
            assert field_name in event["missing_info"]
        assert ctx.state.clarification == event
        # A narrowing filter ends the overload, and the fields already used are not asked again.
        narrowed, _ = await h.call("search_text", {"bucket": "invoices", "query": "payable", "filters": {"vendor": "ACME"}})
        assert not narrowed.events and len(narrowed.content["results"]) == 6
        # A discriminating query over as many matches is not an overload.
        sharp, _ = await h.call("search_text", {"bucket": "invoices", "query": "invoice 007 payable", "top_k": 5})
        assert not sharp.events, sharp.content
        assert sharp.content["results"][0]["doc_id"] == "inv-007"


async def test_a_search_within_one_document_is_never_an_overload(tmp_path: Path) -> None:
    """A search kept to one document (``doc_id``: a page read again) is as narrow as a
    scope gets: however many of its passages match, flatly, there is nothing to ask the
    user to narrow, and a clarification would end the run without an answer."""
    kb = await build_corpus(tmp_path / "kb.sqlite3")
    clauses = "\n\n".join(
        f"Clause {i}. The renewal of this schedule follows the general terms. " + "Filler words for the clause. " * 22
        for i in range(10, 50)
    )
    long_contract = {"id": "ctr-long", "title": "Framework agreement", "text": clauses,
                     "metadata": {"party": "Initrode", "year": 2024}}
    try:
        assert not (await kb.ingest_documents([long_contract], bucket="contracts")).rejected
        async with httpx.AsyncClient() as http:
            # The clauses score within 8 % of each other: flat for a spread limit of 0.1.
            registry = build_registry(kb, overload_threshold=20, flat_spread=0.1)
            h = Harness(kb, ToolExecutor(registry, validator=validate_arguments), http)
            one, ctx = await h.call(
                "search_text", {"bucket": "contracts", "query": "renewal schedule", "doc_id": "ctr-long"}
            )
            assert not one.events and ctx.state.clarification is None, one.content
            assert {r["doc_id"] for r in one.content["results"]} == {"ctr-long"}
    finally:
        await kb.aclose()


async def test_clarify_off_returns_plain_results(corpus: KnowledgeBase) -> None:
    async with httpx.AsyncClient() as http:
        h = Harness(corpus, ToolExecutor(build_registry(corpus, clarify=False), validator=validate_arguments), http)
        outcome, ctx = await h.call("search_text", {"bucket": "contracts", "query": "zeppelin"})
        assert outcome.content["results"] == [] and not outcome.events and ctx.state.clarification is None
