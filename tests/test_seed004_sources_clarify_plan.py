"""Issue 12, items 5–7, through the real agent loop with the DEFAULT mandatory policy.

The app runs on real uvicorn with its own knowledge base (typed buckets created on it),
the model is the Ollama loopback fake, Perplexity its loopback fake, and the stream is
parsed as a browser parses it:

* item 5 — sources keep their URLs end to end: a cited Perplexity answer carries its web
  citations' URLs; a cited passage of a PDF carries its page;
* item 6 — a filter that matches nothing asks the user, naming it; a list-all request
  over ``AGENT_CLARIFY_OVERLOAD_HITS`` documents asks to narrow it;
* item 7 — the decomposition is the seed's whole object and validates against the JSON
  Schema; its constraints become the tools' filters; a review step ends or continues
  the search within the tool budget.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import inspect
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from agenttools.core.registry import RunToolState
from agenttools.rag.decomposition import decomposition_schema, schema_errors
from agenttools.rag.review import record_search, review_after_round, review_round, search_closed
from app.agent.planner import PlanHint, QueryPlanner
from app.config import Settings
from knowledge.chunking import PAGE_BREAK, chunk_text
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, names, running_app
from tests.fakes import FakeOllama, Text, ToolCall, running_fake
from tests.fakes.perplexity import Answer, FakePerplexity, Source

pytestmark = pytest.mark.slow  # seed 004 end to end over a knowledge base of its own

Step = Callable[[dict[str, Any]], list[Any]]
INVOICE_FIELDS = {"vendor": "TEXT", "invoice_date": "DATE", "amount": "REAL", "year": "INTEGER"}
VENDORS = ["ACME", "Globex", "Initech", "Hooli", "Umbrella"]
CONTRACTS = [
    {
        "id": "ctr-acme-2023",
        "title": "Master services agreement ACME 2023",
        "text": "This agreement between ACME and the Company covers consulting. Termination: either party may "
        "terminate with ninety days written notice.",
        "metadata": {"party": "ACME", "year": 2023},
    },
    {
        "id": "ctr-globex-2021",
        "title": "Supply contract Globex 2021",
        "text": "Globex supplies widgets. Termination requires thirty days notice and payment of open orders.",
        "metadata": {"party": "Globex", "year": 2021},
    },
    {
        "id": "ctr-initech-2022",
        "title": "Licence agreement Initech 2022",
        "text": "Initech licenses the software. Termination for breach is immediate after written notice.",
        "metadata": {"party": "Initech", "year": 2022},
    },
]


def invoices(n: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(n):
        date = dt.date(2021 + i % 3, 1 + i % 12, 1 + i % 27).isoformat()
        rows.append(
            {
                "id": f"inv-{i:03d}",
                "title": f"Invoice {i:03d} from {VENDORS[i % 5]}",
                "text": f"Invoice {i:03d} issued by {VENDORS[i % 5]}. Amount due {100 * (i + 1)} EUR, payable soon.",
                "metadata": {
                    "vendor": VENDORS[i % 5],
                    "invoice_date": date,
                    "amount": float(100 * (i + 1)),
                    "year": int(date[:4]),
                },
            }
        )
    return rows


class NoPlan:
    """A planner that never plans: the tests that are not about decomposition script the
    model's tool calls only."""

    async def plan(self, message: str) -> None:
        return None


@dataclass
class RecordingPlanner:
    """The real ``QueryPlanner`` over the app's own knowledge base, keeping what it returned."""

    provider: Any
    app: Any = None
    plans: list[PlanHint | None] = field(default_factory=list)

    async def plan(self, message: str) -> PlanHint | None:
        kb = self.app.state.services.rooms.knowledge.kb
        hint = await QueryPlanner(self.provider, kb).plan(message)
        self.plans.append(hint)
        return hint


