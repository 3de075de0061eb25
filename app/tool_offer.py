"""The tools a run can be offered: the default registry (the catalog), the tool index
built in the background at start-up, and the flow's core tools per context.

Apart from the wiring because what is offered is the selector's input, read by tests
and benchmarks on its own (``flow_core_tools``) without building an app.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenttools.core.registry import ToolRegistry
from app.agent.selector import IndexState
from toolindex.embedder import Embedder

log = logging.getLogger("agentchat.wiring")


async def build_tool_index(
    state: IndexState,
    registry: ToolRegistry,
    embedder: Embedder,
    cache_dir: Path | None,
    *,
    on_ready: Callable[[Any], None] | None = None,
) -> None:
    """Runs in the background at start-up; selection falls back until it is ready.
    MCP tools are left out: their segments are embedded per server (``app.mcp_room``),
    which ``on_ready`` combines with this index."""
    from agenttools.core.catalog_discovery import FIND_TOOLS
    from agenttools.mcp.config import MCP_GROUP
    from toolindex.caches import VectorCache
    from toolindex.index import ToolIndex

    state.status, state.reason, state.embedder_name = "building", "building the tool index", embedder.name
    started = time.perf_counter()
    try:
        cache = VectorCache(cache_dir) if cache_dir is not None else None
        # find_tools is core everywhere: ranking it would only take a slot of the top k.
        specs = [s for s in registry if MCP_GROUP not in s.groups and s.name != FIND_TOOLS]
        index = await ToolIndex.build([(s.name, s.embedding_text()) for s in specs], embedder, cache=cache)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        state.failed(f"index build failed: {exc}"[:400])
        log.warning(
            "tool index build failed; selection falls back to all context tools", extra={"reason": state.reason}
        )
        return
    state.ready(index, (time.perf_counter() - started) * 1000)
    if on_ready is not None:
        on_ready(index)
    log.info("tool index ready", extra={"tools": len(registry), "embedder": embedder.name, "ms": state.built_ms})


def default_registry() -> ToolRegistry:
    from agenttools.core.catalog import build_catalog

    return ToolRegistry(build_catalog())


def flow_core_tools(mandatory_contexts: tuple[str, ...]) -> Any:
    """Core tools per context: all four tools of the RAG flow in every context, whether
    the flow is mandatory there or on demand (``mandatory_contexts`` decides only how the
    agent enforces it), so the web branch — Perplexity, then keywords — is reachable.

    Each context's own core set is the tools' ``core_in`` fact, read off the catalog (built
    once here); the flow's four steps are the policy's roles (``FlowPolicy.tools``)."""
    from agenttools.core.catalog import build_catalog, core_tools
    from agenttools.rag.policy import RAG_TOOL_NAMES

    del mandatory_contexts  # the offer is the same; the enforcement differs (app.agent.loop)
    specs = tuple(build_catalog())

    def pick(context_type: str, context: Any) -> list[str]:
        return core_tools(context_type, context, mandatory=RAG_TOOL_NAMES, specs=specs)

    return pick
