"""The query decomposition object of seed 004 §8.2, its JSON Schema, and how its
constraints become the corpus tools' ``filters``.

The object (``intent``, ``primary_buckets``, ``entities`` with roles, ``constraints``
with the ``raw_text`` they came from, ``topic_terms``, ``subqueries`` with a purpose,
``output_preferences``) is built by ``app/agent/planner.py`` from two model calls and checked
here against ``schemas/decomposition.schema.json`` (JSON Schema 2020-12, validated with
``jsonschema``). A run that was planned keeps it in ``RunToolState.extras`` (plain JSON,
so it travels in the run's checkpoint), where the corpus tools read it:

* a search in a bucket without ``filters`` gets the plan's constraints for that bucket
  (``plan_filters``) — the user's "contracts from 2023" reaches the index even when the
  model forgets to pass it (seed 004 §6.2); ``filters: {}`` opts out;
* a condition that matches nothing is named with the user's own words (``raw_text_for``);
* the review step (``agenttools.rag.review``) checks the plan's buckets and subqueries were
  searched before it says ``enough``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import TYPE_CHECKING, Any

from agenttools.core.registry import RunToolState
from knowledge.filters import BUILTIN_FIELDS

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

SCHEMA_RESOURCE = "schemas/decomposition.schema.json"
INTENTS = ("qa", "list", "summarize", "compare", "compute")
ENTITY_ROLES = ("company", "person", "product", "chemical", "other")
OPERATORS = ("=", "!=", ">", ">=", "<", "<=", "in", "nin", "like")
FORMATS = ("natural_language", "table", "list")

PLAN_KEY = "plan.decomposition"
PLAN_FILTERS_KEY = "plan.filters"
PLAN_STRATEGY_KEY = "plan.strategy"

_OP_ALIASES = {
    "==": "=", "eq": "=", "$eq": "=", "<>": "!=", "ne": "!=", "$ne": "!=", "gt": ">", "$gt": ">",
    "gte": ">=", "$gte": ">=", "lt": "<", "$lt": "<", "lte": "<=", "$lte": "<=", "$in": "in",
    "not in": "nin", "not_in": "nin", "$nin": "nin", "$like": "like", "LIKE": "like", "IN": "in",
}


class DecompositionError(ValueError):
    """The object does not match the schema; the message lists the first problems."""


# Module-level caches on purpose: the packaged schema and its validator, constants of the release, read-only.
@functools.cache
def decomposition_schema() -> dict[str, Any]:
    """The JSON Schema (read once from the package). Do not mutate the returned dict."""
    # jsonschema (with referencing, attrs and its metaschemas: ~0.1 s of CPU) loads here,
    # at the first plan, not with the module: every serve imports this module to build
    # the RAG tools, and a run without a model never plans.
    from jsonschema import Draft202012Validator

    text = resources.files("agenttools.rag").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


@functools.cache
def _validator() -> Draft202012Validator:
    from jsonschema import Draft202012Validator

    return Draft202012Validator(decomposition_schema())


def schema_errors(obj: Any) -> list[str]:
    """Every schema violation of ``obj`` as ``"path: message"``, shortest path first."""
    errors = sorted(_validator().iter_errors(obj), key=lambda e: (len(e.absolute_path), str(e.absolute_path)))
    out = []
    for e in errors:
        path = "/".join(str(p) for p in e.absolute_path) or "(root)"
        out.append(f"{path}: {e.message[:200]}")
    return out


def validate_decomposition(obj: Any) -> dict[str, Any]:
    """``obj`` when it matches the schema, else ``DecompositionError`` naming the problems."""
    problems = schema_errors(obj)
    if problems:
        raise DecompositionError("; ".join(problems[:5]))
    return obj  # type: ignore[no-any-return]  # validated: a JSON object


# --------------------------------------------------------------------------- building


def canonical_operator(op: Any) -> Any:
    """``gte`` / ``$gte`` / ``==`` … spelled as the schema's operator (unknown ones unchanged)."""
    if isinstance(op, str):
        key = op.strip()
        return _OP_ALIASES.get(key, _OP_ALIASES.get(key.lower(), key.lower()))
    return op


