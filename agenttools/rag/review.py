"""The review step of seed 004 (§3.2, ``review_evidence``): after a search round, is
there enough evidence to answer (``enough``), should the search go on (``more``, with
the call to make next), or must the user be asked (``clarify``)?

It is decided from facts, not by another model call: every corpus search records what
it found (``record_search``: bucket, query, filters, mode, passages, documents, best
score) in ``RunToolState.extras``, and ``review_round`` reads that log, the run's query
decomposition (``agenttools.rag.decomposition``) and the tool calls left:

1. a clarification was already put to the user → ``clarify``;
2. no tool calls left → ``enough`` when anything was found, else ``clarify``
   (``no_results``): the search ends within the budget either way;
3. nothing searched yet → ``more`` (the plan's first search);
4. a bucket or a subquery of the plan not searched yet → ``more`` with that search;
5. everything found is weak (best score under ``weak_score``) → ``more`` with the same
   query in the other mode (keyword ↔ semantic), once per query;
6. otherwise → ``enough``.

The corpus tools attach the review of the round so far to each search result (the
model is told to follow it); the agent loop may also call ``review_round`` after a tool
step and act on it (end the search on ``enough``, end the run on ``clarify``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agenttools.core.registry import RunToolState
from agenttools.rag.decomposition import plan_filters, plan_of

SEARCH_LOG_KEY = "search.log"
MAX_LOGGED = 40
WEAK_SCORE = 0.3
TEXT_TOOL = "search_text"
SEMANTIC_TOOL = "search_semantic"
SEARCH_TOOLS = (TEXT_TOOL, SEMANTIC_TOOL)

ReviewStatus = Literal["enough", "more", "clarify"]
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Review:
    """One decision; ``to_dict`` is the seed's shape (``status``, ``reason``,
    ``next_tool_call``, ``clarification_details``) plus the calls left."""

    status: ReviewStatus
    reason: str
    next_tool_call: dict[str, Any] | None = None
    clarification_details: dict[str, Any] | None = None
    calls_left: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"status": self.status, "reason": self.reason}
        if self.next_tool_call is not None:
            d["next_tool_call"] = self.next_tool_call
        if self.clarification_details is not None:
            d["clarification_details"] = self.clarification_details
        if self.calls_left is not None:
            d["calls_left"] = self.calls_left
        return d

    def instruction(self) -> str:
        """What the model should do next, in one sentence."""
        if self.status == "enough":
            return "Review: enough evidence. Stop searching and answer now with generate_response, citing [doc_id]s."
        if self.status == "more" and self.next_tool_call is not None:
            return f"Review: search more. Next call: {self.next_tool_call['tool']} with the arguments in review."
        if self.status == "more":
            return "Review: search more, with a different query or bucket."
        return "Review: the user must clarify; the run ends here."


def record_search(
    state: RunToolState,
    *,
    tool: str,
    bucket: str,
    query: str,
    filters: Mapping[str, Any] | None,
    hits: Sequence[Any],
    total: int,
) -> None:
    """Log one search (call it for every corpus search that ran, found or not)."""
    log: list[dict[str, Any]] = state.extras.setdefault(SEARCH_LOG_KEY, [])
    scores = [float(getattr(h, "score", 0.0)) for h in hits]
    log.append(
        {
            "tool": tool,
            "bucket": bucket,
            "query": query[:300],
            "filters": dict(filters) if filters else None,
            "passages": len(hits),
            "documents": len({getattr(h, "doc_id", None) for h in hits}),
            "best": round(max(scores), 4) if scores else 0.0,
            "total": int(total),
        }
    )
    del log[:-MAX_LOGGED]


def search_log(state: RunToolState) -> list[dict[str, Any]]:
    log = state.extras.get(SEARCH_LOG_KEY)
    return [e for e in log if isinstance(e, dict)] if isinstance(log, list) else []


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.casefold()) if len(w) > 2 or w.isdigit()}


def _covered(query: str, bucket: str | None, purpose: Any, log: Sequence[Mapping[str, Any]]) -> bool:
    """A planned search counts as done when a logged search in the same bucket (any, if
    none is named) shared at least half of its words; a ``filter_docs`` subquery (finding
    the documents) also when a filtered search there found some."""
    wanted = _terms(query)
    for entry in log:
        if bucket is not None and entry.get("bucket") != bucket:
            continue
        if purpose == "filter_docs" and entry.get("filters") and int(entry.get("passages", 0)) > 0:
            return True
        got = _terms(str(entry.get("query", "")))
        if not wanted or len(wanted & got) * 2 >= len(wanted):
            return True
    return False


def _search_call(state: RunToolState, tool: str, bucket: str, query: str) -> dict[str, Any]:
    args: dict[str, Any] = {"bucket": bucket, "query": query}
    filters = plan_filters(state, bucket)
    if filters:
        args["filters"] = filters
    return {"tool": tool, "args": args}


def _planned_tool(state: RunToolState, bucket: str) -> str:
    strategy = state.extras.get("plan.strategy")
    mode = strategy.get(bucket) if isinstance(strategy, dict) else None
    return SEMANTIC_TOOL if mode == "semantic" else TEXT_TOOL


def _next_planned(state: RunToolState, log: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], str] | None:
    """The first search the plan asks for that the log does not show yet."""
    plan = plan_of(state)
    if not plan:
        return None
    buckets = [b for b in plan.get("primary_buckets") or [] if isinstance(b, str)]
    if not buckets:
        return None
    queries = [
        (q.get("query"), q.get("bucket"), q.get("purpose"))
        for q in plan.get("subqueries") or []
        if isinstance(q, Mapping) and isinstance(q.get("query"), str)
    ]
    topic = next((t for t in plan.get("topic_terms") or [] if isinstance(t, str)), None)
    searched_buckets = {e.get("bucket") for e in log}
    for bucket in buckets:
        if bucket not in searched_buckets:
            first = next((q for q, b, _ in queries if b in (None, bucket)), None) or topic or bucket
            return _search_call(state, _planned_tool(state, bucket), bucket, first), (
                f'the plan names bucket "{bucket}", which was not searched yet'
            )
    for query, wanted, purpose in queries:
        target = wanted if isinstance(wanted, str) and wanted in buckets else None
        if not isinstance(query, str):
            continue
        if not _covered(query, target, purpose, log):
            where = target or buckets[0]
            return _search_call(state, _planned_tool(state, where), where, query), (
                f'the plan\'s subquery "{query[:80]}" ({purpose or "search"}) was not searched yet'
            )
    return None


def _other_mode(log: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The last search again in the other mode, unless that was tried already."""
    last = log[-1]
    other = SEMANTIC_TOOL if last.get("tool") == TEXT_TOOL else TEXT_TOOL
    key = (last.get("bucket"), _norm(str(last.get("query", ""))))
    if any(e.get("tool") == other and (e.get("bucket"), _norm(str(e.get("query", "")))) == key for e in log):
        return None
    args: dict[str, Any] = {"bucket": last.get("bucket"), "query": last.get("query")}
    if last.get("filters"):
        args["filters"] = last["filters"]
    return {"tool": other, "args": args}


