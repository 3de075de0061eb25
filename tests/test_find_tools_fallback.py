"""``find_tools`` on a ready index whose search fails ranks by shared words and says so in
its result; the failure is counted in the app's ``IndexState`` too (``/readyz``'s
``tool_index.search_failures`` and ``agentchat_tool_search_failures_total`` read it),
where a ready index looked healthy while its searches failed."""

from __future__ import annotations

import httpx

from agenttools.core.catalog import build_catalog, tools_for_context
from agenttools.core.registry import RunToolState, ToolContext, ToolRegistry
from app.agent.find_tools import FindTools
from app.agent.selector import IndexState
from tests.test_kb_search_warnings import BreakableEmbedder
from toolindex.index import ToolIndex


async def test_a_failed_search_is_said_in_the_result_and_counted() -> None:
    registry = ToolRegistry(build_catalog())
    embedder = BreakableEmbedder()
    specs = list(registry)
    index = await ToolIndex.build([(s.name, s.definition.description) for s in specs], embedder)
    state = IndexState()
    state.ready(index, 1.0)
    find = FindTools(registry, state, tools_for_context)
    async with httpx.AsyncClient() as http:
        ctx = ToolContext("u1", None, "c1", "r1", "workflow", {}, http, RunToolState())
        healthy = await find({"query": "rename a workflow"}, ctx)
        assert "fallback" not in healthy.content and state.search_failures == 0
        embedder.broken = True
        degraded = await find({"query": "delete a workflow"}, ctx)
    assert degraded.content["fallback"].startswith("tool search failed") and degraded.content["tools"]
    assert state.search_failures == 1 and state.last_search_failure == "EmbeddingError"
    assert state.fallbacks == {}  # find_tools offers nothing instead: no selection fell back
