"""Clarification requests (seed 004 §10): when a search cannot give the model anything
useful, the run stops and the user is asked to fix or narrow the question.

Two triggers, both decided by the corpus search tools from what the knowledge base
reports, never by the model guessing:

* ``no_results`` — nothing matched. When the search had conditions (``filters``) the
  message names the one that matches nothing (``year = 2024``, with the user's own words
  when the query decomposition recorded them) and *offers* dropping it, saying how many
  documents would match without it; the condition is never dropped silently (seed 004
  §10.1: "I found no contracts for 2024 — search all years?").
* ``overload`` — a list-all request ("list every invoice") covers at least the
  configured number of documents (``AGENT_CLARIFY_OVERLOAD_HITS``, default 100), or a
  search matched that many passages with flat scores (the query singles nothing out).

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

from agenttools.core.registry import RunToolState, ToolOutcome
from events import Clarification as ClarificationEvent
from events import Event
from knowledge.attachments import is_private_bucket

ClarificationType = Literal["no_results", "overload"]
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


#: The run's own attachment bucket as its owner reads it (``bucket_words``).
OWN_ATTACHMENTS = "this conversation's attached files"


def bucket_words(bucket: str) -> str:
    """Where a search looked, as the user reads it: a shared bucket by its quoted name;
    a private one as ``OWN_ATTACHMENTS``. Its name (``att_`` and a hash,
    ``knowledge.attachments``) says nothing to anyone, and the only private bucket a
    clarification can be of is the run's own conversation's: another one is refused
    before anything is searched (``knowledge.bucket_privacy``)."""
    return OWN_ATTACHMENTS if is_private_bucket(bucket) else f'"{bucket}"'


def no_results(bucket: str, query: str, filters: Any, dropped: str | None, schema: Mapping[str, str]) -> Clarification:
    parts = [f'No documents in {bucket_words(bucket)} matched "{query[:120]}"']
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


_OP_WORDS = {"nin": "not in", "like": "like"}


def _value_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(_value_text(v) for v in value[:10]) + (", …" if len(value) > 10 else "") + ")"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = str(value)
    return text if len(text) <= 60 else text[:60] + "…"


def constraint_text(constraint: Mapping[str, Any]) -> str:
    """``{"year": 2024}`` → ``year = 2024``, ``{"amount": {">": 2500}}`` → ``amount > 2500``;
    anything more complex stays compact JSON."""
    if len(constraint) == 1:
        (field, value), = constraint.items()
        if isinstance(field, str) and not field.startswith("$") and field.lower() not in ("and", "or"):
            if isinstance(value, Mapping):
                if set(value) <= {"operator", "op", "value"} and "value" in value:
                    op, operand = value.get("operator", value.get("op", "=")), value["value"]
                elif len(value) == 1:
                    (op, operand), = value.items()
                else:
                    return _filters_text(constraint)
                op = str(op).lstrip("$")
                return f"{field} {_OP_WORDS.get(op, op)} {_value_text(operand)}"
            if isinstance(value, (list, tuple)):
                return f"{field} in {_value_text(value)}"
            return f"{field} = {_value_text(value)}"
    return _filters_text(constraint)


@dataclass(frozen=True, slots=True)
class UnmatchedConstraint:
    """A condition of a search that found nothing: how it reads, the user's own words for
    it (from the query decomposition, when known), and the documents it alone matches."""

    text: str
    documents: int
    raw_text: str | None = None

    def named(self) -> str:
        return f'{self.text} ("{self.raw_text}")' if self.raw_text else self.text


def no_results_for_constraints(
    bucket: str,
    query: str,
    culprits: Sequence[UnmatchedConstraint],
    *,
    together: bool,
    without: int | None,
    without_label: str | None,
) -> Clarification:
    """Nothing matched a filtered search; name the condition(s) responsible.

    ``culprits``: the conditions that alone match no document of the bucket, or (when
    ``together``: each matches something, but not all at once) the one whose dropping
    was tried. ``without``: documents found with ``without_label`` dropped (``None`` when
    that was not tried, 0 when it found nothing either).
    """
    names = " and ".join(c.named() for c in culprits[:3]) or "the given conditions"
    where = bucket_words(bucket)
    if together:
        text = f'No documents in {where} match all the conditions together for "{query[:120]}"'
    elif culprits and all(c.documents > 0 for c in culprits):  # the condition holds; the query finds nothing
        text = f'No documents in {where} with {names} match "{query[:120]}"'
    else:
        text = f"No documents in {where} match {names}"
        if query.strip():
            text += f' (searching for "{query[:120]}")'
    text += "."
    if without and without_label:
        ask = (
            f"Without the condition {without_label}, {without} matching document"
            f"{'s' if without != 1 else ''} would be found. Shall I search without {without_label}"
            " (for example all years, or a wider range), or do you mean a different value?"
        )
    elif without == 0:
        ask = (
            "Nothing matches even without that condition. Please check the names, numbers or "
            "spelling in the question, or loosen the other conditions."
        )
    else:
        ask = "Please check the value, or say whether to search without this condition."
    return Clarification("no_results", f"{text} {ask}")


def list_overload(
    bucket: str, documents: int, exact: bool, topic: str, filters: Any, schema: Mapping[str, str]
) -> Clarification:
    """A list-all request covering too many documents to list (seed 004 §10.2)."""
    count = f"{documents:,}" if exact else f"at least {documents:,}"
    what = f"{count} documents in {bucket_words(bucket)}"
    if topic:
        what += f' about "{topic[:80]}"'
    shown = _filters_text(filters)
    if shown:
        what += f" with the conditions {shown}"
    fields = narrowing_fields(schema, filters)
    if fields:
        ask = "Please narrow the request by " + ", ".join(fields) + "."
    else:
        ask = "Please narrow the request with more specific terms (names, numbers, a time period)."
    return Clarification("overload", f"I found {what}: too many to list here. {ask}")


def overload(bucket: str, total: int, filters: Any, schema: Mapping[str, str]) -> Clarification:
    fields = narrowing_fields(schema, filters)
    text = f"Found {total:,} matching passages in {bucket_words(bucket)}, and none stands out."
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
    events: list[Event] = []
    if first:
        events.append(ClarificationEvent(type=clarification.type, missing_info=clarification.missing_info))
    return ToolOutcome(content=content, events=events, ends_run=True)


__all__ = [
    "OWN_ATTACHMENTS",
    "Clarification",
    "ClarificationType",
    "UnmatchedConstraint",
    "bucket_words",
    "clarification_outcome",
    "constraint_text",
    "list_overload",
    "narrowing_fields",
    "no_results",
    "no_results_for_constraints",
    "overload",
    "used_fields",
]
