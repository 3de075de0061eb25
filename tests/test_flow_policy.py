"""Issue 12 items 0–2 and 8: the one flow policy on its edge paths, through the real
agent loop with the DEFAULT mandatory policy (AGENT_MANDATORY_CONTEXTS unset)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agenttools.core.registry import RunToolState, ToolOutcome
from agenttools.rag.policy import FlowPolicy, kb_searched
from app.tool_offer import flow_core_tools
from tests.conftest import names
from tests.fakes.perplexity import Answer, Source
from tests.test_mandatory_flow import answer, ask, call, flow_app, search, sent, tool_results

pytestmark = pytest.mark.slow  # the flow policy's edge paths through the real agent loop


def results_of(events: list[Any]) -> list[tuple[str, bool]]:
    return [(e.json()["name"], e.json()["is_error"]) for e in events if e.event == "tool_call_result"]


async def test_a_failing_knowledge_search_counts_and_the_run_goes_to_perplexity(tmp_path: Path) -> None:
    steps = [
        call("knowledge_base_search", {"query": "resume a stream", "kb_id": "no_such_kb"}),
        call("perplexity_search", {"query": "EventSource Last-Event-ID reconnect", "context": "KB failed"}),
        call("index_keywords", {"keywords": ["Last-Event-ID header", "SSE resume", "EventSource reconnect"]}),
        answer("Browsers resend Last-Event-ID.", external=True),
    ]
    async with flow_app(tmp_path, steps) as (base, app, fake, pplx):
        pplx.add(Answer("Browsers resend the Last-Event-ID header.", [Source("https://example.org/sse", "SSE")]))
        events = await ask(base)
        run_id = events[0].json()["run_id"]
        await app.state.services.storage.db.flush()
        row = await app.state.services.storage.db.fetchone(
            "SELECT tool_call_count, used_tools, keyword_count FROM runs WHERE id = ?", (run_id,)
        )
    assert results_of(events) == [
        ("knowledge_base_search", True), ("perplexity_search", False),
        ("index_keywords", False), ("generate_response", False),
    ]
    assert events[-1].json()["status"] == "completed" and "response" in names(events)
    failed = tool_results(sent(fake)[1], "knowledge_base_search")[0]
    assert "perplexity_search" in failed["next_step"]  # the model is told what it may do instead
    # Seed 001's run record.
    assert row is not None and row[0] == 4 and row[2] == 3
    assert row[1].split(",") == ["knowledge_base_search", "perplexity_search", "index_keywords", "generate_response"]


async def test_a_corpus_search_may_start_a_knowledge_run(tmp_path: Path) -> None:
    steps = [
        call("search_text", {"query": "resume stream Last-Event-ID", "bucket": "default"}),
        call("generate_response", {"answer": "Reconnect with Last-Event-ID [doc-resume].", "sources": ["doc-resume"],
                                   "confidence_score": 0.8, "used_internal_kb": True, "used_external_kb": False}),
    ]
    async with flow_app(tmp_path, steps) as (base, _app, _fake, _pplx):
        events = await ask(base)
    assert results_of(events)[0] == ("search_text", False)
    assert events[-1].json()["status"] == "completed" and "response" in names(events)


async def test_generate_response_failing_twice_ends_after_exactly_two_calls(tmp_path: Path) -> None:
    bad = {"answer": "", "sources": [], "confidence_score": 0.5}
    steps = [search(), call("generate_response", bad), call("generate_response", bad), answer()]
    async with flow_app(tmp_path, steps) as (base, _app, fake, _pplx):
        events = await ask(base)
    assert [r for r in results_of(events) if r[0] == "generate_response"] == [("generate_response", True)] * 2
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "response_generation_failed"
    assert events[-1].json()["status"] == "failed"
    assert len(sent(fake)) == 3  # no third chance


async def test_a_failing_then_missing_generate_response_has_one_retry_in_all(tmp_path: Path) -> None:
    steps = [search(), call("generate_response", {"answer": ""}), lambda body: []]
    async with flow_app(tmp_path, steps) as (base, _app, _fake, _pplx):
        events = await ask(base)
    assert next(e.json() for e in events if e.event == "error")["code"] == "response_generation_failed"


async def test_an_identical_failing_call_is_not_run_a_third_time_and_cannot_loop(tmp_path: Path) -> None:
    same = call("get_document_metadata", {"doc_id": "no-such-document"})
    steps = [search(), same, same, same, same, same, answer()]
    async with flow_app(tmp_path, steps) as (base, _app, fake, _pplx):
        events = await ask(base)
    metadata = [r for r in results_of(events) if r[0] == "get_document_metadata"]
    assert metadata == [("get_document_metadata", True)] * 4
    refused = tool_results(sent(fake)[4], "get_document_metadata")[-1]
    assert refused["error"] == "repeated_failing_call"
    err = next(e.json() for e in events if e.event == "error")
    assert err["code"] == "repeated_tool_call" and events[-1].json()["status"] == "failed"
    assert len(sent(fake)) == 5  # the model was not asked again after the second refusal


async def test_benign_questions_are_not_refused_by_the_flow(tmp_path: Path) -> None:
    steps = [search("how is the system prompt built"), answer("It is assembled from prompt files.")]
    async with flow_app(tmp_path, steps) as (base, _app, _fake, _pplx):
        events = await ask(base, "How is the system prompt built?")
    assert events[-1].json()["status"] == "completed"


def test_the_web_branch_is_offered_wherever_the_flow_applies() -> None:
    # Issue 20 item 6: mandatory or on demand, the four flow tools are core everywhere.
    for mandatory in (("workflow", "tables", "knowledge"), ("knowledge",), ()):
        pick = flow_core_tools(mandatory)
        for context in ("workflow", "tables", "knowledge"):
            core = pick(context, {})
            assert {"knowledge_base_search", "perplexity_search", "index_keywords", "generate_response"} <= set(core)


def test_offerable_hides_perplexity_until_any_knowledge_search_was_attempted() -> None:
    policy, state = FlowPolicy(), RunToolState()
    tools = ["search_semantic", "perplexity_search", "generate_response"]
    assert policy.offerable(tools, state) == ["search_semantic", "generate_response"]
    assert policy.refuse_turn(["generate_response"], state) and not policy.refuse_turn(["search_semantic"], state)
    policy.record("search_semantic", {"query": "x"}, ToolOutcome.error("index unavailable"), state)
    assert kb_searched(state) and policy.offerable(tools, state) == tools
    # A call rejected by validation is not an attempt.
    fresh = RunToolState()
    rejected = ToolOutcome(content={"error": "bad"}, is_error=True, counts_as_execution=False)
    policy.record("knowledge_base_search", {}, rejected, fresh)
    assert not kb_searched(fresh)


def test_looking_for_tools_may_come_before_the_knowledge_search() -> None:
    # find_tools acts on nothing and answers nothing: a turn of only that does not skip step 1,
    # but it does not open the way for other tools either.
    policy, state = FlowPolicy(), RunToolState()
    assert not policy.refuse_turn(["find_tools"], state)
    assert not policy.refuse_turn(["find_tools", "knowledge_base_search"], state)
    assert policy.refuse_turn(["find_tools", "generate_response"], state)
    assert policy.refuse_turn(["list_workflows"], state)
