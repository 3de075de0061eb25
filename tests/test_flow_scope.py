"""Issue 20 items 6, 8 and 9: where the RAG flow is mandatory (by default only the
``knowledge`` context), the flow on demand elsewhere, and the seed-fidelity items (the
``query`` of ``index_keywords``, every call in the tool-call log and redacted there, the
review's ``enough``, ``used_internal_kb`` after a failed search). Real app over SSE; the
model is the Ollama loopback fake driven by scripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.log_redaction import log_text, redact_for_log
from app.config import Settings
from tests.conftest import collect_sse, names
from tests.fakes.perplexity import Answer, Source
from tests.test_mandatory_flow import answer, call, flow_app, say, search, sent, tool_results

pytestmark = pytest.mark.slow  # the flow's scope end to end, an app and several runs a test

SEARCH_FIRST = "search the knowledge first"


async def ask_in(base: str, context_type: str, message: str = "How do I resume a stream?") -> list[Any]:
    async with httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(
            client, "POST", f"{base}/v1/agent/chat", json={"message": message, "context_type": context_type}
        )


def results_of(events: list[Any]) -> list[dict[str, Any]]:
    return [e.json() for e in events if e.event == "tool_call_result"]


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body["tools"]}


async def log_rows(app: Any, run_id: str) -> list[tuple[Any, ...]]:
    db = app.state.services.storage.db
    await db.flush()
    return await db.fetchall(
        "SELECT tool_name, status, parameters, result, error FROM tool_calls WHERE run_id = ? ORDER BY id", (run_id,)
    )


def test_the_flow_is_mandatory_in_the_knowledge_context_by_default() -> None:
    assert Settings.from_env({}).mandatory_contexts == ("knowledge",)
    widened = Settings.from_env({"AGENT_MANDATORY_CONTEXTS": "knowledge,workflow,tables"})
    assert widened.mandatory_contexts == ("knowledge", "workflow", "tables")


# ----------------------------------------------------------------------------- on demand


async def test_an_acting_tool_first_in_workflow_is_run_not_refused(tmp_path: Path) -> None:
    steps = [call("list_workflow_rules", {}), say("You have no rules yet.")]
    async with flow_app(tmp_path, steps) as (base, _app, fake, _p):
        events = await ask_in(base, "workflow", "List my workflow rules")
    first = results_of(events)[0]
    assert first["name"] == "list_workflow_rules"
    assert SEARCH_FIRST not in (first.get("error") or "")
    assert events[-1].json()["status"] == "completed" and "error" not in names(events)
    # The four flow tools are offered all the same, and no reminder was sent.
    flow_tools = {"knowledge_base_search", "perplexity_search", "index_keywords", "generate_response"}
    assert flow_tools <= offered(sent(fake)[0])
    last = sent(fake)[1]["messages"][-1]  # the tool's own result (no backend here), no reminder
    assert len(sent(fake)) == 2 and last["role"] == "tool" and "not_executed" not in last["content"]


async def test_a_plain_answer_in_tables_needs_no_search(tmp_path: Path) -> None:
    async with flow_app(tmp_path, [say("A table configuration sets columns and filters.")]) as (base, _a, fake, _p):
        events = await ask_in(base, "tables", "What is a table configuration?")
    assert names(events)[-1] == "message_complete" and events[-1].json()["status"] == "completed"
    assert len(sent(fake)) == 1


async def test_a_started_flow_ends_through_generate_response(tmp_path: Path) -> None:
    steps = [search(), say("Reconnect with Last-Event-ID."), answer()]
    async with flow_app(tmp_path, steps) as (base, _a, fake, _p):
        events = await ask_in(base, "workflow")
    reminder = sent(fake)[2]["messages"][-1]
    assert reminder["role"] == "user" and "generate_response" in reminder["content"]
    assert "response" in names(events) and events[-1].json()["status"] == "completed"


async def test_the_order_rules_hold_once_the_flow_is_used(tmp_path: Path) -> None:
    steps = [call("perplexity_search", {"query": "EventSource reconnect"}), search(), answer()]
    async with flow_app(tmp_path, steps) as (base, _a, fake, pplx):
        events = await ask_in(base, "tables")
    first = results_of(events)[0]
    assert first["name"] == "perplexity_search" and first["is_error"] is True
    refused = tool_results(sent(fake)[1], "perplexity_search")[0]
    assert refused["reason"] == "prerequisite_missing" and "knowledge_base_search" in refused["error"]
    assert pplx.calls == []  # never sent to the web
    assert events[-1].json()["status"] == "completed" and "response" in names(events)


async def test_generate_response_on_demand_needs_no_prior_search(tmp_path: Path) -> None:
    reply = {"answer": "The preview is ready.", "sources": [], "used_internal_kb": False, "used_external_kb": False}
    async with flow_app(tmp_path, [call("generate_response", reply)]) as (base, _a, _f, _p):
        events = await ask_in(base, "workflow", "Make me a preview")
    response = next(e.json() for e in events if e.event == "response")
    assert response["answer"] == "The preview is ready." and events[-1].json()["status"] == "completed"


async def test_widened_scope_refuses_an_acting_first_turn_and_logs_the_refusal(tmp_path: Path) -> None:
    steps = [call("list_workflow_rules", {}), search(), answer()]
    async with flow_app(tmp_path, steps, AGENT_MANDATORY_CONTEXTS="knowledge,workflow") as (base, app, _f, _p):
        events = await ask_in(base, "workflow")
        rows = await log_rows(app, events[0].json()["run_id"])
    first = results_of(events)[0]
    assert first["name"] == "list_workflow_rules" and SEARCH_FIRST in first["error"]
    # Seed 001: every call is logged, the refused one as `rejected`.
    assert [(r[0], r[1]) for r in rows] == [
        ("list_workflow_rules", "rejected"), ("knowledge_base_search", "success"), ("generate_response", "success"),
    ]
    assert "not_executed" in rows[0][3] and SEARCH_FIRST in rows[0][4]


# ----------------------------------------------------------------------------- seed fidelity


async def test_index_keywords_takes_the_original_query(tmp_path: Path) -> None:
    keywords = ["Last-Event-ID header", "SSE resume", "EventSource reconnect"]
    question = "How do I resume a stream after a disconnect?"
    steps = [
        search(),
        call("perplexity_search", {"query": "EventSource Last-Event-ID reconnect"}),
        call("index_keywords", {"keywords": keywords, "query": question}),
        answer("Browsers resend Last-Event-ID.", external=True),
    ]
    async with flow_app(tmp_path, steps) as (base, app, fake, pplx):
        pplx.add(Answer("Browsers resend the Last-Event-ID header.", [Source("https://example.org/sse", "SSE")]))
        events = await ask_in(base, "knowledge", question)
        rows = await log_rows(app, events[0].json()["run_id"])
    indexed = tool_results(sent(fake)[3], "index_keywords")[0]
    assert indexed["indexed"] is True and indexed["keyword_count"] == 3 and indexed["query"] == question
    assert indexed["query_id"]  # tied to this run's query
    logged = next(orjson.loads(r[2]) for r in rows if r[0] == "index_keywords")
    assert logged["query"] == question
    assert events[-1].json()["status"] == "completed"


async def test_enough_ends_the_search(tmp_path: Path) -> None:
    corpus = {"query": "resume stream Last-Event-ID", "bucket": "default"}
    reply = {"answer": "Reconnect with Last-Event-ID [doc-resume].", "sources": ["doc-resume"],
             "used_internal_kb": True, "used_external_kb": False}
    steps = [call("search_text", corpus), call("search_semantic", corpus), call("generate_response", reply)]
    async with flow_app(tmp_path, steps) as (base, _app, fake, _p):
        events = await ask_in(base, "knowledge")
    review = tool_results(sent(fake)[1], "search_text")[0]["review"]
    assert review["status"] == "enough"
    second_offer = offered(sent(fake)[1])
    assert not {"search_text", "search_semantic", "knowledge_base_search", "perplexity_search"} & second_offer
    assert "generate_response" in second_offer
    second = results_of(events)[1]
    assert second["name"] == "search_semantic" and second["is_error"] is True  # not run
    assert events[-1].json()["status"] == "completed" and "response" in names(events)


async def test_used_internal_kb_is_corrected_when_the_search_failed(tmp_path: Path) -> None:
    reply = {"answer": "Reconnect.", "sources": [], "used_internal_kb": True, "used_external_kb": False}
    failing = call("knowledge_base_search", {"query": "resume", "kb_id": "no_such_kb"})
    async with flow_app(tmp_path, [failing, call("generate_response", reply)]) as (base, _app, _fake, _p):
        events = await ask_in(base, "knowledge")
    assert results_of(events)[0]["is_error"] is True
    response = next(e.json() for e in events if e.event == "response")
    assert response["used_internal_kb"] is False
    assert events[-1].json()["status"] == "completed"


async def test_logged_arguments_and_results_are_redacted(tmp_path: Path) -> None:
    secret_doc = {
        "id": "doc-secret",
        "title": "Calling the API",
        "text": "To resume a stream send Authorization: Bearer sk-live-0123456789abcdef and the "
        "Last-Event-ID header.\x07\u200b",
    }
    reply = {"answer": "Send Bearer sk-live-0123456789abcdef.", "sources": [], "used_internal_kb": False,
             "used_external_kb": False}
    async with flow_app(tmp_path, [search("resume stream Authorization"), call("generate_response", reply)]) as (
        base, app, _f, _p,
    ):
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(f"{base}/v1/kb/documents", json={"documents": [secret_doc]})
            assert r.status_code == 200, r.text
        events = await ask_in(base, "knowledge")
        rows = await log_rows(app, events[0].json()["run_id"])
    kb_row = next(r for r in rows if r[0] == "knowledge_base_search")
    assert "Bearer ***" in kb_row[3] and "sk-live" not in kb_row[3]
    assert "\x07" not in kb_row[3] and "\u200b" not in kb_row[3]
    answer_row = next(r for r in rows if r[0] == "generate_response")
    assert "sk-live" not in bytes(answer_row[2]).decode() and "Bearer ***" in bytes(answer_row[2]).decode()


def test_redaction_rules() -> None:
    value = {"api_key": "k", "nested": {"Authorization": "Bearer x", "note": "use bearer abc.DEF-1\x00"}, "n": 3}
    redacted = {"api_key": "***", "nested": {"Authorization": "***", "note": "use bearer ***"}, "n": 3}
    assert redact_for_log(value) == redacted
    assert log_text('{"password": "p", "text": "ok"}', 4000) == '{"password":"***","text":"ok"}'
    assert log_text("x" * 5000, 100) == "x" * 100
