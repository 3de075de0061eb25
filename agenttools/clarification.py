"""Clarification requests (seed 004 §10): when a search cannot give the model anything
useful, the run stops and the user is asked to fix or narrow the question.

Two triggers, both decided by the corpus search tools from what the knowledge base
reports, never by the model guessing:

* ``no_results`` — nothing matched, even after the filters were relaxed once;
* ``overload`` — far more matches than anyone can read, and the relevance scores are
  flat (the query does not single anything out), so more searching will not help.

A clarification is a ``clarification`` SSE event ``{type, missing_info}`` plus
``RunToolState.clarification``; the agent loop ends the run (status ``completed``)
after the turn in which it was set. ``missing_info`` is written for the user: it says
what was searched and what would help, naming the bucket's own schema fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from agenttools.registry import RunToolState, ToolOutcome

ClarificationType = Literal["no_results", "overload"]
CLARIFICATION_EVENT = "clarification"
MAX_FIELDS_NAMED = 6

# Which kind of constraint each field type suggests, in the user's words.
_TYPE_HINTS = {
    "DATE": "a date range",
    "INTEGER": "a number or range",
    "REAL": "an amount or range",
    "TEXT": "a name or value",
    "BOOLEAN": "yes or no",
}


@dataclass(frozen=True, slots=True)
class Clarification:
    """One request to the user; ``event()`` is the SSE payload (the documented contract)."""

    type: ClarificationType
    missing_info: str

    def event(self) -> dict[str, Any]:
        return {"type": self.type, "missing_info": self.missing_info}


def used_fields(filters: Any) -> set[str]:
    """Field names a filter constrains (recursing into ``$and`` / ``$or``)."""
    out: set[str] = set()
    if isinstance(filters, Mapping):
        for key, value in filters.items():
            if not isinstance(key, str):
                continue
            if key.lower() in ("$and", "$or", "and", "or"):
                if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
                    for item in value:
                        out |= used_fields(item)
            else:
                out.add(key)
    return out


def narrowing_fields(schema: Mapping[str, str], filters: Any) -> list[str]:
    """``"vendor (a name or value)"``-style labels for schema fields not yet filtered on."""
    taken = used_fields(filters)
    labels = [
        f"{name} ({_TYPE_HINTS.get(ftype, ftype.lower())})" for name, ftype in schema.items() if name not in taken
    ]
    return labels[:MAX_FIELDS_NAMED]


def _filters_text(filters: Any) -> str:
    if not filters:
        return ""
    text = orjson.dumps(filters, default=str).decode()
    return text if len(text) <= 200 else text[:200] + "…"


def no_results(bucket: str, query: str, filters: Any, dropped: str | None, schema: Mapping[str, str]) -> Clarification:
    parts = [f'No documents in "{bucket}" matched "{query[:120]}"']
    shown = _filters_text(filters)
    if shown:
        parts[0] += f" with the conditions {shown}"
    if dropped:
        parts.append(f"also none after dropping the condition {dropped}")
    text = "; ".join(parts) + "."
    ask = "Please check the names, numbers or spelling in the question"
    if filters:
        ask += ", or loosen or remove some conditions (for example a wider date range)"
    elif schema:
        ask += ", or say which " + ", ".join(schema)[:200] + " you mean"
    return Clarification("no_results", f"{text} {ask}.")


def overload(bucket: str, total: int, filters: Any, schema: Mapping[str, str]) -> Clarification:
    fields = narrowing_fields(schema, filters)
    text = f'Found {total:,} matching passages in "{bucket}", and none stands out.'
    if fields:
        ask = "Please narrow the question by " + ", ".join(fields) + "."
    else:
        ask = "Please narrow the question with more specific terms (names, numbers, a time period)."
    return Clarification("overload", f"{text} {ask}")


def clarification_outcome(state: RunToolState, clarification: Clarification, details: Mapping[str, Any]) -> ToolOutcome:
    """The tool result that asks the user and ends the run.

    Only the first clarification of a run is recorded (parallel calls of one turn may
    both want one; the user gets one question). The model-facing content says the run
    ends here, so a later turn reading this history knows the question was put back to
    the user.
    """
    first = state.clarification is None
    if first:
        state.clarification = clarification.event()
    content = {
        "clarification_requested": clarification.type,
        "missing_info": clarification.missing_info,
        **details,
        "note": (
            "The user has been asked to clarify; this run ends here without a final answer. "
            "Their reply arrives as the next message."
        ),
    }
    events = [(CLARIFICATION_EVENT, clarification.event())] if first else []
    return ToolOutcome(content=content, events=events, ends_run=True)


__all__ = [
    "CLARIFICATION_EVENT",
    "Clarification",
    "ClarificationType",
    "clarification_outcome",
    "narrowing_fields",
    "no_results",
    "overload",
    "used_fields",
]
