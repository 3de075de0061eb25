"""Query decomposition (seed 004 §8): an optional two-call pre-pass that turns a user
question into the seed's decomposition object and a short search plan.

1. **Router** — sees only the bucket names, sizes and field names, and returns the
   intent, the primary buckets, the entities (with roles), topic terms, subqueries
   (with their purpose) and output preferences as strict JSON. Unknown buckets reject
   the plan.
2. **Schema planner** — sees the typed schemas of the chosen buckets only (not every
   schema: that is the point of two phases) and returns the question's ``constraints``
   (``field``, ``operator``, ``value`` and the ``raw_text`` they came from) and a search
   strategy. Each constraint is compiled against the schema of every chosen bucket it
   applies to (``knowledge.filters.compile_filters``); one that does not compile, or
   applies to none, rejects the plan.

The two answers are assembled into one object (``intent``, ``primary_buckets``,
``entities``, ``constraints``, ``topic_terms``, ``subqueries``, ``output_preferences``),
validated against ``agenttools/rag/schemas/decomposition.schema.json``, and the constraints
become each bucket's ``filters`` (``agenttools.rag.decomposition.bucket_filters``).

The plan is advice for the model (its ``text`` goes into the system prompt) and data for
the tools: ``PlanHint.attach(state)`` keeps it with the run, so a search without filters
gets the plan's and the review step can check the plan's searches were made. Any
failure — provider error, timeout, text that is not the JSON asked for, an unknown
bucket, an invalid constraint, a schema violation — just means no plan (``None``),
logged with the reason; the run goes on exactly as without a planner.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from agenttools.core.registry import RunToolState
from agenttools.rag.decomposition import (
    INTENTS,
    DecompositionError,
    applies_to,
    assemble,
    attach_plan,
    bucket_filters,
    constraint_filter,
    normalise_constraint,
    validate_decomposition,
)
from knowledge.filters import FilterError, compile_filters, describe_fields
from knowledge.types import BucketInfo
from llm.provider import Provider
from llm.types import ChatRequest, ContentDelta, Message, StreamError, ToolUseStart

log = logging.getLogger("agentchat.planner")

STRATEGIES = ("keyword", "semantic", "hybrid")
_STRATEGY_TOOLS = {
    "keyword": "search_text",
    "semantic": "search_semantic",
    "hybrid": "search_text and search_semantic",
}

ROUTER_PROMPT = """You are the router of a document search system. Pick the document buckets \
that can answer the user's question and describe what is asked.

You NEVER answer the question. You NEVER call tools. You ONLY output one JSON object, nothing else:
{"intent": "qa" | "list" | "summarize" | "compare" | "compute",
 "primary_buckets": ["<bucket name>", ...],
 "entities": [{"name": "<as written>", "role": "company" | "person" | "product" | "chemical" | "other"}],
 "topic_terms": ["<short phrase to search for>", ...],
 "subqueries": [{"purpose": "filter_docs" | "find_clauses" | "find_properties" | "find_facts", \
"query": "<search query>", "bucket": "<bucket name, optional>"}],
 "output_preferences": {"format": "natural_language" | "table" | "list", "needs_citations": true | false}}

Use only bucket names from this list (at most %(max)d, most relevant first):
%(buckets)s
If you are unsure about a field, omit it. Do not invent data that is not implied by the question."""

SCHEMA_PROMPT = """You are the schema planner of a document search system. Turn the constraints \
the user's question states (numbers, dates, names, types) into conditions on the fields of the buckets below.

Each constraint: {"field": "<field>", "operator": "=" | "!=" | ">" | ">=" | "<" | "<=" | "in" | "nin" | "like", \
"value": <value, a list for in/nin>, "raw_text": "<the words of the question it comes from>", \
"bucket": "<bucket, only if the field exists in several>"}.
Dates are "YYYY-MM-DD"; "like" takes a pattern with %% wildcards. Use only the fields listed; \
use a constraint only for a condition the question states. Do not invent values.

You NEVER answer the question. You ONLY output one JSON object, nothing else:
{"constraints": [...], "strategy": "keyword" | "semantic" | "hybrid"}

