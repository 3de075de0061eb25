"""Backend-tool executor overhead and resolution-cache hit rate.

1. Overhead: a tool call through the registry (argument checks, per-call client with
   escaping, streamed size-capped read, orjson decode, summary) against a direct
   ``httpx`` GET + ``orjson.loads`` of the same endpoint, interleaved in the same run.
   The reference backend runs in a **separate process**, so its own time is the same on
   both sides and the difference is the executor's. Target: tool ≤ 1.5× direct.
2. Resolution cache: the hit rate over a scripted 20-turn conversation (drafts, full
   previews, rule lookups by name), one caller, default TTL.

Run from the repository root:  .venv/bin/python bench/tools.py
Writes bench/results/tools.json.
"""

from __future__ import annotations

import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import orjson  # noqa: E402

from agenttools.backend_tools import register_backend_tools  # noqa: E402
from agenttools.core.catalog import build_catalog  # noqa: E402
from agenttools.core.context_ids import inject_context_ids  # noqa: E402
from agenttools.core.drafts import Drafts  # noqa: E402
from agenttools.core.registry import ToolContext, ToolRegistry  # noqa: E402
from agenttools.core.resolution import ResolutionCache  # noqa: E402
from agenttools.core.tool_support import WorkflowToolDeps  # noqa: E402
from backend.seed import ALERT_IDS, ALICE_ID, RULE_IDS, TABLE_CONFIG_IDS  # noqa: E402
from events import WorkflowPreview  # noqa: E402
from storage.open import open_storage  # noqa: E402

ITERATIONS = int(os.environ.get("BENCH_ITERATIONS", "300"))
WARMUP = 30
AUTH = "Bearer demo-alice"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_backend(db_path: str, port: int) -> subprocess.Popen[bytes]:
    code = (
        "import asyncio, sys; sys.path.insert(0, %r)\n"
        "from backend.app import serve_backend\n"
        "asyncio.run(serve_backend('127.0.0.1', %d, %r))\n" % (str(ROOT), port, db_path)
    )
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _wait_ready(http: httpx.AsyncClient, base: str) -> None:
    for _ in range(200):
        try:
            if (await http.get(base + "/healthz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.05)
    raise RuntimeError("backend did not start")


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 4),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 4),
        "mean_ms": round(statistics.fmean(ordered) * 1000, 4),
    }


async def _overhead(registry: ToolRegistry, http: httpx.AsyncClient, base: str) -> dict[str, Any]:
    ctx = ToolContext(
        user_id=ALICE_ID, authorization=AUTH, conversation_id="bench", run_id="bench",
        context_type="workflow", context={}, http=http,
    )
    alert = ALERT_IDS["low_stock_widget"]
    config = TABLE_CONFIG_IDS["open_sales_orders"]
    cases = [
        ("get_alert_detail", {"alert_id": alert}, f"/v1/workflow/alerts/{alert}"),
        ("get_table_config", {"id": config}, f"/v1/data/id/{config}"),
        ("list_workflow_rules", {}, "/v1/workflow/rules?page=1&rows=100"),
    ]
    headers = {"Authorization": AUTH, "Accept": "application/json"}
    out: dict[str, Any] = {}
    for tool, args, path in cases:
        handler = registry.handler(tool)
        assert handler is not None
        tool_t: list[float] = []
        direct_t: list[float] = []
        for i in range(WARMUP + ITERATIONS):
            t0 = time.perf_counter()
            r = await http.get(base + path, headers=headers)
            orjson.loads(r.content)
            t1 = time.perf_counter()
            outcome = await handler(dict(args), ctx)
            t2 = time.perf_counter()
            assert r.status_code == 200 and not outcome.is_error, outcome.content
            if i >= WARMUP:
                direct_t.append(t1 - t0)
                tool_t.append(t2 - t1)
        direct, via_tool = _stats(direct_t), _stats(tool_t)
        out[tool] = {
            "endpoint": path.split("?")[0],
            "direct": direct,
            "tool": via_tool,
            "ratio_median": round(via_tool["median_ms"] / direct["median_ms"], 3),
            "overhead_median_ms": round(via_tool["median_ms"] - direct["median_ms"], 4),
        }
    return out


