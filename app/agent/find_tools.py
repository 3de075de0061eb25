"""``find_tools``: the model searches the context's whole catalog for a tool it was not offered.

Selection (``app.agent.selector``) offers the core tools and the ``AGENT_RAG_TOP_K`` best
ranked ones, which keeps the model's tool list short; a tool that ranks lower (one of
hundreds an MCP server lists) would otherwise be unreachable. This handler ranks the same
context-filtered catalog with the same ``ToolIndex`` (same embedder, same query cache)
for the model's own query, returns names and descriptions, and records the names in the
run's tool state (``extras["found_tools"]``, kept in the checkpoint) so the agent offers
them from the next model turn on, in this process or in the one that carries the run on.

When the index is not ready (no embedder, building, failed) it says so in its result
(``fallback``) and ranks by the words the query shares with each tool's name and
description instead; ``/readyz`` shows the index's state, and a search of a ready index
that fails is counted there and in ``agentchat_tool_search_failures_total``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from agenttools.core.catalog_discovery import FIND_TOOLS, FIND_TOOLS_MAX_RESULTS
from agenttools.core.registry import RunToolState, ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.agent.selector import ContextFilterFn, IndexState

FOUND_TOOLS_KEY: Final = "found_tools"
#: At most this many found tools are added to a run's offer (the oldest finds drop out).
MAX_FOUND_TOOLS: Final = 30
_DESCRIPTION_CHARS: Final = 300
_WORD = re.compile(r"[a-z0-9]+")


def found_tools(state: RunToolState) -> list[str]:
    """The tools ``find_tools`` found in this run, oldest first."""
    found = state.extras.get(FOUND_TOOLS_KEY)
    return [n for n in found if isinstance(n, str)] if isinstance(found, list) else []


@dataclass(slots=True)
class FindTools:
    """The ``find_tools`` handler (see the module docstring)."""

    registry: ToolRegistry
    index_state: IndexState
    context_filter: ContextFilterFn
    search_timeout_s: float = 10.0

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        query = " ".join(str(args.get("query", "")).split())
        limit = int(args.get("limit") or FIND_TOOLS_MAX_RESULTS)
        specs = [s for s in self.context_filter(list(self.registry), ctx.context_type) if s.name != FIND_TOOLS]
        allowed = {s.name for s in specs}
        fallback: str | None = None
        ranked: list[tuple[str, float]] = []
        state = self.index_state
        if state.status != "ready" or state.index is None:
            fallback = f"tool index {state.status}: {state.reason}" if state.reason else f"tool index {state.status}"
        else:
            try:
                async with asyncio.timeout(self.search_timeout_s):
                    result = await state.index.search(query, top_k=limit, min_score=0.0, allowlist=allowed)
                ranked = [(m.name, float(m.score)) for m in result.matches if m.name in allowed]
                state.search_succeeded()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the index failed this query: words instead, said in the result
                fallback = f"tool search failed: {type(exc).__name__}: {exc}"[:300]
                state.search_failed(exc)  # and in /readyz and /metrics
        if fallback is not None:
            ranked = rank_by_words(query, specs, limit)
        by_name = {s.name: s for s in specs}
        tools: list[dict[str, Any]] = [
            {"name": name, "description": _short(by_name[name].definition.description), "score": round(score, 4)}
            for name, score in ranked
            if name in by_name
        ]
        _remember(ctx.state, [str(t["name"]) for t in tools])
        content: dict[str, Any] = {
            "query": query,
            "tools": tools,
            "note": "These tools can be called from your next turn on." if tools
            else "No tool matches; answer with the tools you have.",
        }
        if fallback is not None:
            content["fallback"] = f"{fallback}; ranked by shared words"
        return ToolOutcome(content=content)


def rank_by_words(query: str, specs: Sequence[ToolSpec], limit: int) -> list[tuple[str, float]]:
    """The tools sharing the most words with ``query`` (name and description), best first."""
    wanted = set(_WORD.findall(query.lower()))
    if not wanted:
        return []
    scored = []
    for spec in specs:
        words = set(_WORD.findall(f"{spec.name.replace('_', ' ')} {spec.definition.description}".lower()))
        shared = len(wanted & words)
        if shared:
            scored.append((spec.name, shared / len(wanted)))
    scored.sort(key=lambda item: -item[1])
    return scored[:limit]


def _remember(state: RunToolState, names: list[str]) -> None:
    found = [n for n in found_tools(state) if n not in names] + names
    state.extras[FOUND_TOOLS_KEY] = found[-MAX_FOUND_TOOLS:]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DESCRIPTION_CHARS else text[: _DESCRIPTION_CHARS - 1] + "\u2026"