@dataclass
class Harness:
    base: str
    app: Any
    fake: FakeOllama
    pplx: FakePerplexity

    @property
    def kb(self) -> Any:
        return self.app.state.services.rooms.knowledge.kb

    async def ask(self, message: str) -> list[Any]:
        async with httpx.AsyncClient(timeout=30) as client:
            return await collect_sse(
                client, "POST", f"{self.base}/v1/agent/chat", json={"message": message, "context_type": "knowledge"}
            )

    def sent(self) -> list[dict[str, Any]]:
        """The agent's model turns (the planner's calls carry no tools)."""
        return [r for r in self.fake.chat_requests if r.get("messages") and r.get("tools")]


@asynccontextmanager
async def corpus_app(
    tmp_path: Path,
    steps: list[Step],
    *,
    env: dict[str, str] | None = None,
    planner: str = "none",
    pplx: FakePerplexity | None = None,
) -> AsyncIterator[Harness]:
    """The app with the default policy (``AGENT_MANDATORY_CONTEXTS`` unset)."""
    fake = FakeOllama([lambda body, s=s: s(body) for s in steps])
    pplx = pplx or FakePerplexity()
    async with running_fake(fake.app) as ollama_url, running_fake(pplx.app) as pplx_url:
        settings = Settings.from_env(
            {
                "AGENT_DB_PATH": str(tmp_path / "agent.db"),
                "AGENT_INGEST_SAMPLE_KB": "false",
                "AGENT_EMBEDDER": "none",
                "PERPLEXITY_API_KEY": pplx.api_key,
                "PERPLEXITY_BASE_URL": pplx_url,
                **(env or {}),
            }
        )
        assert "knowledge" in settings.mandatory_contexts  # the default policy: mandatory where these tests ask
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        overrides: dict[str, Any] = {}
        recorder = None
        if planner == "none":
            overrides["planner"] = NoPlan()
        elif planner == "record":
            recorder = overrides["planner"] = RecordingPlanner(provider)
        try:
            async with running_app(settings, provider=provider, embedder=None, **overrides) as (base, app):
                if recorder is not None:
                    recorder.app = app
                yield Harness(base, app, fake, pplx)
        finally:
            await provider.aclose()