def _norm(text: str) -> str:
    return " ".join(sorted(_terms(text)))


def review_round(state: RunToolState, *, calls_left: int | None = None, weak_score: float = WEAK_SCORE) -> Review:
    """The decision after the searches so far (see the module docstring for the rules).

    ``calls_left``: tool calls the run may still make besides ``generate_response``
    (``None`` when unknown: the budget is then not considered).
    """
    if state.clarification is not None:
        return Review("clarify", "The user has been asked to clarify.", None, dict(state.clarification), calls_left)
    log = search_log(state)
    found = [e for e in log if int(e.get("passages", 0)) > 0]
    if calls_left is not None and calls_left <= 0:
        if found:
            return Review("enough", "The tool budget is used up; answer from the evidence found.", calls_left=0)
        searched = "; ".join(f'"{e.get("query")}" in {e.get("bucket")}' for e in log[-3:]) or "nothing"
        return Review(
            "clarify",
            "The tool budget is used up and no search found anything.",
            clarification_details={
                "type": "no_results",
                "missing_info": f"Searched {searched} without finding anything. Please rephrase or add details.",
            },
            calls_left=0,
        )
    if not log:
        planned = _next_planned(state, log)
        return Review("more", "Nothing has been searched yet.", planned[0] if planned else None, calls_left=calls_left)
    planned = _next_planned(state, log)
    if planned is not None:
        call, why = planned
        return Review("more", f"Not done yet: {why}.", call, calls_left=calls_left)
    if not found:
        retry = _other_mode(log)
        if retry is not None:
            reason = "The last search found nothing; try the other search mode."
            return Review("more", reason, retry, calls_left=calls_left)
        return Review(
            "clarify",
            "No search found anything, in either mode.",
            clarification_details={
                "type": "no_results",
                "missing_info": f'Nothing matched "{log[-1].get("query")}" in {log[-1].get("bucket")}. '
                "Please check the names or spelling, or add details.",
            },
            calls_left=calls_left,
        )
    best = max(float(e.get("best", 0.0)) for e in found)
    if best < weak_score:
        retry = _other_mode(log)
        if retry is not None:
            return Review(
                "more",
                f"The best passage scores only {best:.2f}; try the other search mode.",
                retry,
                calls_left=calls_left,
            )
    passages = sum(int(e.get("passages", 0)) for e in found)
    return Review(
        "enough",
        f"{passages} passage(s) from {len(found)} search(es) cover the question"
        + (" (the plan's searches are done)" if plan_of(state) else "")
        + ".",
        calls_left=calls_left,
    )


LAST_REVIEW_KEY = "review.last"


def review_after_round(
    state: RunToolState, tool_names: Sequence[str], *, calls_left: int | None, weak_score: float = WEAK_SCORE
) -> Review | None:
    """The review the agent loop acts on after a tool step; ``None`` when the step ran no
    corpus search. The decision is kept in ``state.extras`` (``search_closed`` reads it).

    What the loop does with it: ``clarify`` (and no clarification yet) → emit
    ``clarification`` with ``clarification_details``, set ``state.clarification``, end
    the run ``completed``; ``enough`` → stop offering the search tools
    (``search_closed``), so the next turn answers; ``more`` → nothing (the model reads the
    ``review`` in the search result, with the next call).
    """
    if not any(name in SEARCH_TOOLS for name in tool_names):
        return None
    review = review_round(state, calls_left=calls_left, weak_score=weak_score)
    state.extras[LAST_REVIEW_KEY] = review.to_dict()
    return review


def search_closed(state: RunToolState) -> bool:
    """Whether the last review after a search round said ``enough``: the search is over
    and only the answer (``generate_response``) and non-search tools remain to offer."""
    last = state.extras.get(LAST_REVIEW_KEY)
    return isinstance(last, dict) and last.get("status") == "enough"


__all__ = [
    "LAST_REVIEW_KEY",
    "SEARCH_LOG_KEY",
    "SEARCH_TOOLS",
    "WEAK_SCORE",
    "Review",
    "ReviewStatus",
    "record_search",
    "review_after_round",
    "review_round",
    "search_closed",
    "search_log",
]
