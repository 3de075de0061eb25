"""``FlowPolicy`` (``agenttools/rag/policy.py``) by itself, on a bare ``RunToolState``:
mandatory versus on demand, what is offered, which turns are refused, what the run still
owes, the refusal of a repeated failing call, and the facts ``record`` keeps.

``tests/test_flow_policy.py`` has the end-to-end edges and two small unit cases (web
search hidden until a search was attempted; ``find_tools`` before the search); these are
the rest of the policy's answers."""

from __future__ import annotations

from typing import Any

import orjson

from agenttools.core.registry import RunToolState, ToolOutcome
from agenttools.rag.policy import (
    FlowPolicy,
    flow_mandatory,
    flow_started,
    kb_search_failed,
    kb_searched,
    mark_indexed,
    missing_prerequisite,
    note_external_result,
    set_flow_scope,
)
from agenttools.rag.review import LAST_REVIEW_KEY

FLOW = ["knowledge_base_search", "perplexity_search", "index_keywords", "generate_response"]
OTHERS = ["list_workflows", "search_text", "search_semantic", "get_document_metadata"]
POLICY = FlowPolicy()


def on_demand() -> RunToolState:
    state = RunToolState()
    set_flow_scope(state, mandatory=False)
    return state


def ok(content: Any = None) -> ToolOutcome:
    return ToolOutcome(content if content is not None else {"chunks": []})


def failing(error: str = "backend down") -> ToolOutcome:
    return ToolOutcome.error(error)


# --- scope -------------------------------------------------------------------------------


def test_a_fresh_state_is_mandatory_and_the_scope_can_be_set_either_way() -> None:
    state = RunToolState()
    assert flow_mandatory(state)
    set_flow_scope(state, mandatory=False)
    assert not flow_mandatory(state)
    set_flow_scope(state, mandatory=True)  # a run carried on under other settings
    assert flow_mandatory(state)


def test_mandatory_owes_the_search_first_and_refuses_every_other_turn() -> None:
    state = RunToolState()
    assert POLICY.next_required(state) == ("knowledge_base_search", "Step 1: search the knowledge base")
    assert POLICY.refuse_turn(["list_workflows"], state)
    assert POLICY.refuse_turn(["list_workflows", "generate_response"], state)
    for search in ("knowledge_base_search", "search_text", "get_document_metadata"):
        assert not POLICY.refuse_turn([search, "list_workflows"], state), search
    assert missing_prerequisite("generate_response", state) is not None


def test_on_demand_owes_nothing_refuses_nothing_and_offers_all_four() -> None:
    state = on_demand()
    assert POLICY.next_required(state) is None
    assert not flow_started(state)
    assert not POLICY.refuse_turn(["list_workflows"], state)
    assert not POLICY.refuse_turn(["generate_response"], state)
    assert POLICY.offerable([*FLOW, *OTHERS], state) == [*FLOW, *OTHERS]
    # Answering without a search is allowed on demand; the web still needs the knowledge first.
    assert missing_prerequisite("generate_response", state) is None
    assert missing_prerequisite("perplexity_search", state) is not None


def test_on_demand_a_run_that_searched_owes_generate_response() -> None:
    state = on_demand()
    POLICY.record("knowledge_base_search", {"query": "q"}, ok(), state)
    assert flow_started(state)
    assert POLICY.next_required(state) == (
        "generate_response", "Step 4: return the final answer through generate_response",
    )
    state.final_response = {"answer": "done"}
    assert POLICY.next_required(state) is None


def test_on_demand_a_failed_generate_response_starts_the_flow() -> None:
    state = on_demand()
    POLICY.record("generate_response", {"answer": ""}, failing("answer must not be empty"), state)
    assert flow_started(state) and POLICY.generate_failures(state) == 1
    assert POLICY.next_required(state) is not None and POLICY.next_required(state)[0] == "generate_response"


# --- what the run owes, step by step -------------------------------------------------------


def test_next_required_walks_the_mandatory_flow_through_the_web_branch() -> None:
    state = RunToolState()
    assert POLICY.next_required(state)[0] == "knowledge_base_search"  # type: ignore[index]
    POLICY.record("knowledge_base_search", {"query": "q"}, ok(), state)
    assert POLICY.next_required(state)[0] == "generate_response"  # type: ignore[index]
    note_external_result(state, "ext_1", needs_keywords=True)
    assert POLICY.next_required(state) == ("index_keywords", "Step 3c: index keywords from the Perplexity answer")
    blocked = missing_prerequisite("generate_response", state)
    assert blocked is not None and '"ext_1"' in blocked
    mark_indexed(state, ["ext_1"])
    assert POLICY.next_required(state)[0] == "generate_response"  # type: ignore[index]
    assert missing_prerequisite("generate_response", state) is None
    state.final_response = {"answer": "done"}
    assert POLICY.next_required(state) is None


def test_an_indexed_web_answer_needs_no_keywords() -> None:
    state = RunToolState()
    POLICY.record("knowledge_base_search", {"query": "q"}, ok(), state)
    note_external_result(state, "ext_old", needs_keywords=False)
    assert missing_prerequisite("index_keywords", state) is None  # there is a result to index for
    assert POLICY.next_required(state)[0] == "generate_response"  # type: ignore[index]


def test_index_keywords_needs_a_web_result_of_this_run() -> None:
    state = RunToolState()
    POLICY.record("knowledge_base_search", {"query": "q"}, ok(), state)
    assert missing_prerequisite("index_keywords", state) is not None
    note_external_result(state, "ext_1", needs_keywords=True)
    assert missing_prerequisite("index_keywords", state) is None


