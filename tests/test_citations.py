"""Citation verification: ``verify_citations`` on its own, and inside ``generate_response``
(unknown ids bounced to the model once, removed on the second attempt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.catalog import build_catalog
from agenttools.core.executor import ToolExecutor
from agenttools.core.registry import EvidenceSource, RunToolState, ToolContext, ToolRegistry
from agenttools.core.validation import validate_arguments
from agenttools.rag.citations import verify_citations
from agenttools.rag.corpus_deps import CorpusToolDeps
from agenttools.rag.corpus_tools import register_corpus_tools
from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.tools import RagToolDeps, register_rag_tools
from llm.types import ToolCall
from storage.sqlite import open_sqlite_storage
from tests.support.events import wire
from tests.test_corpus_tools import build_corpus


def state_with(*sources: EvidenceSource) -> RunToolState:
    state = RunToolState()
    for s in sources:
        state.add_source(s)
    return state


INV = EvidenceSource("inv-001", "Invoice 001 from Globex", kind="internal", location="chunk 0",
                     metadata={"doc_id": "inv-001"})
CHUNK = EvidenceSource("guide#3", "Admin guide", kind="internal", location="chunk 3 — Backups",
                       metadata={"doc_id": "guide"})
WEB = EvidenceSource("px_abc", "Perplexity answer: rates", kind="external")
WEB1 = EvidenceSource("px_abc#1", "Rates 2026", url="https://example.org/rates", kind="external",
                      metadata={"result_id": "px_abc", "index": 1})


def test_known_ids_resolve_in_order_and_the_answer_is_unchanged() -> None:
    state = state_with(INV, CHUNK, WEB, WEB1)
    answer = "Globex billed 200 EUR [inv-001]. Backups run nightly [guide#3][inv-001]; rates rose [1]."
    check = verify_citations(answer, state)
    assert check.ok and check.unknown_ids == []
    assert check.answer_without_unknown == answer
    assert [s.id for s in check.cited_sources] == ["inv-001", "guide#3", "px_abc#1"]
    assert check.cited_sources[1].location == "chunk 3 — Backups"


def test_a_doc_id_resolves_to_its_retrieved_chunk() -> None:
    check = verify_citations("Nightly backups [guide].", state_with(CHUNK))
    assert check.ok and [s.id for s in check.cited_sources] == ["guide#3"]


def test_invented_ids_are_removed_with_their_brackets() -> None:
    state = state_with(INV)
    answer = "Total 200 EUR [inv-001, inv-999]. ACME owes 5k [inv-777]. Also [doc_42; inv-001]."
    check = verify_citations(answer, state)
    assert check.unknown_ids == ["inv-999", "inv-777", "doc_42"]
    assert check.answer_without_unknown == "Total 200 EUR [inv-001]. ACME owes 5k. Also [inv-001]."
    assert [s.id for s in check.cited_sources] == ["inv-001"]


def test_each_unknown_id_is_reported_once() -> None:
    check = verify_citations("a [x-1] b [x-1] c [x-2]", RunToolState())
    assert check.unknown_ids == ["x-1", "x-2"]
    assert check.answer_without_unknown == "a b c"


@pytest.mark.parametrize(
    "text",
    [
        "Use [sic] and [optional] words freely.",
        "See [the guide](https://example.org/guide-1) for details.",
        "Index with `arr[i-1]` or values[idx-2] in code.",
        "```python\nx = rows[row-1]\n```",
        "A checkbox [ ] and [x] stay.",
        "Nested [[inv-9]] brackets are not a citation form.",
    ],
)
def test_ordinary_brackets_are_not_citations(text: str) -> None:
    check = verify_citations(text, RunToolState())
    assert check.ok and check.answer_without_unknown == text


def test_numbers_in_brackets_are_prose_unless_the_run_read_a_web_answer() -> None:
    """A review: an answer saying "Python [3.11] came out before the [2024] release; see the
    list [0, 1, 2]." was refused as citing unretrieved ids and then stripped of them."""
    text = "Python [3.11] came out before the [2024] release; see the list [0, 1, 2]. Billed [inv-001]."
    check = verify_citations(text, state_with(INV))
    assert check.ok and check.answer_without_unknown == text
    assert [s.id for s in check.cited_sources] == ["inv-001"]
    # With a web answer read, a bare number is one of its pages: an unknown one is invented.
    web = verify_citations("Rates rose [1] in [2024].", state_with(WEB, WEB1))
    assert web.unknown_ids == ["2024"] and web.answer_without_unknown == "Rates rose [1] in."