Buckets and their fields:
%(schemas)s"""


class PlanRejected(ValueError):
    """The model's output was not a usable plan; the message says why (for the log)."""


class BucketCatalog(Protocol):
    """What the planner reads from the knowledge base."""

    async def list_buckets(self) -> list[BucketInfo]: ...


@dataclass(frozen=True, slots=True)
class BucketPlan:
    bucket: str
    filters: dict[str, Any] | None
    queries: tuple[str, ...]
    strategy: str


@dataclass(frozen=True, slots=True)
class PlanHint:
    """A validated plan: ``decomposition`` is the seed's whole object (it validates
    against the schema), ``plans`` its per-bucket filters and queries, ``text`` what goes
    into the system prompt (``plan_hint``)."""

    intent: str
    plans: tuple[BucketPlan, ...]
    text: str
    decomposition: dict[str, Any] = field(default_factory=dict)

    @property
    def buckets(self) -> list[str]:
        return [p.bucket for p in self.plans]

    @property
    def filters(self) -> dict[str, dict[str, Any] | None]:
        return {p.bucket: p.filters for p in self.plans}

    def attach(self, state: RunToolState) -> None:
        """Keep the plan with a run: the corpus tools apply its filters, the review step
        checks its searches (``agenttools.rag.decomposition``)."""
        attach_plan(state, self.decomposition, self.filters, {p.bucket: p.strategy for p in self.plans})


@dataclass(slots=True)
class PlannerSettings:
    timeout_s: float = 20.0
    max_buckets: int = 3
    max_queries: int = 3
    max_tokens: int = 512
    max_message_chars: int = 2000


@dataclass(slots=True)
class QueryPlanner:
    """Builds a ``PlanHint`` for a message, or ``None``. One instance serves every run."""

    provider: Provider
    catalog: BucketCatalog
    settings: PlannerSettings = field(default_factory=PlannerSettings)
    #: Plans made and plans skipped by why (``planned``, ``timeout``, ``rejected``,
    #: ``failed``; nothing to plan is not counted): ``agentchat_query_plans_total``, so a
    #: model that never plans (every run searching without its filters) is seen.
    outcomes: dict[str, int] = field(default_factory=dict)

    async def plan(self, message: str) -> PlanHint | None:
        """The plan hint for ``message``; ``None`` when there is nothing to plan or anything fails."""
        outcome = "failed"
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                hint = await self._plan(message)
            if hint is not None:
                self._count("planned")
            return hint
        except TimeoutError:
            outcome = "timeout"
            log.warning("query plan skipped: timed out after %.1f s", self.settings.timeout_s)
        except PlanRejected as exc:
            outcome = "rejected"
            log.warning("query plan skipped: %s", exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the hint is optional; never fail a run over it
            log.warning("query plan skipped: %s: %s", type(exc).__name__, exc)
        self._count(outcome)
        return None

    def _count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    async def _plan(self, message: str) -> PlanHint | None:
        text = message.strip()[: self.settings.max_message_chars]
        if not text:
            return None
        buckets = {b.name: b for b in await self.catalog.list_buckets() if b.fields}
        if not buckets:
            return None  # decomposition is only worth it when buckets have schemas

        listing = "\n".join(
            f"- {b.name}: {b.documents} documents; fields: {', '.join(b.fields)}" for b in buckets.values()
        )
        router_raw = await self._ask(ROUTER_PROMPT % {"max": self.settings.max_buckets, "buckets": listing}, text)
        route, chosen = parse_route(router_raw, buckets, self.settings.max_buckets)

        schemas = {name: buckets[name].fields for name in chosen}
        described = "\n".join(f"- {name}: {describe_fields(fields)}" for name, fields in schemas.items())
        planner_raw = await self._ask(SCHEMA_PROMPT % {"schemas": described}, text)
        constraints, strategy = parse_constraints(planner_raw, schemas)
        return build_hint(route, chosen, constraints, strategy, schemas, self.settings.max_queries)

    async def _ask(self, system_prompt: str, user_text: str) -> str:
        request = ChatRequest(
            system_prompt=system_prompt,
            messages=[Message("user", user_text)],
            tools=[],
            max_tokens=self.settings.max_tokens,
            temperature=0.0,
        )
        parts: list[str] = []
        stream = self.provider.stream_chat(request)
        try:
            async for ev in stream:
                match ev:
                    case ContentDelta(text=text):
                        parts.append(text)
                    case StreamError(message=message):
                        raise PlanRejected(f"provider error: {message}")
                    case ToolUseStart():
                        raise PlanRejected("the model called a tool instead of answering with JSON")
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        return "".join(parts)


# --------------------------------------------------------------------------- validation

_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.DOTALL)


