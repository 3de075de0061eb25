"""Retrieval quality of the three-stage selector on a labelled set of user messages.

For each message of bench/data/tool_queries.json (message, context, the tools a good
agent would need) the real selector runs — context filter, embedding search (top 6),
core merge — and we report the recall of the needed tools in the final selected set
and in the top 6 alone. The hashing embedder always runs; Gemini or Ollama run too
when configured (GEMINI_API_KEY, or an Ollama with the embedding model pulled).

Run: ``.venv/bin/python bench/retrieval_quality.py`` (figures in bench/results/retrieval_quality.json).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import _common
import orjson

from _common import write_results
from agenttools.catalog import build_catalog, core_tools, tools_for_context
from agenttools.registry import ToolRegistry
from app.config import Settings
from app.selector import IndexState, ToolSelector
from toolindex.embedder import Embedder
from toolindex.factory import choose_embedder
from toolindex.hashing import HashingEmbedder
from toolindex.index import ToolIndex

TARGET = 0.9


async def evaluate(embedder: Embedder, queries: list[dict[str, Any]]) -> dict[str, Any]:
    registry = ToolRegistry(build_catalog())
    started = time.perf_counter()
    index = await ToolIndex.build([(s.name, s.embedding_text()) for s in registry], embedder)
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
        except Exception as exc:
            real_note = f"{why}; evaluation failed: {exc}"
        finally:
            await real.aclose()
    for r in runs:
        print(f"{r['embedder']:<28} recall with core merge {r['recall_with_core_merge']:.3f} "
              f"(target {TARGET}), top-6 alone {r['recall_top6_only']:.3f}, "
              f"{r['mean_tools_sent']} tools sent on average, by context {r['recall_by_context']}")
    if len(runs) == 1:
        print(f"no real embedder measured: {real_note}")
    path = write_results("retrieval_quality", {"target_recall_with_core_merge": TARGET, "runs": runs,
                                               "real_embedder": real_note})
    print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
