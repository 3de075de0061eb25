"""The mandatory flow (seeds 000–002) as ONE policy, read by the agent loop and the handlers.

* **Search the knowledge first.** Any knowledge search — ``knowledge_base_search``,
  ``search_text``, ``search_semantic``, ``get_document_metadata`` — satisfies the first
  step, and so does an *attempted* search that failed (FR-011: a knowledge base that is
  down must degrade to Perplexity or an honest answer, not fail the run); the model is
  told what failed. A call rejected by validation is not an attempt.
* ``perplexity_search`` only after that; once Perplexity answered, ``index_keywords``
  must run before ``generate_response`` (SC-003).
* ``generate_response`` ends the run; a missing *or failing* one gets exactly one retry
  (FR-010), then the run fails with ``response_generation_failed``.
* An identical failing call (same tool, arguments and error) is not run a third time.

**Scope.** Where the flow is *mandatory* (``AGENT_MANDATORY_CONTEXTS``, by default only
the ``knowledge`` context) every rule above holds from the first turn. Elsewhere the
flow is *on demand*: its four tools are offered, nothing forces a search and no other
tool is ever refused for lack of one; the order rules hold once the model uses the flow,
and a run that searched the knowledge ends through ``generate_response``
(``flow_started``). Which scope a run has is kept in its state (``set_flow_scope``) so the
handlers read the same answer as the loop.

Seed 004's review: once a review after a corpus search says ``enough``, the search tools
(and the web search) are no longer offered, so the next turn answers.

The facts are kept in ``RunToolState.extras`` under ``rag.*`` / ``flow.*`` keys (plain
JSON, so they travel in the run's checkpoint). ``FlowPolicy`` answers "what must come
next" (``next_required``) and "what may be offered now" (``offerable``); the loop records
each call's outcome with ``record``; handlers call :func:`missing_prerequisite`, so a rule
holds whichever way a tool is reached.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from agenttools.core.catalog import names_where
from agenttools.core.catalog_discovery import FIND_TOOLS
from agenttools.core.registry import RunToolState, ToolOutcome
from agenttools.rag.review import search_closed

KB_SEARCH = "knowledge_base_search"
PERPLEXITY_SEARCH = "perplexity_search"
INDEX_KEYWORDS = "index_keywords"
GENERATE_RESPONSE = "generate_response"
#: The flow's own steps (its roles: first, web, keywords, last), not a list of tools by a
#: property: which tools count as a knowledge search, or close after ``enough``, is each
#: tool's own fact (``ToolSpec.knowledge_search``, ``closed_by_enough``).
RAG_TOOL_NAMES = (KB_SEARCH, PERPLEXITY_SEARCH, INDEX_KEYWORDS, GENERATE_RESPONSE)

_KB_SEARCHED = "rag.kb_searched"
_EXTERNAL_IDS = "rag.external_result_ids"
_UNINDEXED = "rag.unindexed_result_ids"
_KB_FAILED = "rag.kb_search_failed"
_GENERATE_FAILURES = "flow.generate_failures"
_FAILED_CALLS = "flow.failed_calls"
_REFUSED_REPEATS = "flow.refused_repeats"
_ON_DEMAND = "flow.on_demand"


# ----------------------------------------------------------------------------- facts


def kb_searched(state: RunToolState) -> bool:
    return bool(state.extras.get(_KB_SEARCHED))


def kb_search_failed(state: RunToolState) -> bool:
    """Whether a knowledge search of this run was attempted and failed."""
    return bool(state.extras.get(_KB_FAILED))


def set_flow_scope(state: RunToolState, *, mandatory: bool) -> None:
    """Record whether the flow is mandatory in this run (the agent sets it at every start)."""
    if mandatory:
        state.extras.pop(_ON_DEMAND, None)
    else:
        state.extras[_ON_DEMAND] = True


def flow_mandatory(state: RunToolState) -> bool:
    """The run's scope; a state that never had one set is mandatory (the strict reading)."""
    return not state.extras.get(_ON_DEMAND)


def flow_started(state: RunToolState) -> bool:
    """Whether the run has used the RAG flow: searched the knowledge, retrieved a web
    answer or tried ``generate_response``. Only then do its end rules bind on demand."""
    return (
        kb_searched(state)
        or bool(state.extras.get(_EXTERNAL_IDS))
        or int(state.extras.get(_GENERATE_FAILURES, 0)) > 0
    )


