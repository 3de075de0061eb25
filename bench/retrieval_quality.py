"""Retrieval quality of the three-stage selector on a labelled set of user messages.

For each message of bench/data/tool_queries.json (message, context, the tools a good
agent would need) the real selector runs — context filter, embedding search (top 6),
core merge — and we report the recall of the needed tools in the final selected set
and in the top 6 alone. The hashing embedder always runs; Gemini or Ollama run too
when configured (GEMINI_API_KEY, or an Ollama with the embedding model pulled).

The MCP part (``mcp_catalog`` in the results): the 500 generated tools of
tests/fakes/mcp_catalog.py, listed by a real MCP server (the SDK's ``MCPServer``, over
its in-process transport) and added to the catalog the way the app adds them
(``agenttools.mcp.catalog``, one index segment combined with the built-in index by
``app.mcp_room.combine_indexes``), in every chat context. One labelled request per tool
(ten families, one per domain): recall of the needed tool in the selected set with the
core merge of the default policy, how often it is ranked first, and the selection time
at that catalog size (p50/p95, cold query embeddings) beside the built-in catalog alone.
``recall_with_find_tools``: the needed tool is in the selected set OR among the tools the
``find_tools`` core tool (``app.agent.find_tools``, same index, its default 10 results) returns
for the same message — what a model that searches when it lacks a tool can reach.

Run: ``.venv/bin/python bench/retrieval_quality.py`` (figures in bench/results/retrieval_quality.json).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import _common
import orjson
from _common import summary, write_results

from agenttools.core.catalog import build_catalog, core_tools, tools_for_context
from agenttools.core.catalog_discovery import FIND_TOOLS
from agenttools.core.registry import ToolRegistry
from app.agent.selector import IndexState, ToolSelector
from app.config import Settings
from toolindex.embedder import Embedder
from toolindex.factory import choose_embedder
from toolindex.hashing import HashingEmbedder
from toolindex.index import ToolIndex

TARGET = 0.9
MCP_SERVER = "catalog"


def ranked_specs(registry: ToolRegistry) -> list[tuple[str, str]]:
    """What the app's tool index embeds (``app.tool_offer.build_tool_index``): not ``find_tools``,
    which is core in every context."""
    return [(s.name, s.embedding_text()) for s in registry if s.name != FIND_TOOLS]


async def evaluate_mcp(embedder: Embedder) -> dict[str, Any]:
    """Recall and selection time with the 500-tool MCP catalog added (see the docstring)."""
    from mcp import Client

    from agenttools.core.catalog import CONTEXT_TYPES
    from agenttools.core.registry import ToolContext
    from agenttools.mcp.catalog import McpCatalog, tool_from_mcp
    from agenttools.mcp.config import MCP_GROUP
    from app.agent.find_tools import FindTools
    from app.mcp_room import combine_indexes
    from app.tool_offer import flow_core_tools
    from tests.fakes.mcp_catalog import generate_tools, labelled_queries
    from tests.fakes.mcp_server import build_server

    server, _ = build_server("all")
    async with Client(server, cache=None) as client:
        listed = (await client.list_tools()).tools
    tools = [tool_from_mcp(MCP_SERVER, t) for t in listed]
    registry = ToolRegistry(build_catalog())
    builtin_registry = ToolRegistry(build_catalog())
    catalog = McpCatalog(registry, {MCP_SERVER: CONTEXT_TYPES}, {MCP_SERVER: None})  # type: ignore[dict-item]
    exposed = catalog.update(MCP_SERVER, tools)  # no calls here: the handlers are never run
    started = time.perf_counter()
    base = await ToolIndex.build([(s.name, s.embedding_text()) for s in registry
                                  if MCP_GROUP not in s.groups and s.name != FIND_TOOLS], embedder)
    segment = await ToolIndex.build([(t.name, t.embedding_text()) for t in tools], embedder)
    build_ms = (time.perf_counter() - started) * 1000
    core = flow_core_tools(CONTEXT_TYPES)  # the default policy: every context has the mandatory flow
    state, builtin_state = IndexState(), IndexState()
    state.ready(combine_indexes(base, {MCP_SERVER: segment}, exposed), build_ms)
    builtin_state.ready(await ToolIndex.build(ranked_specs(builtin_registry), embedder), 0)
    selector = ToolSelector(registry, state, core, tools_for_context, top_k=6, min_score=0.0)
    builtin_selector = ToolSelector(builtin_registry, builtin_state, core, tools_for_context, top_k=6, min_score=0.0)
    find_tools = FindTools(registry, state, tools_for_context)
    queries = labelled_queries(generate_tools())
    hits = first = found_hits = with_find = 0
    by_family: dict[str, list[int]] = {}
    by_context: dict[str, list[int]] = {}
    cold_ms: list[float] = []
    all_ms: list[float] = []
    builtin_ms: list[float] = []
    misses: list[dict[str, Any]] = []
    for c, context_type in enumerate(CONTEXT_TYPES):
        for q in queries:
            t0 = time.perf_counter()
            sel = await selector.select(context_type, {}, q["message"])
            ms = (time.perf_counter() - t0) * 1000
            assert sel.fallback is None, sel.fallback
            (cold_ms if c == 0 else all_ms).append(ms)
            needed = exposed[(MCP_SERVER, q["needed"])]
            hit = needed in sel.tools
            hits += hit
            first += bool(sel.rag) and sel.rag[0][0] == needed
            ctx = ToolContext(user_id="bench", authorization=None, conversation_id="c", run_id="r",
                              context_type=context_type, context={}, http=None)  # type: ignore[arg-type]
            found = [t["name"] for t in (await find_tools({"query": q["message"]}, ctx)).content["tools"]]
            found_hits += needed in found
            with_find += hit or needed in found
            by_family.setdefault(q["family"], []).append(hit)
            by_context.setdefault(context_type, []).append(hit)
            if not hit and len(misses) < 20:
                misses.append({"context": context_type, "message": q["message"], "needed": needed,
                               "got": [n for n, _ in sel.rag]})
    for q in queries:  # the same cold queries against the built-in catalog alone
        t0 = time.perf_counter()
        await builtin_selector.select("knowledge", {}, q["message"])
        builtin_ms.append((time.perf_counter() - t0) * 1000)
    total = len(queries) * len(CONTEXT_TYPES)
    all_ms.extend(cold_ms)
    return {
        "embedder": f"{embedder.name}:{embedder.model}",
        "mcp_tools": len(tools),
        "catalog_tools": len(registry),
        "builtin_tools": len(builtin_registry),
        "queries": len(queries),
        "selections": total,
        "recall_with_core_merge": round(hits / total, 4),
        "ranked_first": round(first / total, 4),
        "found_by_find_tools": round(found_hits / total, 4),
        "recall_with_find_tools": round(with_find / total, 4),
        "recall_by_family": {k: round(sum(v) / len(v), 4) for k, v in by_family.items()},
        "recall_by_context": {k: round(sum(v) / len(v), 4) for k, v in by_context.items()},
        "selection_ms_cold_query": summary(cold_ms),
        "selection_ms_all": summary(all_ms),
        "selection_ms_builtin_catalog_cold_query": summary(builtin_ms),
        "index_build_ms": round(build_ms, 1),
        "misses": misses,
    }


async def evaluate(embedder: Embedder, queries: list[dict[str, Any]]) -> dict[str, Any]:
    registry = ToolRegistry(build_catalog())
    started = time.perf_counter()
    index = await ToolIndex.build(ranked_specs(registry), embedder)
    build_ms = (time.perf_counter() - started) * 1000
    state = IndexState()
    state.ready(index, build_ms)
    selector = ToolSelector(registry, state, core_tools, tools_for_context, top_k=6, min_score=0.0)
    needed_total = hit_final = hit_top = 0
    sizes: list[int] = []
    misses: list[dict[str, Any]] = []
    per_context: dict[str, list[int]] = {}
    for q in queries:
        sel = await selector.select(q["context_type"], q.get("context") or {}, q["message"])
        assert sel.fallback is None, sel.fallback
        final, top = set(sel.tools), {n for n, _ in sel.rag}
        needed = q["needed"]
        needed_total += len(needed)
        got_final = sum(1 for n in needed if n in final)
        hit_final += got_final
        hit_top += sum(1 for n in needed if n in top)
        sizes.append(len(sel.tools))
        ctx = per_context.setdefault(q["context_type"], [0, 0])
        ctx[0] += got_final
        ctx[1] += len(needed)
        if got_final < len(needed):
            misses.append({"message": q["message"], "missing": [n for n in needed if n not in final]})
    return {
        "embedder": f"{embedder.name}:{embedder.model}",
        "queries": len(queries),
        "needed_tools": needed_total,
        "recall_with_core_merge": round(hit_final / needed_total, 4),
        "recall_top6_only": round(hit_top / needed_total, 4),
        "recall_by_context": {k: round(v[0] / v[1], 4) for k, v in per_context.items()},
        "mean_tools_sent": round(sum(sizes) / len(sizes), 2),
        "index_build_ms": round(build_ms, 1),
        "misses": misses[:20],
    }


async def main() -> None:
    queries = orjson.loads((_common.ROOT / "bench" / "data" / "tool_queries.json").read_bytes())
    runs = [await evaluate(HashingEmbedder(), queries)]
    mcp_runs = [await evaluate_mcp(HashingEmbedder())]
    settings = Settings.from_env()
    real, why = await choose_embedder(
        "auto",
        gemini_api_key=settings.gemini_api_key,
        gemini_model=settings.gemini_embed_model,
        gemini_base_url=settings.gemini_base_url,
        gemini_dim=settings.gemini_embed_dim,
        ollama_host=settings.ollama_host,
        ollama_model=settings.ollama_embed_model,
    )
    real_note = why
    if real is not None and real.name != "hashing":
        try:
            runs.append(await evaluate(real, queries))
            mcp_runs.append(await evaluate_mcp(real))
        except Exception as exc:
            real_note = f"{why}; evaluation failed: {exc}"
        finally:
            await real.aclose()
    for r in runs:
        print(f"{r['embedder']:<28} recall with core merge {r['recall_with_core_merge']:.3f} "
              f"(target {TARGET}), top-6 alone {r['recall_top6_only']:.3f}, "
              f"{r['mean_tools_sent']} tools sent on average, by context {r['recall_by_context']}")
    for r in mcp_runs:
        print(f"{r['embedder']:<28} MCP catalog ({r['mcp_tools']} generated tools, {r['catalog_tools']} in all): "
              f"recall with core merge {r['recall_with_core_merge']:.3f}, ranked first {r['ranked_first']:.3f}, "
              f"with find_tools {r['recall_with_find_tools']:.3f}, "
              f"selection p50 {r['selection_ms_cold_query']['p50']:.2f} ms cold / "
              f"{r['selection_ms_all']['p50']:.2f} ms all (built-in catalog alone "
              f"{r['selection_ms_builtin_catalog_cold_query']['p50']:.2f} ms), by family {r['recall_by_family']}")
    if len(runs) == 1:
        print(f"no real embedder measured: {real_note}")
    path = write_results("retrieval_quality", {"target_recall_with_core_merge": TARGET, "runs": runs,
                                               "mcp_catalog": mcp_runs, "real_embedder": real_note})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
