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
from app.db import Database
from app.limits import RateLimiter
from app.runs import RunRegistry
from app.selector import IndexState
from app.stores import SqliteConversationStore, SqliteRunLog, SqliteToolCallLog
from llm.provider import Provider


@dataclass(slots=True)
class Metrics:
    runs_started: int = 0

    def lines(self, svc: Services) -> list[str]:
        by_status: dict[str, int] = {}
        for run in svc.runs._runs.values():  # noqa: SLF001 - a read-only census
            by_status[run.status] = by_status.get(run.status, 0) + 1
        out = [
            "# HELP agentchat_runs_started_total Runs started since the process started.",
            "# TYPE agentchat_runs_started_total counter",
            f"agentchat_runs_started_total {self.runs_started}",
            "# HELP agentchat_runs Runs held in memory, by status.",
            "# TYPE agentchat_runs gauge",
        ]
        for status in ("running", "completed", "failed", "cancelled"):
            out.append(f'agentchat_runs{{status="{status}"}} {by_status.get(status, 0)}')
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
    db: Database
    http: httpx.AsyncClient
    auth: Authenticator
    runs: RunRegistry
    run_log: SqliteRunLog
    conversations: SqliteConversationStore
    tool_log: SqliteToolCallLog
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
            await self.db.fetchone("SELECT 1")
            checks["db"] = {"ok": True}
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
        ready = checks["db"]["ok"] and checks["provider"]["ok"] and not self.runs.closing
        return {"ready": ready, "checks": checks}

    def metrics_text(self) -> str:
        return "\n".join(self.metrics.lines(self)) + "\n"