def mark_kb_searched(state: RunToolState) -> None:
    state.extras[_KB_SEARCHED] = True


def external_result_ids(state: RunToolState) -> list[str]:
    """External results this run has seen (fresh Perplexity answers and indexed ones)."""
    return list(state.extras.get(_EXTERNAL_IDS, ()))


def note_external_result(state: RunToolState, result_id: str, *, needs_keywords: bool) -> None:
    ids: list[str] = state.extras.setdefault(_EXTERNAL_IDS, [])
    if result_id not in ids:
        ids.append(result_id)
    if needs_keywords:
        pending: list[str] = state.extras.setdefault(_UNINDEXED, [])
        if result_id not in pending:
            pending.append(result_id)
        state.last_external_result_id = result_id


def unindexed_result_ids(state: RunToolState) -> list[str]:
    return list(state.extras.get(_UNINDEXED, ()))


def mark_indexed(state: RunToolState, result_ids: list[str]) -> None:
    pending: list[str] = state.extras.get(_UNINDEXED, [])
    state.extras[_UNINDEXED] = [r for r in pending if r not in result_ids]


# ----------------------------------------------------------------------------- rules


def missing_prerequisite(tool_name: str, state: RunToolState) -> str | None:
    """Why ``tool_name`` may not run yet in this run, as a message for the model; else None."""
    if tool_name == PERPLEXITY_SEARCH and not kb_searched(state):
        return (
            "perplexity_search is only available after knowledge_base_search. Call "
            "knowledge_base_search first with a query tailored to the user's question; use "
            "perplexity_search only if those results are insufficient."
        )
    if tool_name == INDEX_KEYWORDS and not external_result_ids(state):
        return (
            "index_keywords stores keywords for a perplexity_search result, and this run has "
            "none. Call it only after perplexity_search has returned an answer."
        )
    if tool_name == GENERATE_RESPONSE:
        if not kb_searched(state) and flow_mandatory(state):
            return (
                "You must call knowledge_base_search before generate_response: every answer "
                "starts from the internal knowledge base."
            )
        pending = unindexed_result_ids(state)
        if pending:
            ids = ", ".join(f'"{p}"' for p in pending)
            return (
                f"perplexity_search returned result {ids} but no keywords were indexed for it. "
                "Call index_keywords with 3-10 specific keywords (2-50 characters each) taken "
                f"from that answer and perplexity_result_id {ids}, then call generate_response."
            )
    return None


def prerequisite_error(message: str) -> ToolOutcome:
    """The outcome for a call made out of order: not executed, so not counted as one."""
    return ToolOutcome(
        content={"error": message, "reason": "prerequisite_missing"},
        is_error=True,
        counts_as_execution=False,
    )


def next_required_tool(state: RunToolState) -> tuple[str, str] | None:
    """``(tool, workflow step)`` the run still owes before it may end, for the enforcement
    prompt. On demand, a run that has not used the flow owes nothing."""
    if not flow_mandatory(state) and not flow_started(state):
        return None
    if not kb_searched(state) and flow_mandatory(state):
        return KB_SEARCH, "Step 1: search the knowledge base"
    if unindexed_result_ids(state):
        return INDEX_KEYWORDS, "Step 3c: index keywords from the Perplexity answer"
    if state.final_response is None:
        return GENERATE_RESPONSE, "Step 4: return the final answer through generate_response"
    return None


# ----------------------------------------------------------------------------- the policy

#: How many times an identical failing call may run; after that it is refused.
IDENTICAL_FAILURES_ALLOWED = 2


@dataclass(frozen=True, slots=True)
class Refusal:
    """A call the policy will not run, and why (for the model)."""

    reason: str
    code: str = "not_executed"