def normalise_constraint(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A model's constraint in the schema's spelling (``op`` → ``operator``, aliases of
    operators, missing ``raw_text`` → ``""``); validation judges the rest."""
    out: dict[str, Any] = {k: v for k, v in raw.items() if k in ("field", "value", "raw_text", "bucket")}
    out["operator"] = canonical_operator(raw.get("operator", raw.get("op", "=")))
    out.setdefault("raw_text", "")
    if out["operator"] in ("in", "nin") and "value" in out and not isinstance(out["value"], list):
        out["value"] = [out["value"]]
    return out


def default_output_preferences(intent: str) -> dict[str, Any]:
    return {"format": "list" if intent == "list" else "natural_language", "needs_citations": True}


def assemble(
    route: Mapping[str, Any], constraints: Sequence[Mapping[str, Any]], buckets: Sequence[str]
) -> dict[str, Any]:
    """The whole object from the router's answer (intent, entities, topic terms,
    subqueries, output preferences) and the schema planner's constraints; fields the
    model left out get their empty defaults ("If you are unsure about a field, you may
    omit it")."""
    intent = route.get("intent")
    prefs = route.get("output_preferences")
    out: dict[str, Any] = {
        "intent": intent,
        "primary_buckets": list(buckets),
        "entities": [dict(e) for e in route.get("entities") or [] if isinstance(e, Mapping)],
        "constraints": [normalise_constraint(c) for c in constraints if isinstance(c, Mapping)],
        "topic_terms": [topics] if isinstance(topics := route.get("topic_terms"), str) else list(topics or []),
        "subqueries": [dict(q) for q in route.get("subqueries") or [] if isinstance(q, Mapping)],
        "output_preferences": (
            {**default_output_preferences(str(intent)), **prefs}
            if isinstance(prefs, Mapping)
            else default_output_preferences(str(intent))
        ),
    }
    for entity in out["entities"]:
        role = entity.get("role")
        if isinstance(role, str) and role not in ENTITY_ROLES:
            entity["role"] = "other"
    return out


def constraint_filter(constraint: Mapping[str, Any]) -> dict[str, Any]:
    """One constraint in the tools' filter language: ``{field: {op: value}}``."""
    return {str(constraint["field"]): {str(constraint["operator"]): constraint["value"]}}


def applies_to(constraint: Mapping[str, Any], bucket: str, fields: Mapping[str, str]) -> bool:
    """Whether ``constraint`` is a condition on ``bucket``: named for it (or for no bucket)
    and on one of its fields or a field every document has."""
    named = constraint.get("bucket")
    if named is not None and named != bucket:
        return False
    name = constraint.get("field")
    return isinstance(name, str) and (name in fields or name in BUILTIN_FIELDS)


def bucket_filters(
    constraints: Sequence[Mapping[str, Any]], bucket: str, fields: Mapping[str, str]
) -> dict[str, Any] | None:
    """The constraints that apply to ``bucket`` as one filter (all must hold).

    Conditions on one field merge (``{"amount": {">": 1000, "<": 5000}}``); the same
    operator twice on a field goes to ``$and`` instead of overwriting.
    """
    merged: dict[str, dict[str, Any]] = {}
    extra: list[dict[str, Any]] = []
    for c in constraints:
        if not applies_to(c, bucket, fields):
            continue
        name, op = str(c["field"]), str(c["operator"])
        ops = merged.setdefault(name, {})
        if op in ops:
            extra.append(constraint_filter(c))
        else:
            ops[op] = c["value"]
    if not merged and not extra:
        return None
    out: dict[str, Any] = dict(merged.items())
    if extra:
        out["$and"] = extra
    return out


# --------------------------------------------------------------------------- the run's plan


def attach_plan(
    state: RunToolState,
    decomposition: Mapping[str, Any],
    filters: Mapping[str, Mapping[str, Any] | None],
    strategy: Mapping[str, str] | None = None,
) -> None:
    """Keep a validated plan with the run, for the tools and the review step."""
    state.extras[PLAN_KEY] = dict(decomposition)
    state.extras[PLAN_FILTERS_KEY] = {b: dict(f) if f else None for b, f in filters.items()}
    if strategy:
        state.extras[PLAN_STRATEGY_KEY] = dict(strategy)


def plan_of(state: RunToolState) -> dict[str, Any] | None:
    plan = state.extras.get(PLAN_KEY)
    return plan if isinstance(plan, dict) else None


def plan_intent(state: RunToolState) -> str | None:
    plan = plan_of(state)
    intent = plan.get("intent") if plan else None
    return intent if isinstance(intent, str) else None


def plan_filters(state: RunToolState, bucket: str) -> dict[str, Any] | None:
    """The plan's filters for ``bucket`` (``None`` when there is no plan or none apply)."""
    filters = state.extras.get(PLAN_FILTERS_KEY)
    if not isinstance(filters, dict):
        return None
    found = filters.get(bucket)
    return dict(found) if isinstance(found, dict) and found else None


def raw_text_for(state: RunToolState, constraint: Mapping[str, Any]) -> str | None:
    """The user's words for a filter constraint (``"from 2024"``), when the plan has them.

    Matched by field, then by operator and value when several constraints share a field.
    """
    plan = plan_of(state)
    if not plan or len(constraint) != 1:
        return None
    (name, value), = constraint.items()
    candidates = [
        c for c in plan.get("constraints") or []
        if isinstance(c, Mapping) and c.get("field") == name and c.get("raw_text")
    ]
    if not candidates:
        return None
    if len(candidates) > 1 and isinstance(value, Mapping) and len(value) == 1:
        (op, operand), = value.items()
        exact = [c for c in candidates if c.get("operator") == canonical_operator(op) and c.get("value") == operand]
        candidates = exact or candidates
    text = candidates[0].get("raw_text")
    return str(text)[:200] if text else None


__all__ = [
    "INTENTS",
    "PLAN_FILTERS_KEY",
    "PLAN_KEY",
    "DecompositionError",
    "applies_to",
    "assemble",
    "attach_plan",
    "bucket_filters",
    "canonical_operator",
    "constraint_filter",
    "decomposition_schema",
    "normalise_constraint",
    "plan_filters",
    "plan_intent",
    "plan_of",
    "raw_text_for",
    "schema_errors",
    "validate_decomposition",
]
