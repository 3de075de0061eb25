"""The four tools of the mandatory RAG flow, driven through the real catalog specs and the
real argument validation, with SQLite stores on a temp file, Perplexity faked on loopback
and a small in-memory knowledge base speaking the ``KnowledgeBase.search`` API."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.catalog_knowledge import knowledge_specs
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry, UnknownToolError
from agenttools.core.validation import validate_arguments
from agenttools.rag.external_results import new_external_result
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.perplexity import PerplexityClient
from agenttools.rag.policy import mark_kb_searched, note_external_result
from agenttools.rag.tools import (
    GENERATE_RESPONSE,
    INDEX_KEYWORDS,
    KB_SEARCH,
    PERPLEXITY_SEARCH,
    RagToolDeps,
    missing_prerequisite,
    next_required_tool,
    register_rag_tools,
)
from knowledge.types import ChunkHit, SearchResponse
from storage.interfaces import ExternalResultStore
from storage.sqlite import SqliteStorage, open_sqlite_storage
from tests.fakes.perplexity import Answer, Fail, FakePerplexity, Hang, Source
from tests.support.events import wire
from tests.support.server import serve_app
from tests.support.sqlite_templates import SqliteTemplates

DOCS = [
    ("events", "SSE events", "Every run streams run_started first and message_complete last over SSE."),
    (
        "config",
        "Configuration",
        "AGENT_DB_PATH selects the SQLite file; PERPLEXITY_API_KEY enables web search.",
    ),
    (
        "tools",
        "Tool selection",
        "Tool selection filters by context, searches embeddings and merges core tools.",
    ),
]


class SmallKnowledgeBase:
    """Token-overlap search over a few documents, returning the real ``knowledge`` types."""

    def __init__(self, docs: list[tuple[str, str, str]]) -> None:
        self.docs = docs
        self.fail_with: Exception | None = None
        self.calls: list[dict[str, Any]] = []

    async def search(self, query: str, *, bucket: str | None = None, top_k: int = 5) -> SearchResponse:
        self.calls.append({"query": query, "bucket": bucket, "top_k": top_k})
        if self.fail_with is not None:
            raise self.fail_with
        if bucket not in (None, "default"):
            raise ValueError(f"unknown bucket {bucket!r}; buckets: default")
        q = set(re.findall(r"\w+", query.lower()))
        scored = []
        for pos, (doc_id, title, text) in enumerate(self.docs):
            overlap = len(q & set(re.findall(r"\w+", (title + " " + text).lower())))
            if overlap:
                scored.append((overlap, pos, doc_id, title, text))
        scored.sort(reverse=True)
        top = scored[0][0] if scored else 1
        hits = [
            ChunkHit(
                doc_id,
                f"{doc_id}:0",
                title,
                text,
                round(o / top, 4),
                {"lang": "en"},
                f"kb/{doc_id}.md",
                None,
                "default",
                0,
            )
            for o, _, doc_id, title, text in scored[:top_k]
        ]
        return SearchResponse(hits=hits, total_matches=len(scored), relaxed=False, elapsed_ms=0.1)


@dataclass
class Harness:
    registry: ToolRegistry
    kb: SmallKnowledgeBase
    keywords: KeywordIndex
    results: ExternalResultStore
    http: httpx.AsyncClient
    fake: FakePerplexity
    storage: SqliteStorage
    runs: list[ToolContext] = field(default_factory=list)

    def run(self, conversation_id: str = "conv-1") -> ToolContext:
        ctx = ToolContext(
            user_id="u1",
            authorization=None,
            conversation_id=conversation_id,
            run_id=f"run-{len(self.runs) + 1}",
            context_type="knowledge",
            context={},
            http=self.http,
            state=RunToolState(),
        )
        self.runs.append(ctx)
        return ctx

    async def call(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> ToolOutcome:
        """As the agent loop does: validate against the catalog schema, then execute."""
        checked = validate_arguments(self.registry.spec(name), args)
        assert checked.ok, checked.error
        handler = self.registry.handler(name)
        assert handler is not None
        return await handler(checked.arguments, ctx)

    async def raw(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> ToolOutcome:
        """Straight to the handler, for domain rules the schema would already catch."""
        handler = self.registry.handler(name)
        assert handler is not None
        return await handler(args, ctx)


async def build(
    db: Path, http: httpx.AsyncClient, fake: FakePerplexity, base_url: str | None
) -> Harness:
    storage = await open_sqlite_storage(db)
    results = storage.external_results
    keywords = KeywordIndex(storage.keywords, results)
    kb = SmallKnowledgeBase(DOCS)
    perplexity = PerplexityClient(http, fake.api_key, base_url=base_url, timeout_s=0.3) if base_url else None
    registry = ToolRegistry(knowledge_specs())
    register_rag_tools(registry, RagToolDeps(kb, keywords, results, perplexity))
    return Harness(registry, kb, keywords, results, http, fake, storage)


@pytest.fixture
async def h(tmp_path: Path, sqlite_templates: SqliteTemplates) -> AsyncIterator[Harness]:
    fake = FakePerplexity()
    async with httpx.AsyncClient() as http, serve_app(fake.app) as base:
        harness = await build(sqlite_templates.agent_copy(tmp_path / "agent.db"), http, fake, base)
        yield harness
        await harness.storage.close()


@pytest.fixture
async def unconfigured(tmp_path: Path, sqlite_templates: SqliteTemplates) -> AsyncIterator[Harness]:
    async with httpx.AsyncClient() as http:
        harness = await build(sqlite_templates.agent_copy(tmp_path / "agent.db"), http, FakePerplexity(), None)
        yield harness
        await harness.storage.close()


NITROGEN = Answer(
    "Liquid nitrogen boils at 77 K (-196 °C) at atmospheric pressure [1][2].",
    [
        Source("https://en.wikipedia.org/wiki/Liquid_nitrogen", "Liquid nitrogen - Wikipedia", "2025-11-02"),
        Source("https://webbook.nist.gov/nitrogen", "NIST Chemistry WebBook: Nitrogen"),
    ],
)


async def perplexity_round(h: Harness, ctx: ToolContext) -> dict[str, Any]:
    h.fake.add(NITROGEN)
    out = await h.call(
        ctx, PERPLEXITY_SEARCH, {"query": "liquid nitrogen boiling point", "context": "KB had nothing"}
    )
    assert not out.is_error, out.content
    return out.content


# ------------------------------------------------------------------ knowledge_base_search


async def test_kb_search_returns_chunks_and_registers_them(h: Harness) -> None:
    ctx = h.run()
    out = await h.call(ctx, KB_SEARCH, {"query": "which SQLite file: AGENT_DB_PATH"})
    assert not out.is_error
    c = out.content
    assert c["query_id"] == ctx.state.query_id and c["query_id"].startswith("q_")
    assert c["chunks"][0]["doc_id"] == "config"
    assert set(c["chunks"][0]) >= {"doc_id", "chunk_id", "title", "text", "score", "metadata", "source_id"}
    assert 0 <= c["chunks"][0]["score"] <= 1
    assert c["external_answers"] == []
    assert isinstance(c["sufficient_hint"], str) and c["sufficient_hint"]
    assert h.kb.calls[-1] == {"query": "which SQLite file: AGENT_DB_PATH", "bucket": None, "top_k": 5}
    src = ctx.state.sources["config:0"]
    assert (src.kind, src.title, src.metadata["doc_id"], src.location) == (
        "internal",
        "Configuration",
        "config",
        "kb/config.md",
    )
    # a second search in the same run keeps the run's query id
    again = await h.call(ctx, KB_SEARCH, {"query": "tool selection", "top_k": 2})
    assert again.content["query_id"] == c["query_id"]
    assert h.kb.calls[-1]["top_k"] == 2


async def test_kb_search_with_no_results_still_counts(h: Harness) -> None:
    ctx = h.run()
    out = await h.call(ctx, KB_SEARCH, {"query": "zebra migration"})
    assert not out.is_error and out.content["chunks"] == []
    assert "No passages matched" in out.content["sufficient_hint"]
    assert missing_prerequisite(PERPLEXITY_SEARCH, ctx.state) is None


async def test_kb_failure_is_a_readable_tool_error(h: Harness) -> None:
    ctx = h.run()
    h.kb.fail_with = RuntimeError("disk on fire")
    out = await h.call(ctx, KB_SEARCH, {"query": "events"})
    assert out.is_error and "unavailable" in out.content["error"]
    assert "guidance" in out.content
    # the mandatory step was taken: the model may go on to the web or answer
    assert missing_prerequisite(PERPLEXITY_SEARCH, ctx.state) is None


async def test_kb_unknown_kb_id_names_the_problem(h: Harness) -> None:
    ctx = h.run()
    out = await h.call(ctx, KB_SEARCH, {"query": "events", "kb_id": "contracts"})
    assert out.is_error and "unknown bucket" in out.content["error"]
    assert h.kb.calls[-1]["bucket"] == "contracts"


async def test_kb_blank_query_is_rejected(h: Harness) -> None:
    out = await h.raw(h.run(), KB_SEARCH, {"query": "   "})
    assert out.is_error


# ------------------------------------------------------------------ perplexity_search


async def test_perplexity_requires_a_kb_search_first(h: Harness) -> None:
    ctx = h.run()
    out = await h.call(ctx, PERPLEXITY_SEARCH, {"query": "liquid nitrogen"})
    assert out.is_error and "knowledge_base_search first" in out.content["error"]
    assert out.content["reason"] == "prerequisite_missing"
    assert out.counts_as_execution is False  # refused, not executed
    assert h.fake.calls == []


async def test_perplexity_success_is_stored_and_citable(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "liquid nitrogen"})
    c = await perplexity_round(h, ctx)
    rid = c["perplexity_result_id"]
    assert rid.startswith("px_") and c["answer"].startswith("Liquid nitrogen boils")
    assert [x["source_id"] for x in c["citations"]] == [f"{rid}#1", f"{rid}#2"]
    assert c["citations"][0]["date"] == "2025-11-02"
    stored = await h.results.get(rid, owner="u1")
    assert stored is not None and stored.query_id == ctx.state.query_id and stored.conversation_id == "conv-1"
    assert [s.url for s in stored.citations] == [x["url"] for x in c["citations"]]
    assert ctx.state.last_external_result_id == rid
    assert {rid, f"{rid}#1", f"{rid}#2"} <= set(ctx.state.sources)
    assert ctx.state.sources[f"{rid}#1"].kind == "external"
    assert "KB had nothing" in h.fake.calls[0].user_message
    # SC-003: keywords must be indexed before the answer
    blocked = missing_prerequisite(GENERATE_RESPONSE, ctx.state)
    assert blocked and rid in blocked and "index_keywords" in blocked
    assert next_required_tool(ctx.state) == (
        INDEX_KEYWORDS,
        "Step 3c: index keywords from the Perplexity answer",
    )
    out = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {"answer": "77 K", "sources": [rid], "used_internal_kb": False, "used_external_kb": True},
    )
    assert out.is_error and not out.ends_run and out.events == []


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (Fail(429, "slow down", retry_after="3"), "rate_limited"),
        (Fail(500, "boom"), "unavailable"),
        (Hang(), "timeout"),
    ],
)
async def test_perplexity_failures_let_the_run_answer_from_the_kb(
    h: Harness, reply: Any, reason: str
) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "SSE events"})
    h.fake.add(reply)
    out = await h.call(ctx, PERPLEXITY_SEARCH, {"query": "latest SSE spec changes"})
    assert out.is_error and out.content["reason"] == reason
    assert "knowledge-base results only" in out.content["guidance"]
    assert ctx.state.last_external_result_id is None
    if reason == "rate_limited":
        assert out.content["retry_after"] == "3"
    # nothing pending: the KB-only answer goes through
    done = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {
            "answer": "Runs start with run_started.",
            "sources": ["events:0"],
            "used_internal_kb": True,
            "used_external_kb": False,
        },
    )
    assert not done.is_error and done.ends_run


async def test_perplexity_unconfigured(unconfigured: Harness) -> None:
    ctx = unconfigured.run()
    await unconfigured.call(ctx, KB_SEARCH, {"query": "events"})
    out = await unconfigured.call(ctx, PERPLEXITY_SEARCH, {"query": "anything"})
    assert out.is_error and out.content["reason"] == "unconfigured"
    assert "knowledge-base results only" in out.content["guidance"]


# ------------------------------------------------------------------ index_keywords


async def test_index_keywords_needs_an_external_result(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "events"})
    out = await h.call(ctx, INDEX_KEYWORDS, {"keywords": ["server sent events", "run lifecycle", "SSE"]})
    assert out.is_error and "perplexity_search" in out.content["error"]
    assert await h.keywords.count() == 0


async def test_index_keywords_reports_rejects_and_merges(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "liquid nitrogen"})
    rid = (await perplexity_round(h, ctx))["perplexity_result_id"]
    out = await h.call(
        ctx,
        INDEX_KEYWORDS,
        {
            "keywords": [
                "liquid nitrogen",
                "LIQUID  NITROGEN",
                "boiling point",
                "the",
                "x",
                "cryogenic temperatures",
            ],
            "perplexity_result_id": rid,
        },
    )
    assert not out.is_error, out.content
    c = out.content
    assert c["indexed"] is True and c["keyword_count"] == 3 and c["merged"] is True
    assert [k["keyword"] for k in c["keywords"]] == [
        "liquid nitrogen",
        "boiling point",
        "cryogenic temperatures",
    ]
    assert c["duplicates_merged"] == ["LIQUID NITROGEN"]
    assert {r["keyword"]: r["reason"] for r in c["rejected"]} == {"the": "generic", "x": "too_short"}
    assert c["perplexity_result_ids"] == [rid] and c["query_id"] == ctx.state.query_id
    assocs = await h.keywords.associations("liquid nitrogen", owner="u1")
    assert [(a.query_id, a.external_result_id, a.conversation_id) for a in assocs] == [
        (ctx.state.query_id, rid, "conv-1")
    ]
    assert missing_prerequisite(GENERATE_RESPONSE, ctx.state) is None


async def test_index_keywords_with_too_few_valid_is_an_error(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "liquid nitrogen"})
    await perplexity_round(h, ctx)
    out = await h.call(
        ctx, INDEX_KEYWORDS, {"keywords": ["information", "a", "liquid nitrogen", "Liquid Nitrogen"]}
    )
    assert out.is_error and out.content["reason"] == "too_few"
    assert out.content["valid"] == ["liquid nitrogen"]
    assert {r["reason"] for r in out.content["rejected"]} == {"generic", "too_short"}
    assert "3-10 keywords" in out.content["guidance"]
    assert await h.keywords.count() == 0
    assert missing_prerequisite(GENERATE_RESPONSE, ctx.state) is not None  # still owed


async def test_index_keywords_too_many(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "liquid nitrogen"})
    await perplexity_round(h, ctx)
    out = await h.raw(ctx, INDEX_KEYWORDS, {"keywords": [f"term number {i}" for i in range(11)]})
    assert out.is_error and out.content["reason"] == "too_many"
    assert await h.keywords.count() == 0


async def test_index_keywords_unknown_result_id(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "liquid nitrogen"})
    rid = (await perplexity_round(h, ctx))["perplexity_result_id"]
    out = await h.call(
        ctx,
        INDEX_KEYWORDS,
        {
            "keywords": ["liquid nitrogen", "boiling point", "cryogenics"],
            "perplexity_result_id": "px_0000000000000000",
        },
    )
    assert out.is_error and out.content["valid_result_ids"] == [rid]


async def test_concurrent_index_keywords_calls_keep_exact_counts(h: Harness) -> None:
    vocab = ["alpha term", "beta term", "gamma term", "delta term", "epsilon term"]
    ctxs = []
    for i in range(200):
        ctx = h.run(conversation_id=f"conv-{i}")
        ctx.state.query_id = f"q{i}"
        result = new_external_result(
            provider="perplexity", query=f"question {i}", answer="a", citations=[], query_id=f"q{i}"
        )
        await h.results.save(result)
        mark_kb_searched(ctx.state)
        note_external_result(ctx.state, result.id, needs_keywords=True)
        ctxs.append(ctx)

    def words(i: int) -> list[str]:
        return [vocab[(i + j) % 5] for j in range(3)]

    outs = await asyncio.gather(
        *(h.call(ctx, INDEX_KEYWORDS, {"keywords": words(i)}) for i, ctx in enumerate(ctxs))
    )
    assert not any(o.is_error for o in outs)
    for w in vocab:
        users = [i for i in range(200) if w in words(i)]
        rec = await h.keywords.get(w, owner="u1")
        assert rec is not None and rec.usage_count == len(users)
        assert len(await h.keywords.associations(w, owner="u1")) == len(users)
    assert all(missing_prerequisite(GENERATE_RESPONSE, c.state) is None for c in ctxs)


# ------------------------------------------------------------------ generate_response


async def test_generate_response_emits_the_response_event(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "SSE events message_complete"})
    out = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {
            "answer": "Runs end with message_complete.",
            "sources": ["events"],
            "confidence_score": 0.8,
            "used_internal_kb": True,
            "used_external_kb": False,
        },
    )
    assert not out.is_error and out.ends_run
    ((name, payload),) = wire(out.events)
    assert name == "response"
    assert payload["answer"] == "Runs end with message_complete."
    assert [s["id"] for s in payload["sources"]] == ["events:0"]  # a doc_id resolves to its chunk
    assert payload["sources"][0]["kind"] == "internal" and payload["sources"][0]["title"] == "SSE events"
    assert (payload["confidence_score"], payload["used_internal_kb"], payload["used_external_kb"]) == (
        0.8,
        True,
        False,
    )
    assert ctx.state.final_response == payload
    assert next_required_tool(ctx.state) is None


async def test_generate_response_rejects_sources_not_retrieved(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "SSE events"})
    out = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {
            "answer": "x",
            "sources": ["events:0", "https://made-up.example/a"],
            "used_internal_kb": True,
            "used_external_kb": False,
        },
    )
    assert out.is_error and not out.ends_run and out.events == []
    assert "https://made-up.example/a" in out.content["error"]
    assert "events:0" in [s["source_id"] for s in out.content["valid_sources"]]
    assert ctx.state.final_response is None


async def test_generate_response_before_kb_search_is_refused(h: Harness) -> None:
    ctx = h.run()
    out = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {"answer": "x", "sources": [], "used_internal_kb": False, "used_external_kb": False},
    )
    assert out.is_error and "knowledge_base_search" in out.content["error"]
    assert next_required_tool(ctx.state) == (KB_SEARCH, "Step 1: search the knowledge base")


async def test_generate_response_domain_rules(h: Harness) -> None:
    ctx = h.run()
    await h.call(ctx, KB_SEARCH, {"query": "SSE events"})
    blank = await h.raw(
        ctx,
        GENERATE_RESPONSE,
        {"answer": "  ", "sources": [], "used_internal_kb": False, "used_external_kb": False},
    )
    assert blank.is_error
    wild = await h.raw(
        ctx,
        GENERATE_RESPONSE,
        {
            "answer": "a",
            "sources": [],
            "confidence_score": 1.5,
            "used_internal_kb": False,
            "used_external_kb": False,
        },
    )
    assert wild.is_error and "between 0 and 1" in wild.content["error"]
    uncited = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {"answer": "a", "sources": [], "used_internal_kb": True, "used_external_kb": False},
    )
    assert uncited.is_error and uncited.content["reason"] == "missing_citations"
    # "nothing found" with no sources and no claims is a valid answer; a false external claim is corrected
    ok = await h.call(
        ctx,
        GENERATE_RESPONSE,
        {"answer": "I don't know.", "sources": [], "used_internal_kb": False, "used_external_kb": True},
    )
    assert not ok.is_error and wire(ok.events)[0][1]["used_external_kb"] is False
    assert ok.content["corrections"]


# ------------------------------------------------------------------ SC-006: the whole flow twice


async def test_perplexity_answer_indexed_by_keywords_is_found_by_the_next_search(h: Harness) -> None:
    # Run 1: the KB lacks it -> Perplexity -> keywords -> answer citing the web.
    first = h.run(conversation_id="conv-a")
    kb1 = await h.call(first, KB_SEARCH, {"query": "boiling point of liquid nitrogen"})
    assert kb1.content["chunks"] == [] and kb1.content["external_answers"] == []
    px = await perplexity_round(h, first)
    rid = px["perplexity_result_id"]
    idx = await h.call(
        first, INDEX_KEYWORDS, {"keywords": ["liquid nitrogen", "boiling point", "cryogenics", "77 kelvin"]}
    )
    assert not idx.is_error and idx.content["perplexity_result_ids"] == [rid]
    answer1 = await h.call(
        first,
        GENERATE_RESPONSE,
        {
            "answer": "77 K [1].",
            "sources": [rid, "https://en.wikipedia.org/wiki/Liquid_nitrogen"],
            "used_internal_kb": False,
            "used_external_kb": True,
        },
    )
    payload1 = wire(answer1.events)[0][1]
    assert [s["id"] for s in payload1["sources"]] == [rid, f"{rid}#1"]
    assert payload1["sources"][1]["url"] == "https://en.wikipedia.org/wiki/Liquid_nitrogen"
    assert payload1["used_external_kb"] is True and answer1.ends_run

    # Run 2 (another conversation): a related question finds the stored answer in the KB search.
    second = h.run(conversation_id="conv-b")
    kb2 = await h.call(second, KB_SEARCH, {"query": "At what temperature does Liquid Nitrogen boil?"})
    (ext,) = kb2.content["external_answers"]
    assert ext["origin"] == "external_indexed" and ext["source_id"] == rid
    assert ext["answer"].startswith("Liquid nitrogen boils at 77 K")
    assert ext["matched_keywords"] == ["liquid nitrogen"]
    assert [c["url"] for c in ext["citations"]] == [s.url for s in NITROGEN.sources]
    assert "perplexity_search is not needed" in kb2.content["sufficient_hint"]
    calls_before = len(h.fake.calls)
    answer2 = await h.call(
        second,
        GENERATE_RESPONSE,
        {"answer": "77 K.", "sources": [rid, f"{rid}#2"], "used_internal_kb": True, "used_external_kb": True},
    )
    assert not answer2.is_error, answer2.content
    p2 = wire(answer2.events)[0][1]
    assert [s["id"] for s in p2["sources"]] == [rid, f"{rid}#2"]
    assert p2["sources"][0]["metadata"]["origin"] == "external_indexed"
    assert len(h.fake.calls) == calls_before  # no second paid web call
    # the hit counts as use: last_used_at is set on the matched keyword
    rec = await h.keywords.get("liquid nitrogen", owner="u1")
    assert rec is not None and rec.last_used_at is not None


# ------------------------------------------------------------------ wiring


def test_registering_needs_the_catalog_specs(tmp_path: Path) -> None:
    registry = ToolRegistry([s for s in knowledge_specs() if s.name != INDEX_KEYWORDS])
    deps = RagToolDeps(SmallKnowledgeBase(DOCS), None, None, None)  # type: ignore[arg-type]
    with pytest.raises(UnknownToolError):
        register_rag_tools(registry, deps)