@dataclass(frozen=True, slots=True)
class FlowPolicy:
    first: str = KB_SEARCH
    last: str = GENERATE_RESPONSE
    tools: tuple[str, ...] = RAG_TOOL_NAMES
    #: False: the flow is on demand in this context (see the module docstring). The
    #: agent writes it into each run's state (``set_flow_scope``), which the rules read.
    mandatory: bool = True
    #: Each of these is "searching the knowledge" for step 1 of the flow (the tools'
    #: ``knowledge_search`` fact, read off the catalog).
    knowledge_search: frozenset[str] = field(
        default_factory=lambda: frozenset(names_where(lambda s: s.knowledge_search))
    )
    #: Not offered once a review said ``enough`` (reading a found document's metadata
    #: stays): the tools' ``closed_by_enough`` fact.
    closed_by_enough: frozenset[str] = field(
        default_factory=lambda: frozenset(names_where(lambda s: s.closed_by_enough))
    )

    # --- what must come next / what may be offered ------------------------------------

    def next_required(self, state: RunToolState) -> tuple[str, str] | None:
        """``(tool, step)`` the run still owes before it may end, or None."""
        return next_required_tool(state)

    def offerable(self, names: Iterable[str], state: RunToolState) -> list[str]:
        """The tools to offer now. Mandatory: Perplexity only once the knowledge was
        searched (on demand all four stay offered; its handler keeps the order). After a
        review said ``enough`` (seed 004), no search tool at all, so the next turn answers."""
        if search_closed(state):
            return [n for n in names if n not in self.closed_by_enough]
        hide_web = flow_mandatory(state) and not kb_searched(state)
        return [n for n in names if not (hide_web and n == PERPLEXITY_SEARCH)]

    def refuse_turn(self, names: Sequence[str], state: RunToolState) -> bool:
        """A turn that skips the first step (no knowledge search yet, none asked for);
        never on demand, where other tools need no search. Looking for tools
        (``find_tools``) acts on nothing and answers nothing, so a turn of only that is
        not skipping the search: it may come first."""
        if not flow_mandatory(state) or kb_searched(state):
            return False
        if any(n in self.knowledge_search for n in names):
            return False
        return not all(n == FIND_TOOLS for n in names)

    # --- before a call ------------------------------------------------------------------

    def before_call(self, name: str, arguments: dict[str, Any], state: RunToolState) -> Refusal | None:
        """Refuse the third identical call of a call that failed the same way twice."""
        entry = state.extras.get(_FAILED_CALLS, {}).get(_call_key(name, arguments))
        if entry is not None and entry[1] >= IDENTICAL_FAILURES_ALLOWED:
            refused: dict[str, int] = state.extras.setdefault(_REFUSED_REPEATS, {})
            refused[name] = refused.get(name, 0) + 1
            return Refusal(
                f"Not executed: this exact {name} call already failed {entry[1]} times with the same "
                f"error ({entry[2]}). Do not repeat it: change the arguments, use another tool, or "
                "answer with what you have.",
                "repeated_failing_call",
            )
        return None

    def repeats_refused(self, state: RunToolState) -> int:
        return sum(state.extras.get(_REFUSED_REPEATS, {}).values())

    # --- after a call -------------------------------------------------------------------

    def record(self, name: str, arguments: dict[str, Any], outcome: ToolOutcome, state: RunToolState) -> None:
        """Update the flow's facts with a call's outcome; add guidance to a failed search."""
        attempted = outcome.counts_as_execution
        if name in self.knowledge_search and attempted:
            mark_kb_searched(state)
            if outcome.is_error:
                state.extras[_KB_FAILED] = True
                if isinstance(outcome.content, dict):
                    outcome.content.setdefault(
                        "next_step",
                        "The knowledge base could not be searched. Tell the user, then use "
                        "perplexity_search if the question needs outside information, or answer with "
                        "what you know through generate_response.",
                    )
        if name == self.last and outcome.is_error:
            state.extras[_GENERATE_FAILURES] = int(state.extras.get(_GENERATE_FAILURES, 0)) + 1
        failed: dict[str, list[Any]] = state.extras.setdefault(_FAILED_CALLS, {})
        key = _call_key(name, arguments)
        if outcome.is_error:
            error = _error_text(outcome)
            digest = hashlib.sha1(error.encode()).hexdigest()[:16]
            entry = failed.get(key)
            count = entry[1] + 1 if entry is not None and entry[0] == digest else 1
            failed[key] = [digest, count, error[:200]]
        else:
            failed.pop(key, None)

    def generate_failures(self, state: RunToolState) -> int:
        return int(state.extras.get(_GENERATE_FAILURES, 0))


def _call_key(name: str, arguments: dict[str, Any]) -> str:
    raw = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS, default=str)
    return f"{name}:{hashlib.sha1(raw).hexdigest()[:16]}"


def _error_text(outcome: ToolOutcome) -> str:
    content = outcome.content
    if isinstance(content, dict):
        return str(content.get("error") or content.get("reason") or content)[:500]
    return str(content)[:500]