def strict_json_object(raw: str) -> dict[str, Any]:
    """Exactly one JSON object (a surrounding ```json fence is tolerated, nothing else)."""
    text = raw.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise PlanRejected(f"not JSON ({exc}): {raw[:120]!r}") from None
    if not isinstance(value, dict):
        raise PlanRejected(f"expected a JSON object, got {type(value).__name__}")
    return value


def parse_route(raw: str, buckets: Mapping[str, BucketInfo], max_buckets: int) -> tuple[dict[str, Any], list[str]]:
    """The router's object and its buckets (known, at most ``max_buckets``)."""
    data = strict_json_object(raw)
    chosen = data.get("primary_buckets", data.get("buckets"))
    if isinstance(chosen, str):
        chosen = [chosen]
    if not isinstance(chosen, list) or not chosen or not all(isinstance(b, str) for b in chosen):
        raise PlanRejected("router: 'primary_buckets' must be a non-empty list of bucket names")
    names = list(dict.fromkeys(b.strip() for b in chosen))
    unknown = [b for b in names if b not in buckets]
    if unknown:
        raise PlanRejected(f"router chose unknown bucket(s) {unknown[:3]}; known: {sorted(buckets)}")
    if len(names) > max_buckets:
        raise PlanRejected(f"router chose {len(names)} buckets; at most {max_buckets}")
    intent = data.get("intent")
    if intent not in INTENTS:
        raise PlanRejected(f"router: intent must be one of {', '.join(INTENTS)}, got {str(intent)[:30]!r}")
    for q in data.get("subqueries") or []:
        if isinstance(q, Mapping) and q.get("bucket") is not None and q.get("bucket") not in names:
            raise PlanRejected(f"router: subquery bucket {str(q.get('bucket'))[:40]!r} is not a chosen bucket")
    return data, names


