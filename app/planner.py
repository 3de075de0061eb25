"""Query decomposition (seed 004 §8): an optional two-call pre-pass that turns a user
question into a short search plan for the agent's system prompt.

1. **Router** — sees only the bucket names, sizes and field names, and returns
   ``{"buckets": [...], "intent": ...}`` as strict JSON. Unknown buckets reject the plan.
2. **Schema planner** — sees the typed schemas of the chosen buckets only (not every
   schema: that is the point of two phases) and returns, per bucket, ``filters`` in the
   tools' filter language, search queries and a strategy. Every filter is compiled
   against its bucket's schema with ``knowledge.filters.compile_filters``; one that
   does not compile rejects the plan.

The plan is advice: it goes into the system prompt as a hint and the model still calls
the tools itself. So any failure — provider error, timeout, text that is not the JSON
asked for, an unknown bucket, an invalid filter — just means no hint (``None``), logged
with the reason; the run goes on exactly as without a planner.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from knowledge.filters import FilterError, compile_filters, describe_fields
from knowledge.types import BucketInfo
from llm.provider import Provider
from llm.types import ChatRequest, Message

log = logging.getLogger("agentchat.planner")

INTENTS = ("qa", "list", "summarize", "compare", "compute")
STRATEGIES = ("keyword", "semantic", "hybrid")
_STRATEGY_TOOLS = {
    "keyword": "search_text",
    "semantic": "search_semantic",
    "hybrid": "search_text and search_semantic",
}

ROUTER_PROMPT = """You are the router of a document search system. Pick the document buckets \
that can answer the user's question and classify the question's intent.

You NEVER answer the question. You ONLY output one JSON object, nothing else:
{"buckets": ["<bucket name>", ...], "intent": "qa" | "list" | "summarize" | "compare" | "compute"}

Use only bucket names from this list (at most %(max)d):
%(buckets)s"""

SCHEMA_PROMPT = """You are the schema planner of a document search system. Turn the constraints \
of the user's question into metadata filters for the buckets below, and propose short search queries.

Filter language: {"field": value} for equality, {"field": [v1, v2]} for any of, \
{"field": {"op": value}} with op one of = != > >= < <= in nin like, \
{"$or": [filter, ...]} for alternatives. Dates are "YYYY-MM-DD"; "like" takes a pattern with %% wildcards. \
Use only the fields listed; use a filter only for a constraint the question states. \
Do not invent values.

