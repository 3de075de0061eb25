"""The ordering rules of the mandatory flow, in one place the agent loop and the handlers share.

Seed 000/002: ``knowledge_base_search`` comes first; ``perplexity_search`` only after it;
once Perplexity answered, ``index_keywords`` must run before ``generate_response``
(SC-003: keywords are indexed in 100% of Perplexity cases). The loop calls
:func:`missing_prerequisite` before executing a tool (and :func:`next_required_tool` to
fill the enforcement prompt); each handler calls it again, so the rule holds whichever
way a tool is reached.

The facts the rules read are recorded by the handlers in ``RunToolState.extras`` under
``rag.*`` keys (helpers below), not inferred from ``tools_called``: a call rejected by
validation or a failed Perplexity call must not count as "done".
"""

from __future__ import annotations

from agenttools.registry import RunToolState, ToolOutcome

KB_SEARCH = "knowledge_base_search"
PERPLEXITY_SEARCH = "perplexity_search"
INDEX_KEYWORDS = "index_keywords"
GENERATE_RESPONSE = "generate_response"
RAG_TOOL_NAMES = (KB_SEARCH, PERPLEXITY_SEARCH, INDEX_KEYWORDS, GENERATE_RESPONSE)

_KB_SEARCHED = "rag.kb_searched"
_EXTERNAL_IDS = "rag.external_result_ids"
_UNINDEXED = "rag.unindexed_result_ids"


# ----------------------------------------------------------------------------- facts


def kb_searched(state: RunToolState) -> bool:
    return bool(state.extras.get(_KB_SEARCHED))


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
        if not kb_searched(state):
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
    """``(tool, workflow step)`` the run still owes before it may end, for the enforcement prompt."""
    if not kb_searched(state):
        return KB_SEARCH, "Step 1: search the knowledge base"
    if unindexed_result_ids(state):
        return INDEX_KEYWORDS, "Step 3c: index keywords from the Perplexity answer"
    if state.final_response is None:
        return GENERATE_RESPONSE, "Step 4: return the final answer through generate_response"
    return None