def test_unknown_web_marker_numbers_are_invented_citations() -> None:
    check = verify_citations("Rates rose [1] and fell [7].", state_with(WEB, WEB1))
    assert check.unknown_ids == ["7"]
    assert check.answer_without_unknown == "Rates rose [1] and fell."


# --------------------------------------------------------------------------- through generate_response


@pytest.fixture
async def tools(tmp_path: Path) -> Any:
    kb = await build_corpus(tmp_path / "kb.sqlite3")
    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    keywords = KeywordIndex(storage.keywords, storage.external_results)
    registry = ToolRegistry(build_catalog())
    register_rag_tools(
        registry, RagToolDeps(knowledge=kb, keywords=keywords, external_results=storage.external_results)
    )
    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb))
    async with httpx.AsyncClient() as http:
        ctx = ToolContext("u1", None, "c1", "r1", "knowledge", {}, http, RunToolState())
        yield ToolExecutor(registry, validator=validate_arguments), ctx
    await storage.close()
    await kb.aclose()


async def run(executor: ToolExecutor, ctx: ToolContext, name: str, args: dict[str, Any]) -> Any:
    return await executor.execute(ToolCall(f"id-{name}", name, args, orjson.dumps(args).decode()), ctx)


async def test_generate_response_bounces_invented_ids_once_then_removes_them(tools: Any) -> None:
    executor, ctx = tools
    found = await run(executor, ctx, "search_text", {"bucket": "contracts", "query": "termination notice"})
    assert not found.is_error
    real = found.content["results"][0]["doc_id"]
    answer = f"Either party may terminate with notice [{real}]; the fee is waived [ctr-fake-9]."
    args = {"answer": answer, "sources": [real], "used_internal_kb": True, "used_external_kb": False}

    first = await run(executor, ctx, "generate_response", args)
    assert first.is_error and first.content["reason"] == "unknown_citations"
    assert first.content["unknown_ids"] == ["ctr-fake-9"]
    assert real in [s["source_id"] for s in first.content["valid_sources"]]
    assert first.events == [] and ctx.state.final_response is None

    second = await run(executor, ctx, "generate_response", args)
    assert not second.is_error and second.ends_run
    ((name, payload),) = wire(second.events)
    assert name == "response"
    assert payload["answer"] == f"Either party may terminate with notice [{real}]; the fee is waived."
    (source,) = payload["sources"]
    assert source["id"] == real and source["title"] and source["location"].startswith("chunk ")
    assert any("ctr-fake-9" in c for c in second.content["corrections"])


async def test_inline_citations_add_their_sources_to_the_response(tools: Any) -> None:
    executor, ctx = tools
    await run(executor, ctx, "search_text", {"bucket": "datasheets", "query": "transistor"})
    args = {
        "answer": "BC547 is NPN [ds-bc547] and BC557 is PNP [ds-bc557].",
        "sources": ["ds-bc547"],
        "used_internal_kb": True,
        "used_external_kb": False,
    }
    out = await run(executor, ctx, "generate_response", args)
    assert not out.is_error
    payload = wire(out.events)[0][1]
    assert [s["id"] for s in payload["sources"]] == ["ds-bc547", "ds-bc557"]
    assert payload["answer"] == args["answer"]