You NEVER answer the question. You ONLY output one JSON object, nothing else:
{"plans": {"<bucket>": {"filters": {...} or null, "queries": ["<search query>", ...], \
"strategy": "keyword" | "semantic" | "hybrid"}}}

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
    """A validated plan; ``text`` is what goes into the system prompt (``plan_hint``)."""

    intent: str
    plans: tuple[BucketPlan, ...]
    text: str

    @property
    def buckets(self) -> list[str]:
        return [p.bucket for p in self.plans]


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

    async def plan(self, message: str) -> PlanHint | None:
        """The plan hint for ``message``; ``None`` when there is nothing to plan or anything fails."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                return await self._plan(message)
        except TimeoutError:
            log.warning("query plan skipped: timed out after %.1f s", self.settings.timeout_s)
        except PlanRejected as exc:
            log.warning("query plan skipped: %s", exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the hint is optional; never fail a run over it
            log.warning("query plan skipped: %s: %s", type(exc).__name__, exc)
        return None

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
        chosen, intent = parse_route(router_raw, buckets, self.settings.max_buckets)

        schemas = "\n".join(f"- {name}: {describe_fields(buckets[name].fields)}" for name in chosen)
        planner_raw = await self._ask(SCHEMA_PROMPT % {"schemas": schemas}, text)
        plans = parse_plans(planner_raw, {n: buckets[n].fields for n in chosen}, self.settings.max_queries)
        hint = PlanHint(intent=intent, plans=plans, text=render_hint(intent, plans))
        log.info(
            "query plan ready",
            extra={"intent": intent, "buckets": [p.bucket for p in plans], "filters": [p.filters for p in plans]},
        )
        return hint

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
                if ev.type == "content_delta":
                    parts.append(ev.text)
                elif ev.type == "error":
                    raise PlanRejected(f"provider error: {ev.message}")
                elif ev.type == "tool_use_start":
                    raise PlanRejected("the model called a tool instead of answering with JSON")
        finally:
            await stream.aclose()
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


def parse_route(raw: str, buckets: Mapping[str, BucketInfo], max_buckets: int) -> tuple[list[str], str]:
    data = strict_json_object(raw)
    chosen = data.get("buckets")
    if isinstance(chosen, str):
        chosen = [chosen]
    if not isinstance(chosen, list) or not chosen or not all(isinstance(b, str) for b in chosen):
        raise PlanRejected("router: 'buckets' must be a non-empty list of bucket names")
    names = list(dict.fromkeys(b.strip() for b in chosen))
    unknown = [b for b in names if b not in buckets]
    if unknown:
        raise PlanRejected(f"router chose unknown bucket(s) {unknown[:3]}; known: {sorted(buckets)}")
    if len(names) > max_buckets:
        raise PlanRejected(f"router chose {len(names)} buckets; at most {max_buckets}")
    intent = data.get("intent")
    if intent not in INTENTS:
        raise PlanRejected(f"router: intent must be one of {', '.join(INTENTS)}, got {str(intent)[:30]!r}")
    return names, str(intent)


def parse_plans(raw: str, schemas: Mapping[str, Mapping[str, str]], max_queries: int) -> tuple[BucketPlan, ...]:
    data = strict_json_object(raw)
    plans = data.get("plans")
    if not isinstance(plans, dict) or not plans:
        raise PlanRejected("schema planner: 'plans' must be an object keyed by bucket")
    out: list[BucketPlan] = []
    for bucket, plan in plans.items():
        if bucket not in schemas:
            raise PlanRejected(f"schema planner: bucket {str(bucket)[:40]!r} was not chosen by the router")
        if not isinstance(plan, dict):
            raise PlanRejected(f"schema planner: the plan for {bucket!r} must be an object")
        filters = plan.get("filters") or None
        if filters is not None:
            if not isinstance(filters, dict):
                raise PlanRejected(f"schema planner: filters for {bucket!r} must be an object")
            try:
                compile_filters(filters, schemas[bucket], bucket=bucket)
            except FilterError as exc:
                raise PlanRejected(f"schema planner: invalid filters for {bucket!r}: {exc}") from None
        queries = plan.get("queries") or []
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            raise PlanRejected(f"schema planner: queries for {bucket!r} must be a list of strings")
        cleaned = tuple(q.strip()[:200] for q in queries if q.strip())[:max_queries]
        strategy = plan.get("strategy") or "hybrid"
        if strategy not in STRATEGIES:
            raise PlanRejected(f"schema planner: strategy must be one of {', '.join(STRATEGIES)}")
        out.append(BucketPlan(bucket, filters, cleaned, str(strategy)))
    return tuple(out)


def render_hint(intent: str, plans: Sequence[BucketPlan]) -> str:
    """The hint as the model reads it: one short block per bucket, filters as exact JSON."""
    lines = [f"Intent: {intent}."]
    for p in plans:
        line = f'- bucket "{p.bucket}": use {_STRATEGY_TOOLS[p.strategy]}'
        if p.queries:
            line += " with queries " + ", ".join(f'"{q}"' for q in p.queries)
        if p.filters:
            line += "; pass filters " + orjson.dumps(p.filters).decode()
        lines.append(line + ".")
    lines.append("Cite what you use as [doc_id]. If a filter finds nothing, the tools relax it once by themselves.")
    return "\n".join(lines)


__all__ = [
    "BucketPlan",
    "PlanHint",
    "PlanRejected",
    "PlannerSettings",
    "QueryPlanner",
    "parse_plans",
    "parse_route",
    "render_hint",
    "strict_json_object",
]