def of(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [e.json() for e in events if e.event == name]


def tool_results(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [
        orjson.loads(m["content"].removeprefix("ERROR: "))
        for m in body["messages"]
        if m["role"] == "tool" and m.get("tool_name") == name
    ]


def call(name: str, args: dict[str, Any]) -> Step:
    return lambda body: [ToolCall(name, args)]


def answer_citing(ids: Callable[[dict[str, Any]], list[str]], text: str = "Here it is.", **flags: Any) -> Step:
    def step(body: dict[str, Any]) -> list[Any]:
        cited = ids(body)
        args = {"answer": text, "sources": cited, "confidence_score": 0.8, "used_internal_kb": True,
                "used_external_kb": False, **flags}
        return [ToolCall("generate_response", args)]

    return step


def say(obj: Any) -> Step:
    return lambda body: [Text(orjson.dumps(obj).decode())]


async def add_contracts(kb: Any) -> None:
    await kb.create_bucket("contracts", {"party": "TEXT", "year": "INTEGER"})
    report = await kb.ingest_documents(CONTRACTS, bucket="contracts")
    assert report.added == len(CONTRACTS), report


async def add_invoices(kb: Any, n: int) -> None:
    await kb.create_bucket("invoices", INVOICE_FIELDS)
    report = await kb.ingest_documents(invoices(n), bucket="invoices")
    assert report.added == n and not report.rejected, report


# =========================================================================== item 6: clarification


async def test_a_filter_matching_nothing_asks_the_user_naming_it(tmp_path: Path) -> None:
    search = call("search_text", {"bucket": "contracts", "query": "termination notice", "filters": {"year": 2024}})
    async with corpus_app(tmp_path, [search]) as h:
        await add_contracts(h.kb)
        events = await h.ask("Which contracts from 2024 mention termination?")
    assert names(events)[-3:] == ["clarification", "tool_call_result", "message_complete"]
    (clar,) = of(events, "clarification")
    assert clar["type"] == "no_results" and set(clar) == {"type", "missing_info"}
    info = clar["missing_info"]
    assert "year = 2024" in info  # the condition is named …
    assert "3 matching documents" in info and "search without year = 2024" in info  # … and relaxing it offered
    assert "response" not in names(events)  # not silently dropped: no answer from other years
    done = of(events, "message_complete")[0]
    assert done["status"] == "completed" and done["turns"] == 1
    assert len(h.sent()) == 1


@pytest.mark.parametrize(("configured", "asks"), [(None, True), ("150", True), ("151", False)])
async def test_list_every_invoice_overloads_at_the_configured_count(
    tmp_path: Path, configured: str | None, asks: bool
) -> None:
    env = {"AGENT_CLARIFY_OVERLOAD_HITS": configured} if configured else {}
    steps = [
        call("search_text", {"bucket": "invoices", "query": "every invoice"}),
        answer_citing(lambda body: [r["doc_id"] for r in tool_results(body, "search_text")[0]["results"][:1]]),
    ]
    async with corpus_app(tmp_path, steps, env=env) as h:
        await add_invoices(h.kb, 150)
        events = await h.ask("List every invoice")
    done = of(events, "message_complete")[0]
    assert done["status"] == "completed"
    if asks:  # default 100, or exactly the configured count: 150 documents is an overload
        (clar,) = of(events, "clarification")
        assert clar["type"] == "overload"
        assert "I found 150 documents" in clar["missing_info"]
        assert all(f in clar["missing_info"] for f in ("vendor", "invoice_date", "amount"))
        assert "response" not in names(events) and done["turns"] == 1
    else:  # under the configured count the results come back and the run answers
        assert not of(events, "clarification")
        (result,) = tool_results(h.sent()[1], "search_text")
        assert len(result["results"]) == 10 and result["review"]["status"] in ("enough", "more")
        assert of(events, "response")[0]["sources"][0]["id"].startswith("inv-")


async def test_a_topical_list_request_counts_only_the_matching_documents(tmp_path: Path) -> None:
    # "every invoice from Globex" is a list request over the 30 Globex invoices: under 100, no question.
    steps = [
        call("search_text", {"bucket": "invoices", "query": "every invoice", "filters": {"vendor": "Globex"}}),
        answer_citing(lambda body: [tool_results(body, "search_text")[0]["results"][0]["doc_id"]]),
    ]
    async with corpus_app(tmp_path, steps) as h:
        await add_invoices(h.kb, 150)
        events = await h.ask("List every invoice from Globex")
    assert not of(events, "clarification")
    (result,) = tool_results(h.sent()[1], "search_text")
    assert {r["metadata"]["vendor"] for r in result["results"]} == {"Globex"}


# =========================================================================== item 5: sources keep URLs


KEYWORDS = ["quantum error correction", "surface codes", "qubit redundancy"]


async def test_a_cited_perplexity_answer_carries_its_web_urls(tmp_path: Path) -> None:
    pplx = FakePerplexity()
    pplx.add(
        Answer(
            "Quantum error correction protects qubits with redundancy [1][2].",
            [
                Source("https://a.example/qec", "QEC overview"),
                Source("https://b.example/surface-codes", "Surface codes"),
                Source("javascript:alert(1)", "not a web page"),
            ],
        )
    )

    def px_id(body: dict[str, Any]) -> list[str]:
        return [r["perplexity_result_id"] for r in tool_results(body, "perplexity_search")]

    steps = [
        call("knowledge_base_search", {"query": "quantum error correction"}),
        call("perplexity_search", {"query": "quantum error correction"}),
        lambda body: [ToolCall("index_keywords", {"perplexity_result_id": px_id(body)[0], "keywords": KEYWORDS})],
        answer_citing(px_id, "Redundancy protects qubits.", used_internal_kb=False, used_external_kb=True),
    ]
    async with corpus_app(tmp_path, steps, pplx=pplx) as h:
        events = await h.ask("How does quantum error correction work?")
    assert of(events, "message_complete")[0]["status"] == "completed", of(events, "error")
    (response,) = of(events, "response")
    (source,) = response["sources"]  # only the answer was cited …
    assert source["kind"] == "external" and source["id"].startswith("px_")
    assert source["url"] == "https://a.example/qec"  # … and it carries the web citations' URLs
    assert source["metadata"]["urls"] == ["https://a.example/qec", "https://b.example/surface-codes"]
    assert [c["title"] for c in source["metadata"]["citations"]] == ["QEC overview", "Surface codes"]
    assert "javascript:" not in orjson.dumps(response).decode()
    assert response["used_external_kb"] is True


def _pdf(path: Path, pages: list[str]) -> None:
    """A small text PDF written with pypdf (one Helvetica text line per 90 characters)."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    for text in pages:
        page = writer.add_blank_page(612, 792)
        words, lines, line = text.split(), [], ""
        for w in words:
            if len(line) + len(w) + 1 > 90:
                lines.append(line)
                line = w
            else:
                line = f"{line} {w}".strip()
        lines.append(line)
        escaped = [ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for ln in lines]
        body = " T* ".join(f"({ln}) Tj" for ln in escaped)
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 10 Tf 14 TL 50 740 Td {body} ET".encode("latin-1"))
        page[NameObject("/Contents")] = writer._add_object(stream)
        page[NameObject("/Resources")] = DictionaryObject(
            {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
        )
    with path.open("wb") as f:
        writer.write(f)


def _page_text(topic: str, n: int) -> str:
    return " ".join(f"Sentence {i} of the {topic} section explains the procedure in detail." for i in range(n))


@pytest.mark.skipif(not importlib.util.find_spec("pypdf"), reason="PDF ingestion needs the optional pypdf package")
async def test_a_cited_pdf_passage_carries_its_page(tmp_path: Path) -> None:
    pdf = tmp_path / "manual.pdf"
    _pdf(pdf, [_page_text("installation", 12), _page_text("calibration", 12), _page_text("battery replacement", 12)])

    def first_doc(body: dict[str, Any]) -> list[str]:
        return [tool_results(body, "search_text")[0]["results"][0]["doc_id"]]

    def first_chunk(body: dict[str, Any]) -> list[str]:
        return [tool_results(body, "knowledge_base_search")[0]["chunks"][0]["source_id"]]

    steps = [
        call("search_text", {"bucket": "manuals", "query": "battery replacement procedure", "top_k": 1}),
        answer_citing(first_doc, "Replace the battery as described."),
        call("knowledge_base_search", {"query": "calibration procedure", "top_k": 1, "kb_id": "manuals"}),
        answer_citing(first_chunk, "Calibrate as described."),
    ]
    async with corpus_app(tmp_path, steps) as h:
        report = await h.kb.ingest_paths([pdf], bucket="manuals")
        assert report.added == 1 and report.chunks >= 3, report
        corpus = await h.ask("How do I replace the battery?")
        rag = await h.ask("How do I calibrate it?")
    (hit,) = tool_results(h.sent()[1], "search_text")[0]["results"]
    assert hit["page"] == 3 and hit["location"].startswith("page 3, chunk")
    (source,) = of(corpus, "response")[0]["sources"]
    assert source["location"].startswith("page 3") and source["metadata"]["page"] == 3
    assert source["metadata"]["cited_pages"] == [3] and source["metadata"]["pages"] == 3  # of 3 pages
    (chunk_source,) = of(rag, "response")[0]["sources"]
    assert chunk_source["location"].endswith("manual.pdf, page 2") and chunk_source["metadata"]["page"] == 2


def test_paged_text_chunks_record_their_pages_without_the_carried_overlap() -> None:
    pages = [_page_text("one", 12), _page_text("two", 12), "", _page_text("four", 3)]
    chunks = chunk_text(PAGE_BREAK.join(pages), target=800, overlap=120, paged=True)
    assert [(c.page, c.page_end) for c in chunks][:2] == [(1, 1), (2, 2)]
    assert chunks[-1].page_end == 4 and "four" in chunks[-1].text
    assert all(c.page is None for c in chunk_text("\n\f\n".join(pages), paged=False))


# =========================================================================== item 7: decomposition and review

ROUTE = {
    "intent": "qa",
    "primary_buckets": ["contracts"],
    "entities": [{"name": "ACME", "role": "company"}],
    "topic_terms": ["termination notice period"],
    "subqueries": [
        {"purpose": "filter_docs", "query": "ACME contract 2023"},
        {"purpose": "find_clauses", "query": "termination notice period"},
    ],
    "output_preferences": {"format": "natural_language", "needs_citations": True},
}
CONSTRAINED = {"party": "ACME", "year": {">=": 2023}}
CONSTRAINTS = {
    "constraints": [
        {"field": "party", "operator": "=", "value": "ACME", "raw_text": "ACME"},
        {"field": "year", "operator": ">=", "value": 2023, "raw_text": "from 2023"},
    ],
    "strategy": "keyword",
}


def _schema_file() -> dict[str, Any]:
    path = Path(__file__).resolve().parents[1] / "agenttools" / "rag" / "schemas" / "decomposition.schema.json"
    return json.loads(path.read_text())


async def test_the_decomposition_is_the_seed_s_whole_object_and_validates(tmp_path: Path) -> None:
    def cite(body: dict[str, Any]) -> list[str]:
        return [tool_results(body, "search_text")[0]["results"][0]["doc_id"]]

    steps = [
        say(ROUTE),
        say(CONSTRAINTS),
        call("search_text", {"bucket": "contracts", "query": "termination notice", "filters": CONSTRAINED}),
        answer_citing(cite, "Ninety days written notice [ctr-acme-2023]."),
    ]
    async with corpus_app(tmp_path, steps, planner="record") as h:
        await add_contracts(h.kb)
        events = await h.ask("What notice period applies to terminating ACME contracts from 2023?")
        recorder = h.app.state.services.agent.planner
    assert of(events, "message_complete")[0]["status"] == "completed", of(events, "error")
    (hint,) = recorder.plans
    assert hint is not None
    decomposition = hint.decomposition
    jsonschema.validate(decomposition, _schema_file())  # the schema file, by an independent call
    assert schema_errors(decomposition) == [] and decomposition_schema() == _schema_file()
    assert decomposition["entities"] == [{"name": "ACME", "role": "company"}]
    assert [c["raw_text"] for c in decomposition["constraints"]] == ["ACME", "from 2023"]
    assert [q["purpose"] for q in decomposition["subqueries"]] == ["filter_docs", "find_clauses"]
    assert hint.filters == {"contracts": {"party": {"=": "ACME"}, "year": {">=": 2023}}}
    system = h.sent()[0]["messages"][0]["content"]
    assert '"party":{"=":"ACME"}' in system and '("from 2023")' in system
    (result,) = tool_results(h.sent()[1], "search_text")
    assert [r["doc_id"] for r in result["results"]] == ["ctr-acme-2023"]
    assert result["review"]["status"] == "enough"  # one strong passage answers it
    (source,) = of(events, "response")[0]["sources"]
    assert source["id"] == "ctr-acme-2023"


def _plan_hook_wired() -> bool:
    from app.agent import loop as agent

    return "attach" in inspect.getsource(agent)


needs_plan_hook = pytest.mark.skipif(
    not _plan_hook_wired(), reason="the agent loop does not attach the plan to the run yet (PlanHint.attach)"
)


@needs_plan_hook
async def test_the_plan_s_constraints_become_filters_and_the_review_drives_the_search(tmp_path: Path) -> None:
    def review(body: dict[str, Any]) -> dict[str, Any]:
        return tool_results(body, "search_text")[-1]["review"]

    steps = [
        say({**ROUTE, "subqueries": [{"purpose": "find_clauses", "query": "termination notice"},
                                     {"purpose": "find_facts", "query": "consulting scope"}]}),
        say(CONSTRAINTS),
        call("search_text", {"bucket": "contracts", "query": "termination notice"}),  # no filters: the plan's apply
        lambda body: [ToolCall(review(body)["next_tool_call"]["tool"], review(body)["next_tool_call"]["args"])],
        answer_citing(lambda body: ["ctr-acme-2023"], "Ninety days [ctr-acme-2023]."),
    ]
    async with corpus_app(tmp_path, steps, planner="record") as h:
        await add_contracts(h.kb)
        events = await h.ask("What notice period applies to terminating ACME contracts from 2023?")
    assert of(events, "message_complete")[0]["status"] == "completed", of(events, "error")
    first = tool_results(h.sent()[1], "search_text")[0]
    assert first["filters_from_plan"] is True and first["filters"] == {"party": {"=": "ACME"}, "year": {">=": 2023}}
    assert {r["doc_id"] for r in first["results"]} == {"ctr-acme-2023"}
    assert first["review"]["status"] == "more"
    assert first["review"]["next_tool_call"]["args"]["query"] == "consulting scope"
    second = tool_results(h.sent()[2], "search_text")[-1]
    assert second["review"]["status"] == "enough"


@needs_plan_hook
async def test_a_planned_condition_matching_nothing_is_named_in_the_user_s_words(tmp_path: Path) -> None:
    steps = [
        say(ROUTE),
        say({"constraints": [{"field": "year", "operator": "=", "value": 2024, "raw_text": "from 2024"}]}),
        call("search_text", {"bucket": "contracts", "query": "termination notice"}),
    ]
    async with corpus_app(tmp_path, steps, planner="record") as h:
        await add_contracts(h.kb)
        events = await h.ask("Which contracts from 2024 mention termination?")
    (clar,) = of(events, "clarification")
    assert clar["type"] == "no_results" and 'year = 2024 ("from 2024")' in clar["missing_info"]


async def test_the_review_ends_the_search_when_the_tool_budget_is_spent(tmp_path: Path) -> None:
    steps = [
        call("search_text", {"bucket": "contracts", "query": "termination notice"}),
        answer_citing(lambda body: [tool_results(body, "search_text")[0]["results"][0]["doc_id"]]),
    ]
    async with corpus_app(tmp_path, steps, env={"AGENT_MAX_TOOL_CALLS": "1"}) as h:
        await add_contracts(h.kb)
        events = await h.ask("How are contracts terminated?")
    assert of(events, "message_complete")[0]["status"] == "completed"
    review = tool_results(h.sent()[1], "search_text")[0]["review"]
    assert review == {"status": "enough", "reason": review["reason"], "calls_left": 0}
    assert "budget" in review["reason"]
    assert "generate_response" in tool_results(h.sent()[1], "search_text")[0]["next_step"]


def test_review_rules() -> None:
    state = RunToolState()
    assert review_round(state).status == "more"  # nothing searched yet

    class Hit:
        def __init__(self, doc: str, score: float) -> None:
            self.doc_id, self.score = doc, score

    record_search(state, tool="search_text", bucket="contracts", query="force majeure", filters=None,
                  hits=[Hit("a", 0.1)], total=1)
    weak = review_round(state, calls_left=5)
    assert weak.status == "more" and weak.next_tool_call == {
        "tool": "search_semantic", "args": {"bucket": "contracts", "query": "force majeure"}
    }
    record_search(state, tool="search_semantic", bucket="contracts", query="force majeure", filters=None,
                  hits=[Hit("a", 0.15)], total=1)
    assert review_round(state, calls_left=4).status == "enough"  # both modes tried: answer with it
    assert review_round(state, calls_left=0).status == "enough"

    empty = RunToolState()
    record_search(empty, tool="search_text", bucket="contracts", query="zeppelin", filters=None, hits=[], total=0)
    out = review_round(empty, calls_left=0)
    assert out.status == "clarify" and out.clarification_details["type"] == "no_results"
    empty.clarification = {"type": "overload", "missing_info": "too many"}
    assert review_round(empty).to_dict()["clarification_details"]["type"] == "overload"


def test_the_loop_s_review_hook_acts_only_after_a_search_round() -> None:
    state = RunToolState()
    assert review_after_round(state, ["knowledge_base_search"], calls_left=5) is None
    record_search(state, tool="search_text", bucket="contracts", query="termination", filters=None,
                  hits=[type("Hit", (), {"doc_id": "a", "score": 0.8})()], total=1)
    review = review_after_round(state, ["search_text", "get_document_metadata"], calls_left=5)
    assert review is not None and review.status == "enough" and search_closed(state)
