"""The RAG tools over the real ``knowledge.KnowledgeBase`` (hashing embedder), sharing one
SQLite file with the keyword and external-result stores, as the app runs them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.catalog_knowledge import knowledge_specs
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry
from agenttools.core.validation import validate_arguments
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.perplexity import PerplexityClient
from agenttools.rag.tools import (
    GENERATE_RESPONSE,
    INDEX_KEYWORDS,
    KB_SEARCH,
    PERPLEXITY_SEARCH,
    RagToolDeps,
    register_rag_tools,
)
from knowledge import DocumentIn, KnowledgeBase
from storage.sqlite import open_sqlite_storage
from tests.fakes.perplexity import Answer, FakePerplexity, Source
from tests.support.events import wire
from tests.support.server import serve_app
from toolindex.hashing import HashingEmbedder

DOCS = [
    DocumentIn(
        id="events",
        title="SSE events",
        text="Every run streams run_started first and message_complete last. A response event carries "
        "the final answer with its sources.",
    ),
    DocumentIn(
        id="config",
        title="Configuration",
        text="AGENT_DB_PATH selects the SQLite file that holds conversations, keywords and the "
        "knowledge base. PERPLEXITY_API_KEY enables web search.",
    ),
]


class Rig:
    def __init__(self, registry: ToolRegistry, http: httpx.AsyncClient, fake: FakePerplexity) -> None:
        self.registry, self.http, self.fake = registry, http, fake

    def run(self, conversation_id: str) -> ToolContext:
        return ToolContext("u1", None, conversation_id, "run", "knowledge", {}, self.http, RunToolState())

    async def call(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> ToolOutcome:
        checked = validate_arguments(self.registry.spec(name), args)
        assert checked.ok, checked.error
        handler = self.registry.handler(name)
        assert handler is not None
        return await handler(checked.arguments, ctx)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    db = tmp_path / "agent.db"
    fake = FakePerplexity()
    storage = await open_sqlite_storage(db)
    kb = await KnowledgeBase.create(storage.kb_index, HashingEmbedder())
    results = storage.external_results
    keywords = KeywordIndex(storage.keywords, results)
    try:
        report = await kb.ingest_documents(DOCS)
        assert report.added == 2
        async with httpx.AsyncClient() as http, serve_app(fake.app) as base:
            registry = ToolRegistry(knowledge_specs())
            perplexity = PerplexityClient(http, fake.api_key, base_url=base)
            register_rag_tools(registry, RagToolDeps(kb, keywords, results, perplexity))
            yield Rig(registry, http, fake)
    finally:
        await kb.aclose()
        await storage.close()


async def test_kb_only_answer_cites_real_chunks(rig: Rig) -> None:
    ctx = rig.run("conv-1")
    out = await rig.call(ctx, KB_SEARCH, {"query": "which SQLite file AGENT_DB_PATH"})
    assert not out.is_error, out.content
    top = out.content["chunks"][0]
    assert top["doc_id"] == "config" and 0 <= top["score"] <= 1
    assert ctx.state.sources[top["source_id"]].metadata["doc_id"] == "config"
    done = await rig.call(
        ctx,
        GENERATE_RESPONSE,
        {
            "answer": "AGENT_DB_PATH.",
            "sources": [top["chunk_id"]],
            "used_internal_kb": True,
            "used_external_kb": False,
        },
    )
    assert done.ends_run and wire(done.events)[0][1]["sources"][0]["title"] == "Configuration"


async def test_sc006_with_the_real_knowledge_base(rig: Rig) -> None:
    first = rig.run("conv-a")
    await rig.call(first, KB_SEARCH, {"query": "EventSource reconnect Last-Event-ID"})
    rig.fake.add(
        Answer(
            "Browsers resend the last id in the Last-Event-ID header when reconnecting [1].",
            [Source("https://html.spec.whatwg.org/multipage/server-sent-events.html", "HTML Standard: SSE")],
        )
    )
    px = await rig.call(first, PERPLEXITY_SEARCH, {"query": "EventSource reconnect Last-Event-ID header"})
    rid = px.content["perplexity_result_id"]
    idx = await rig.call(
        first, INDEX_KEYWORDS, {"keywords": ["Last-Event-ID", "EventSource reconnect", "SSE replay"]}
    )
    assert not idx.is_error, idx.content

    second = rig.run("conv-b")
    out = await rig.call(second, KB_SEARCH, {"query": "what does the browser send as Last-Event-ID?"})
    assert not out.is_error
    (ext,) = out.content["external_answers"]
    assert ext["source_id"] == rid and ext["origin"] == "external_indexed"
    assert ext["matched_keywords"] == ["Last-Event-ID"]
    done = await rig.call(
        second,
        GENERATE_RESPONSE,
        {
            "answer": "The last id.",
            "sources": ["https://html.spec.whatwg.org/multipage/server-sent-events.html"],
            "used_internal_kb": False,
            "used_external_kb": True,
        },
    )
    assert [s["id"] for s in wire(done.events)[0][1]["sources"]] == [f"{rid}#1"]
    assert len(rig.fake.calls) == 1
