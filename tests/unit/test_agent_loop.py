"""The agent loop (``app/agent/loop.py``) in-process: a scripted model, a small registry
of test tools, the real executor, validator, selector and prompts, and a run with no
store. Each test reads the run's events and what the model was sent."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from agenttools.core.catalog import build_catalog
from agenttools.core.registry import EvidenceSource, ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from agenttools.rag.deps import RagToolDeps
from agenttools.rag.generate_response import make_generate_response_handler
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ChatRequest
from tests.support.agent_kit import (
    ListToolLog,
    build_agent,
    names,
    payloads,
    recording,
    registry_of,
    run_agent,
    tool,
    tool_results_sent,
)

WEATHER = tool(
    "get_weather",
    {"city": {"type": "string", "maxLength": 40}, "units": {"type": "string", "enum": ["c", "f"], "default": "c"}},
    required=["city"],
)


def weather_registry(calls: list[dict[str, Any]]) -> ToolRegistry:
    return registry_of((WEATHER, recording(lambda a: {"city": a["city"], "temp": 21}, calls)))


def catalog_spec(name: str) -> ToolSpec:
    return next(s for s in build_catalog() if s.name == name)


def knowledge_registry(search: Any = None) -> ToolRegistry:
    """The flow's first and last tools as the catalog defines them: a test search that
    retrieves one passage, and the real ``generate_response``."""

    async def kb_search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        ctx.state.add_source(EvidenceSource(id="doc-resume", title="Resuming a run"))
        return ToolOutcome({"chunks": [{"source_id": "doc-resume", "text": "Reconnect with Last-Event-ID."}]})

    return registry_of(
        (catalog_spec("knowledge_base_search"), search or kb_search),
        (catalog_spec("generate_response"), make_generate_response_handler(cast(RagToolDeps, None))),
    )


SEARCH = ScriptedCall("knowledge_base_search", {"query": "resume a stream"})
ANSWER = ScriptedCall(
    "generate_response",
    {"answer": "Reconnect with Last-Event-ID.", "sources": ["doc-resume"], "confidence_score": 0.9,
     "used_internal_kb": True, "used_external_kb": False},
)


async def test_a_text_only_turn_ends_the_run_completed() -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=("Hello", ", world"))])
    run = await run_agent(build_agent(provider, weather_registry([])), "Say hello")
    assert names(run) == [
        "run_started", "tool_selection", "message_start", "content_chunk", "content_chunk", "message_complete",
    ]
    assert [e.seq for e in run.events] == list(range(1, len(run.events) + 1))
    assert "".join(p["chunk"] for p in payloads(run, "content_chunk")) == "Hello, world"
    done = payloads(run, "message_complete")[0]
    assert done["status"] == "completed" and done["turns"] == 1
    assert len(provider.requests) == 1
    assert provider.requests[0].messages[-1].content == "Say hello"


async def test_a_tool_call_is_validated_executed_and_its_result_goes_back_to_the_model() -> None:
    calls: list[dict[str, Any]] = []
    log = ListToolLog()
    provider = ScriptedProvider([
        ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": "Paris"})]),
        ScriptedTurn(chunks=("It is 21 degrees.",)),
    ])
    run = await run_agent(build_agent(provider, weather_registry(calls), tool_log=log), "Weather in Paris?")
    assert calls == [{"city": "Paris", "units": "c"}]  # validated: the schema's default filled in
    assert names(run)[2:] == [
        "message_start", "tool_call_start", "tool_call_result", "message_start", "content_chunk", "message_complete",
    ]
    start, result = payloads(run, "tool_call_start")[0], payloads(run, "tool_call_result")[0]
    assert start["tool_use_id"] == result["tool_use_id"] and result["name"] == "get_weather"
    assert result["is_error"] is False
    second = provider.requests[1].messages
    assert second[-2].role == "assistant" and [c.name for c in second[-2].tool_calls] == ["get_weather"]
    assert second[-1].tool_results[0].tool_call_id == second[-2].tool_calls[0].id
    assert tool_results_sent(second) == [("get_weather", False, {"city": "Paris", "temp": 21})]
    assert [(r.tool_name, r.status) for r in log.records] == [("get_weather", "success")]
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_every_call_of_one_turn_runs_and_is_answered_in_the_models_order() -> None:
    calls: list[dict[str, Any]] = []
    cities = ["Paris", "Oslo", "Rome"]
    provider = ScriptedProvider([
        ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": c}) for c in cities]),
        ScriptedTurn(chunks=("Done.",)),
    ])
    run = await run_agent(build_agent(provider, weather_registry(calls)), "Weather in three cities?")
    assert sorted(c["city"] for c in calls) == sorted(cities)
    asked = provider.requests[1].messages[-2].tool_calls
    answered = provider.requests[1].messages[-1].tool_results
    assert [r.tool_call_id for r in answered] == [c.id for c in asked]
    assert [r[2]["city"] for r in tool_results_sent([provider.requests[1].messages[-1]])] == cities
    assert len(payloads(run, "tool_call_result")) == 3
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_read_only_calls_of_one_turn_run_at_the_same_time() -> None:
    both_in = asyncio.Event()
    inside: list[str] = []

    async def search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        inside.append(args["query"])
        if len(inside) == 2:
            both_in.set()
        try:  # each waits for the other: one run after the other would never meet
            async with asyncio.timeout(5):
                await both_in.wait()
        except TimeoutError:
            return ToolOutcome.error("ran alone")
        ctx.state.add_source(EvidenceSource(id="doc-resume", title="Resuming a run"))
        return ToolOutcome({"chunks": []})

    provider = ScriptedProvider([
        ScriptedTurn(calls=[SEARCH, ScriptedCall("knowledge_base_search", {"query": "Last-Event-ID"})]),
        ScriptedTurn(calls=[ANSWER]),
    ])
    run = await run_agent(build_agent(provider, knowledge_registry(search)), "How do I resume?", "knowledge")
    assert [p["is_error"] for p in payloads(run, "tool_call_result")][:2] == [False, False]
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_a_call_refused_by_validation_returns_a_structured_error_and_is_not_run() -> None:
    calls: list[dict[str, Any]] = []
    log = ListToolLog()
    provider = ScriptedProvider([
        ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": "P" * 200})]),
        ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": "Paris"})]),
        ScriptedTurn(chunks=("21 degrees.",)),
    ])
    run = await run_agent(build_agent(provider, weather_registry(calls), tool_log=log), "Weather?")
    assert calls == [{"city": "Paris", "units": "c"}]  # only the corrected call ran
    name, is_error, content = tool_results_sent(provider.requests[1].messages)[0]
    assert (name, is_error) == ("get_weather", True)
    assert content["error"] == "invalid_parameters" and content["reason"] and content["guidance"]
    assert "city" in content["reason"]
    assert [p["is_error"] for p in payloads(run, "tool_call_result")] == [True, False]
    assert [r.status for r in log.records] == ["rejected", "retry"]
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_max_loops_ends_the_run_with_error_max_loops() -> None:
    def forever(request: ChatRequest, index: int) -> ScriptedTurn:
        return ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": f"City {index}"})])

    provider = ScriptedProvider(forever)
    run = await run_agent(build_agent(provider, weather_registry([]), max_loops=3, max_tool_calls=10), "Loop")
    assert len(provider.requests) == 3
    assert [p["code"] for p in payloads(run, "error")] == ["max_loops"]
    done = payloads(run, "message_complete")
    assert len(done) == 1 and done[0]["status"] == "failed" and done[0]["turns"] == 3
    assert names(run)[-2:] == ["error", "message_complete"]


async def test_knowledge_without_a_search_gets_one_reminder_then_fails_mandatory_tool_missing() -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=("Just reconnect.",)), ScriptedTurn(chunks=("Reconnect!",))])
    run = await run_agent(build_agent(provider, knowledge_registry()), "How do I resume?", "knowledge")
    assert len(provider.requests) == 2
    reminder = provider.requests[1].messages[-1]
    assert reminder.role == "user" and reminder.reminder is True and "knowledge_base_search" in reminder.content
    errors = payloads(run, "error")
    assert [e["code"] for e in errors] == ["mandatory_tool_missing"] and "knowledge_base_search" in errors[0]["message"]
    assert payloads(run, "message_complete")[0]["status"] == "failed"


async def test_a_turn_that_skips_the_search_is_answered_not_executed_and_nothing_of_it_runs() -> None:
    answered: list[dict[str, Any]] = []
    registry = knowledge_registry()
    real = registry.handler("generate_response")
    assert real is not None

    async def generate(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        answered.append(args)
        return await real(args, ctx)

    registry.set_handler("generate_response", generate)
    provider = ScriptedProvider([ScriptedTurn(calls=[c]) for c in (ANSWER, SEARCH, ANSWER)])
    run = await run_agent(build_agent(provider, registry), "How do I resume?", "knowledge")
    refused = tool_results_sent(provider.requests[1].messages)
    assert refused[0][:2] == ("generate_response", True) and refused[0][2]["error"] == "not_executed"
    assert len(answered) == 1  # only the call after the search ran
    assert payloads(run, "message_complete")[0]["status"] == "completed"


async def test_generate_response_ends_the_run_with_the_response_event() -> None:
    turns = [ScriptedTurn(calls=[SEARCH]), ScriptedTurn(calls=[ANSWER]), ScriptedTurn(chunks=("x",))]
    provider = ScriptedProvider(turns)
    run = await run_agent(build_agent(provider, knowledge_registry()), "How do I resume?", "knowledge")
    assert len(provider.requests) == 2  # no model turn after the answer
    assert names(run)[-5:] == ["tool_call_start", "content_chunk", "response", "tool_call_result", "message_complete"]
    response = payloads(run, "response")[0]
    assert response["answer"] == "Reconnect with Last-Event-ID."
    assert [p["chunk"] for p in payloads(run, "content_chunk")] == [response["answer"]]  # the answer as text
    assert [s["id"] for s in response["sources"]] == ["doc-resume"] and response["used_internal_kb"] is True
    done = payloads(run, "message_complete")[0]
    assert done["status"] == "completed" and done["turns"] == 2
    # The web search is offered only once the knowledge was searched.
    offered = [[t.name for t in r.tools] for r in provider.requests]
    assert offered == [["knowledge_base_search", "generate_response"]] * 2


async def test_usage_is_summed_over_the_runs_turns() -> None:
    provider = ScriptedProvider([
        ScriptedTurn(calls=[ScriptedCall("get_weather", {"city": "Paris"})]),  # 10 in, 0 out
        ScriptedTurn(chunks=("a" * 8,), calls=[ScriptedCall("get_weather", {"city": "Oslo"})]),  # 10 in, 2 out
        ScriptedTurn(chunks=("b" * 20,)),  # 10 in, 5 out
    ])
    run = await run_agent(build_agent(provider, weather_registry([])), "Weather twice?")
    done = payloads(run, "message_complete")[0]
    assert done["turns"] == 3
    assert done["usage"] == {"input_tokens": 30, "output_tokens": 7}
