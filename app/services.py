"""Everything one app instance owns, built by the factory and hung on ``app.state``.

No module-level state anywhere: two apps in one process (tests do this) share nothing.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.agent import Agent
from app.auth import Authenticator
from app.config import Settings
from app.limits import RateLimiter
from app.run_manager import RunManager
from app.selector import IndexState
from llm.provider import Provider
from storage.interfaces import ConversationStore, RunStore, ToolCallLog
from storage.sqlite import SqliteStorage


@dataclass(slots=True)
class Metrics:
    """Prometheus text from the live census and the stores' counters."""

    def lines(self, svc: Services) -> list[str]:
        by_status = svc.runs.census()
        counters = svc.runs.counters
        stats = svc.storage.db.stats
        out = [
            "# HELP agentchat_runs_started_total Runs started since the process started.",
            "# TYPE agentchat_runs_started_total counter",
            f"agentchat_runs_started_total {counters.started}",
            "# HELP agentchat_runs Runs held in memory, by status.",
            "# TYPE agentchat_runs gauge",
        ]
        for status in ("queued", "running", "completed", "failed", "cancelled", "interrupted"):
            out.append(f'agentchat_runs{{status="{status}"}} {by_status.get(status, 0)}')
        out += [
            "# HELP agentchat_runs_resumed_total Runs carried on from a checkpoint after a restart.",
            "# TYPE agentchat_runs_resumed_total counter",
            f"agentchat_runs_resumed_total {counters.resumed}",
            "# HELP agentchat_runs_interrupted_total Runs released at shutdown for the next process.",
            "# TYPE agentchat_runs_interrupted_total counter",
            f"agentchat_runs_interrupted_total {counters.interrupted}",
            "# HELP agentchat_runs_storage_failed_total Runs ended because their events could not be stored.",
            "# TYPE agentchat_runs_storage_failed_total counter",
            f"agentchat_runs_storage_failed_total {counters.storage_failures}",
            "# HELP agentchat_storage_write_retries_total Storage writes retried: the database was busy or failing.",
            "# TYPE agentchat_storage_write_retries_total counter",
            f"agentchat_storage_write_retries_total {stats.retries}",
            "# HELP agentchat_storage_write_failures_total Storage writes given up after the retry window.",
            "# TYPE agentchat_storage_write_failures_total counter",
            f"agentchat_storage_write_failures_total {stats.failures}",
        ]
        out += [
            "# HELP agentchat_tool_index_ready Whether the tool index is ready (1) or selection falls back (0).",
            "# TYPE agentchat_tool_index_ready gauge",
            f"agentchat_tool_index_ready {1 if svc.index_state.status == 'ready' else 0}",
        ]
        cache = svc.components.get("resolution_cache")
        if cache is not None:
            stats = cache.stats.to_dict()
            out += [
                "# HELP agentchat_resolution_cache_total Name-to-UUID resolution cache lookups, by outcome.",
                "# TYPE agentchat_resolution_cache_total counter",
                f'agentchat_resolution_cache_total{{outcome="hit"}} {stats.get("hits", 0)}',
                f'agentchat_resolution_cache_total{{outcome="miss"}} {stats.get("misses", 0)}',
            ]
        return out


@dataclass(slots=True)
class Services:
    settings: Settings
    storage: SqliteStorage
    http: httpx.AsyncClient
    auth: Authenticator
    runs: RunManager
    run_store: RunStore
    conversations: ConversationStore
    tool_log: ToolCallLog
    provider: Provider
    provider_reason: str
    agent: Agent
    index_state: IndexState
    rate_limiter: RateLimiter
    metrics: Metrics = field(default_factory=Metrics)
    components: dict[str, Any] = field(default_factory=dict)
    background: list[asyncio.Task[Any]] = field(default_factory=list)

    async def readiness(self) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        try:
            checks["db"] = await self.storage.readiness()
        except Exception as exc:
            checks["db"] = {"ok": False, "detail": str(exc)}
        try:
            health = await asyncio.wait_for(self.provider.health(), timeout=3)
            checks["provider"] = {
                "ok": health.ok,
                "name": self.provider.name,
                "model": self.provider.model,
                "detail": health.detail,
                "chosen_because": self.provider_reason,
            }
        except Exception as exc:
            checks["provider"] = {"ok": False, "name": self.provider.name, "detail": f"health check failed: {exc}"}
        st = self.index_state
        checks["tool_index"] = {
            "ok": st.status == "ready",
            "status": st.status,
            "embedder": st.embedder_name,
            "detail": st.reason or None,
            "note": None if st.status == "ready" else "tool selection falls back to all tools of the context",
        }
        for name, comp in self.components.items():
            probe = getattr(comp, "readiness", None)
            if probe is not None:
                try:
                    checks[name] = await probe()
                except Exception as exc:
                    checks[name] = {"ok": False, "detail": str(exc)}
        if self.runs.closing:
            checks["shutdown"] = {"ok": False, "detail": "draining: new runs are refused"}
        ready = all(bool(c.get("ok")) for name, c in checks.items() if name != "tool_index")
        return {"ready": ready, "checks": checks}

    def metrics_text(self) -> str:
        return "\n".join(self.metrics.lines(self)) + "\n"