# --- what is offered -----------------------------------------------------------------------


def test_after_a_review_said_enough_no_search_tool_is_offered() -> None:
    for state in (RunToolState(), on_demand()):
        POLICY.record("search_text", {"query": "q"}, ok(), state)
        state.extras[LAST_REVIEW_KEY] = {"status": "enough"}
        offered = POLICY.offerable([*FLOW, *OTHERS], state)
        assert offered == ["index_keywords", "generate_response", "list_workflows", "get_document_metadata"]
        state.extras[LAST_REVIEW_KEY] = {"status": "more"}
        assert POLICY.offerable([*FLOW, *OTHERS], state) == [*FLOW, *OTHERS]


# --- before a call: the repeat refusal -----------------------------------------------------


def test_the_third_identical_failing_call_is_refused() -> None:
    state = RunToolState()
    args = {"doc_id": "missing"}
    for _ in range(2):
        assert POLICY.before_call("get_document_metadata", args, state) is None
        POLICY.record("get_document_metadata", args, failing("no such document"), state)
    refusal = POLICY.before_call("get_document_metadata", dict(args), state)
    assert refusal is not None and refusal.code == "repeated_failing_call"
    assert "2 times" in refusal.reason and "no such document" in refusal.reason
    assert POLICY.repeats_refused(state) == 1
    assert POLICY.before_call("get_document_metadata", args, state) is not None
    assert POLICY.repeats_refused(state) == 2
    # Other arguments, or another tool with the same arguments, are a different call.
    assert POLICY.before_call("get_document_metadata", {"doc_id": "other"}, state) is None
    assert POLICY.before_call("search_text", args, state) is None


def test_argument_order_does_not_make_a_different_call() -> None:
    state = RunToolState()
    for args in ({"a": 1, "b": 2}, {"b": 2, "a": 1}):
        POLICY.record("search_text", args, failing("bad filter"), state)
    assert POLICY.before_call("search_text", {"a": 1, "b": 2}, state) is not None


def test_a_different_error_or_a_success_starts_the_count_again() -> None:
    state = RunToolState()
    args = {"query": "q"}
    POLICY.record("search_text", args, failing("timeout"), state)
    POLICY.record("search_text", args, failing("bad filter"), state)  # another error: count 1
    assert POLICY.before_call("search_text", args, state) is None
    POLICY.record("search_text", args, failing("bad filter"), state)
    assert POLICY.before_call("search_text", args, state) is not None
    POLICY.record("search_text", args, ok(), state)  # it worked after all: forgotten
    assert POLICY.before_call("search_text", args, state) is None


# --- record: the knowledge-search facts ------------------------------------------------------


def test_a_successful_search_marks_the_knowledge_searched_and_not_failed() -> None:
    state = RunToolState()
    POLICY.record("search_semantic", {"query": "q"}, ok(), state)
    assert kb_searched(state) and not kb_search_failed(state)
    assert not POLICY.refuse_turn(["list_workflows"], state)


def test_a_failed_search_counts_as_searched_is_noted_failed_and_gets_a_next_step() -> None:
    state = RunToolState()
    outcome = failing("knowledge base unavailable")
    POLICY.record("knowledge_base_search", {"query": "q"}, outcome, state)
    assert kb_searched(state) and kb_search_failed(state)
    assert "perplexity_search" in outcome.content["next_step"]
    assert missing_prerequisite("perplexity_search", state) is None


def test_a_failed_search_keeps_a_next_step_the_tool_gave() -> None:
    state = RunToolState()
    outcome = ToolOutcome({"error": "down", "next_step": "try later"}, is_error=True)
    POLICY.record("knowledge_base_search", {"query": "q"}, outcome, state)
    assert outcome.content["next_step"] == "try later"


def test_other_tools_do_not_count_as_a_search() -> None:
    state = RunToolState()
    for name in ("list_workflows", "perplexity_search", "generate_response", "find_tools"):
        POLICY.record(name, {}, ok(), state)
    assert not kb_searched(state) and not kb_search_failed(state)
    assert POLICY.next_required(state)[0] == "knowledge_base_search"  # type: ignore[index]


def test_only_failures_of_the_last_tool_count_as_generate_failures() -> None:
    state = RunToolState()
    POLICY.record("generate_response", {"answer": "x"}, ok({"delivered": True}), state)
    POLICY.record("search_text", {"query": "q"}, failing(), state)
    assert POLICY.generate_failures(state) == 0
    POLICY.record("generate_response", {"answer": ""}, failing("answer must not be empty"), state)
    POLICY.record("generate_response", {"answer": " "}, failing("answer must not be empty"), state)
    assert POLICY.generate_failures(state) == 2


def test_the_facts_survive_a_checkpoint_round_trip() -> None:
    state = RunToolState()
    POLICY.record("knowledge_base_search", {"query": "q"}, failing("down"), state)
    POLICY.record("get_document_metadata", {"doc_id": "x"}, failing("missing"), state)
    POLICY.record("get_document_metadata", {"doc_id": "x"}, failing("missing"), state)
    note_external_result(state, "ext_1", needs_keywords=True)
    again = RunToolState(extras=orjson.loads(orjson.dumps(state.extras)))
    assert kb_searched(again) and kb_search_failed(again)
    assert POLICY.next_required(again)[0] == "index_keywords"  # type: ignore[index]
    assert POLICY.before_call("get_document_metadata", {"doc_id": "x"}, again) is not None