def _script() -> list[list[tuple[str, dict[str, Any], dict[str, Any]]]]:
    """20 user turns; each is the tool calls the agent would make for it (with UI context)."""
    low = RULE_IDS["Low Stock Alert"]
    email = {"recipients": ["ops@example.com"], "subject": "Order", "body": "New order"}
    wf_ctx = {"workflow_id": low, "rule_name": "Low Stock Alert"}
    new_ctx = {"is_new": True}
    full = {
        "name": "Reorder mail",
        "is_active": True,
        "entity": "inventory.inventory_items",
        "trigger_type": "on_update",
        "actions": [
            {"name": "Check", "action_type": "check_reorder_point", "action_config": {}, "is_active": True},
            {"name": "Mail", "action_type": "send_email", "action_config": email, "is_active": True, "after": "Check:needs_reorder"},
        ],
    }
    return [
        [("list_workflow_rules", {}, {})],
        [("get_workflow_rule", {"workflow_id": "Low Stock Alert"}, {})],
        [("explain_workflow_node", {"workflow_id": "Low Stock Alert", "node_name": "Alert Inventory Team"}, {})],
        [("discover", {"category": "action_types"}, new_ctx)],
        [("discover", {"category": "entities"}, new_ctx), ("start_draft", {"name": "Order mail", "entity": "sales.orders", "trigger_type": "on_create"}, new_ctx)],
        [("add_draft_action", {"name": "Check", "action_type": "check_inventory", "action_config": {"threshold": 1}}, new_ctx)],
        [("add_draft_action", {"name": "Mail", "action_type": "send_email", "action_config": email, "after": "Check"}, new_ctx)],
        [("add_draft_action", {"name": "Log", "action_type": "log_audit_entry", "action_config": {"message": "short"}, "after": "Check:insufficient"}, new_ctx)],
        [("preview_draft", {"description": "Mail on new orders"}, new_ctx)],
        [("remove_draft_action", {"action_name": "Log"}, new_ctx)],
        [("preview_draft", {"description": "Mail on new orders, no log"}, new_ctx)],
        [("get_workflow_rule", {"workflow_id": "New Order Allocation"}, {})],
        [("explain_workflow_node", {"node_name": "create_alert"}, wf_ctx)],
        [("preview_workflow", {"workflow": full, "description": "Mail on reorder"}, {})],
        [("list_my_alerts", {"status": "active"}, {})],
        [("get_workflow_rule", {"workflow_id": "welcome_new_customer"}, {})],
        [("start_draft", {"name": "Product audit", "entity": "inventory.products", "trigger_type": "manual"}, new_ctx)],
        [("add_draft_action", {"name": "Audit", "action_type": "log_audit_entry", "action_config": {"message": "manual run"}}, new_ctx)],
        [("preview_draft", {"description": "Audit products on demand"}, new_ctx)],
        [("explain_workflow_node", {"workflow_id": "Low Stock Alert", "node_name": "check_reorder_point"}, {})],
    ]


async def _conversation(registry: ToolRegistry, http: httpx.AsyncClient, cache: ResolutionCache) -> dict[str, Any]:
    before = cache.stats.to_dict()
    draft_id = ""
    calls = errors = previews = 0
    for turn in _script():
        for tool, args, context in turn:
            args = dict(args)
            if tool in ("add_draft_action", "remove_draft_action", "preview_draft"):
                args["draft_id"] = draft_id
            ctx = ToolContext(
                user_id=ALICE_ID, authorization=AUTH, conversation_id="conv", run_id="run",
                context_type="workflow", context=context, http=http,
            )
            outcome = await registry.handler(tool)(inject_context_ids(tool, args, "workflow", context), ctx)  # type: ignore[misc]
            calls += 1
            errors += outcome.is_error
            previews += any(isinstance(e, WorkflowPreview) for e in outcome.events)
            if tool == "start_draft" and not outcome.is_error:
                draft_id = outcome.content["draft_id"]
    after = cache.stats.to_dict()
    hits = int(after["hits"]) - int(before["hits"]) + int(after["coalesced"]) - int(before["coalesced"])
    misses = int(after["misses"]) - int(before["misses"])
    return {
        "turns": len(_script()),
        "tool_calls": calls,
        "tool_errors": errors,
        "workflow_previews": previews,
        "cache_lookups": hits + misses,
        "cache_hits": hits,
        "cache_misses": misses,
        "hit_rate": round(hits / (hits + misses), 4) if hits + misses else 0.0,
    }


async def main() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        proc = _start_backend(str(Path(tmp) / "backend.db"), port)
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient() as http:
                await _wait_ready(http, base)
                storage = await open_storage(Path(tmp) / "agent.db")
                drafts = Drafts(storage.drafts)
                cache = ResolutionCache()
                registry = ToolRegistry(build_catalog())
                register_backend_tools(registry, WorkflowToolDeps(backend_url=base, drafts=drafts, resolution_cache=cache))
                try:
                    overhead = await _overhead(registry, http, base)
                    conversation = await _conversation(registry, http, cache)
                finally:
                    await storage.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    worst = max(v["ratio_median"] for v in overhead.values())
    return {
        "benchmark": "tools",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "iterations": ITERATIONS,
        "overhead": overhead,
        "worst_ratio_median": worst,
        "target_ratio": 1.5,
        "meets_target": worst <= 1.5,
        "resolution_cache": conversation,
    }


if __name__ == "__main__":
    result = asyncio.run(main())
    out = ROOT / "bench" / "results" / "tools.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    for tool, v in result["overhead"].items():
        print(
            f"{tool:22s} direct {v['direct']['median_ms']:.3f} ms  tool {v['tool']['median_ms']:.3f} ms  "
            f"ratio {v['ratio_median']:.2f}x  overhead {v['overhead_median_ms']:.3f} ms"
        )
    rc = result["resolution_cache"]
    print(
        f"resolution cache over {rc['turns']} turns / {rc['tool_calls']} calls: "
        f"{rc['cache_hits']} hits, {rc['cache_misses']} misses, hit rate {rc['hit_rate']:.1%} "
        f"({rc['tool_errors']} tool errors, {rc['workflow_previews']} previews)"
    )
    print(f"wrote {out}")