def parse_constraints(
    raw: str, schemas: Mapping[str, Mapping[str, str]]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The schema planner's constraints (each compiled against every chosen bucket it
    applies to) and the strategy per bucket."""
    data = strict_json_object(raw)
    items = data.get("constraints") or []
    if not isinstance(items, list) or not all(isinstance(c, Mapping) for c in items):
        raise PlanRejected("schema planner: 'constraints' must be a list of objects")
    constraints: list[dict[str, Any]] = []
    for item in items:
        c = normalise_constraint(item)
        if "field" not in c or "value" not in c:
            raise PlanRejected("schema planner: every constraint needs a field and a value")
        named = c.get("bucket")
        if named is not None and named not in schemas:
            raise PlanRejected(f"schema planner: constraint bucket {str(named)[:40]!r} was not chosen by the router")
        targets = [b for b, fields in schemas.items() if applies_to(c, b, fields)]
        if not targets:
            raise PlanRejected(
                f"schema planner: no chosen bucket has the field {str(c.get('field'))[:40]!r}"
            )
        for bucket in targets:
            try:
                compile_filters(constraint_filter(c), schemas[bucket], bucket=bucket)
            except FilterError as exc:
                raise PlanRejected(f"schema planner: invalid constraint for {bucket!r}: {exc}") from None
        constraints.append(c)
    raw_strategy = data.get("strategy") or "hybrid"
    if isinstance(raw_strategy, str):
        strategy = dict.fromkeys(schemas, raw_strategy)
    elif isinstance(raw_strategy, Mapping):
        strategy = {b: str(raw_strategy.get(b) or "hybrid") for b in schemas}
    else:
        raise PlanRejected("schema planner: strategy must be a string or an object keyed by bucket")
    bad = [v for v in strategy.values() if v not in STRATEGIES]
    if bad:
        raise PlanRejected(f"schema planner: strategy must be one of {', '.join(STRATEGIES)}")
    return constraints, strategy


def build_hint(
    route: Mapping[str, Any],
    buckets: Sequence[str],
    constraints: Sequence[Mapping[str, Any]],
    strategy: Mapping[str, str],
    schemas: Mapping[str, Mapping[str, str]],
    max_queries: int,
) -> PlanHint:
    """Assemble and validate the decomposition; derive each bucket's filters and queries."""
    decomposition = assemble(route, constraints, buckets)
    try:
        validate_decomposition(decomposition)
    except DecompositionError as exc:
        raise PlanRejected(f"decomposition does not match the schema: {exc}") from None
    plans = []
    for bucket in buckets:
        filters = bucket_filters(decomposition["constraints"], bucket, schemas[bucket])
        if filters is not None:
            try:
                compile_filters(filters, schemas[bucket], bucket=bucket)
            except FilterError as exc:
                raise PlanRejected(f"the constraints for {bucket!r} do not combine: {exc}") from None
        queries = [
            q["query"].strip()[:200] for q in decomposition["subqueries"] if q.get("bucket") in (None, bucket)
        ] or [t.strip()[:200] for t in decomposition["topic_terms"]]
        cleaned = tuple(dict.fromkeys(q for q in queries if q))[:max_queries]
        plans.append(BucketPlan(bucket, filters, cleaned, strategy.get(bucket, "hybrid")))
    intent = str(decomposition["intent"])
    hint = PlanHint(intent, tuple(plans), render_hint(decomposition, plans), decomposition)
    log.info(
        "query plan ready",
        extra={
            "intent": intent,
            "buckets": hint.buckets,
            "filters": [p.filters for p in plans],
            "constraints": len(decomposition["constraints"]),
        },
    )
    return hint


def render_hint(decomposition: Mapping[str, Any], plans: Sequence[BucketPlan]) -> str:
    """The plan as the model reads it: intent and output, then one line per bucket with
    its filters as exact JSON, then the conditions in the user's own words."""
    prefs = decomposition.get("output_preferences") or {}
    fmt = str(prefs.get("format", "natural_language")).replace("_", " ")
    lines = [f"Intent: {decomposition.get('intent')}; answer as {fmt}."]
    entities = [e for e in decomposition.get("entities") or [] if isinstance(e, Mapping)]
    if entities:
        lines.append("Entities: " + ", ".join(f"{e.get('name')} ({e.get('role')})" for e in entities[:10]) + ".")
    for p in plans:
        line = f'- bucket "{p.bucket}": use {_STRATEGY_TOOLS[p.strategy]}'
        if p.queries:
            line += " with queries " + ", ".join(f'"{q}"' for q in p.queries)
        if p.filters:
            line += "; pass filters " + orjson.dumps(p.filters).decode()
        lines.append(line + ".")
    stated = [
        f'{c["field"]} {c["operator"]} {orjson.dumps(c["value"]).decode()}'
        + (f' ("{c["raw_text"]}")' if c.get("raw_text") else "")
        for c in decomposition.get("constraints") or []
    ]
    if stated:
        lines.append("Conditions the user stated: " + "; ".join(stated) + ".")
        lines.append(
            "If a condition matches nothing, the search asks the user whether to drop it; do not drop it yourself."
        )
    if prefs.get("needs_citations", True):
        lines.append("Cite what you use as [doc_id].")
    return "\n".join(lines)


__all__ = [
    "BucketPlan",
    "PlanHint",
    "PlanRejected",
    "PlannerSettings",
    "QueryPlanner",
    "build_hint",
    "parse_constraints",
    "parse_route",
    "render_hint",
    "strict_json_object",
]
