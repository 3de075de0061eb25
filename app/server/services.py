"""Everything one app instance owns, built by the factory and hung on ``app.state``.

No module-level state anywhere: two apps in one process (tests do this) share nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.agent.loop import Agent
from app.agent.selector import IndexState
from app.config import Settings
from app.ops.embedder_check import EmbedderCheck
from app.ops.leader import Leader
from app.ops.live_metrics import LiveSources
from app.ops.load import ReplicaLoad
from app.ops.masking import SecretScrubber
from app.ops.metrics import AppMetrics
from app.ops.worker_metrics import WorkerMetrics
from app.rooms import Rooms
from app.runs.manager import RunManager
from app.runs.remote import RemoteRuns
from app.server.auth import Authenticator
from app.server.limits import Admission
from app.server.sse_response import LiveStreams
from llm.provider import Provider
from storage.interfaces import ConversationStore, RunStore, StorageBundle, ToolCallLog

#: Rooms whose readiness reads the database: not asked while it is unavailable, so
#: ``/readyz`` answers at once during an outage.
STORAGE_ROOMS = frozenset({"knowledge", "keywords"})


@dataclass(slots=True)
class Services:
    settings: Settings
    storage: StorageBundle
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
    limits: Admission
    metrics: AppMetrics = field(default_factory=AppMetrics)
    rooms: Rooms = field(default_factory=Rooms)
    #: The open SSE responses, ended together when the server stops.
    streams: LiveStreams = field(default_factory=LiveStreams)
    background: list[asyncio.Task[Any]] = field(default_factory=list)
    #: Followers of runs executing on other replicas (engines with a run feed only).
    remote: RemoteRuns | None = None
    #: The embedder chosen at start-up (probed), why, and its first answer: ``/readyz``.
    embedder_check: EmbedderCheck | None = None
    #: Live runs, model streams and event-loop lag, and whether new runs are admitted.
    load: ReplicaLoad | None = None
    #: Which process of the database runs the background jobs (``app/ops/leader``):
    #: workers on one SQLite file, every process on PostgreSQL.
    leader: Leader | None = None
    #: Workers on one port: ``/metrics`` merges every worker's (``app/ops/worker_metrics``).
    worker_metrics: WorkerMetrics | None = None
    #: Masks the configured secrets in what ``/readyz`` (unauthenticated) answers.
    scrubber: SecretScrubber = field(init=False)

    def __post_init__(self) -> None:
        self.scrubber = SecretScrubber(self.settings.secret_values())

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
            # A ready index whose searches fail (its embedder's server down) falls back too.
            "search_failures": st.search_failures,
            "last_search_failure": st.last_search_failure,
            "last_search_failure_at": st.last_search_failure_at,
            "last_search_failure_recovered_at": st.last_search_failure_recovered_at,
        }
        if self.embedder_check is not None:
            checks["embedder"] = self.embedder_check.readiness()
        for name, room in self.rooms.with_readiness():
            if name in STORAGE_ROOMS and not checks["db"].get("ok"):
                # They read the same database: asking would wait for its timeouts again.
                checks[name] = {"ok": False, "detail": "not checked: the database is unavailable"}
                continue
            try:
                checks[name] = await room.readiness()
            except Exception as exc:
                checks[name] = {"ok": False, "detail": str(exc)}
        if self.runs.closing:
            checks["shutdown"] = {"ok": False, "detail": "draining: new runs are refused"}
        ready = all(bool(c.get("ok")) for name, c in checks.items() if name != "tool_index")
        # Reasons and details quote URLs and exception texts: no credential is served.
        report: dict[str, Any] = {"ready": ready, "checks": self.scrubber.value(checks)}
        if self.load is not None:
            # Informational: a busy replica still serves its followers and every other
            # route, so it stays ready; ``accepting`` says whether it takes new runs.
            report["load"] = self.load.snapshot(replica=self.runs.owner_id)
        if (rate := self.limits.status()) is not None:
            # Informational: the database's own check says whether it is away.
            report["rate_limit"] = rate
        if self.leader is not None:
            feed = self.storage.run_feed
            report["workers"] = {**self.leader.status(), "siblings_connected": getattr(feed, "siblings", None)}
        return report

    def _live_log_settles(self) -> Callable[[], Any] | None:
        """SQLite's live-log settle counts (``storage.sqlite.log_settler``), read at scrape time."""
        settler = getattr(self.storage.runs, "settler", None)
        return (lambda: settler.stats) if settler is not None else None

    def _db_unreachable(self) -> Callable[[], tuple[bool, int]] | None:
        """PostgreSQL's reachability (``storage.postgres.reachability``), read at scrape
        time (``None``: SQLite, no pool to be refused by)."""
        reach = getattr(self.storage.db, "reach", None)
        return (lambda: (reach.down, reach.refused)) if reach is not None else None

    def _run_feed_status(self) -> Callable[[], Any] | None:
        """PostgreSQL's run-event listener's state, read at scrape time (``None``: none)."""
        status = getattr(self.storage.run_feed, "status", None)
        return status if callable(status) else None

    def live_metric_sources(self) -> LiveSources:
        """What ``/metrics`` reads at scrape time from this app's live objects."""
        return LiveSources(
            census=self.runs.census,
            run_counters=lambda: self.runs.counters,
            write_stats=lambda: self.storage.db.stats,
            index_ready=lambda: self.index_state.status == "ready",
            model_choice=self._model_choice,
            query_plans=self._query_plans(),
            tool_selection_fallbacks=lambda: dict(self.index_state.fallbacks),
            tool_search_failures=lambda: self.index_state.search_failures,
            resolution_cache=lambda: self.rooms.resolution_cache,
            leases_held=self.runs.leases_held,
            kb_text_fallbacks=self._kb_text_fallbacks if self.rooms.knowledge is not None else None,
            kb_reembedding=self._kb_reembedding if self.rooms.knowledge is not None else None,
            kb_fusion_drops=self._kb_fusion_drops if self.rooms.knowledge is not None else None,
            kb_reloads=self._kb_reloads if self.rooms.knowledge is not None else None,
            kb_reload_failures=self._kb_reload_failures(),
            kb_unreadable_vectors=self._kb_unreadable_vectors(),
            kb_bucket_list_failures=self._kb_bucket_list_failures(),
            kb_graph_serial_builds=self._kb_graph_serial_builds(),
            kb_default_buckets_missing=(
                self.rooms.knowledge.missing_default_buckets if self.rooms.knowledge is not None else None
            ),
            saved_answer_fallbacks=self._saved_answer_fallbacks(),
            mcp_servers=self.rooms.mcp.server_states if self.rooms.mcp is not None else None,
            mcp_unranked=self._mcp_unranked(),
            rate_limit_fallbacks=(lambda: self.limits.shared_fallbacks) if self.limits.store is not None else None,
            live_log=self._live_log_settles(),
            db_unreachable=self._db_unreachable(),
            run_feed=self._run_feed_status(),
        )

    def _model_choice(self) -> list[tuple[str, str, str]]:
        """The provider and the embedder in use, with the settings that chose them."""
        chosen = [("provider", str(self.provider.name), self.settings.llm_provider)]
        check = self.embedder_check
        if check is not None:
            name = check.embedder.name if check.embedder is not None else "none"
            chosen.append(("embedder", str(name), check.configured))
        return chosen

    def _query_plans(self) -> Callable[[], dict[str, int]] | None:
        """The planner's outcomes, read at scrape time (``None``: no planner)."""
        outcomes = getattr(self.agent.planner, "outcomes", None)
        return (lambda: dict(outcomes)) if isinstance(outcomes, dict) else None

    def _saved_answer_fallbacks(self) -> Callable[[], dict[str, int]] | None:
        """The saved web answers' fallbacks, read at scrape time (``None``: no saved answers)."""
        keywords = self.rooms.keywords
        return (lambda: dict(keywords.fallbacks)) if keywords is not None else None

    def _mcp_unranked(self) -> Callable[[], int] | None:
        """MCP servers whose tools are not in the tool index (``None``: no MCP servers)."""
        mcp = self.rooms.mcp
        return (lambda: len(mcp.unranked & set(mcp.connections))) if mcp is not None else None

    def _kb_fusion_drops(self) -> dict[tuple[str, str], int]:
        knowledge = self.rooms.knowledge
        return dict(knowledge.kb.status.fusion_drops) if knowledge is not None else {}

    def _kb_reembedding(self) -> tuple[int, int]:
        knowledge = self.rooms.knowledge
        if knowledge is None:
            return 0, 0
        backfill = knowledge.kb.backfill
        return int(backfill.pending or 0), int(backfill.reembedded)

    def _kb_graph_serial_builds(self) -> Callable[[], int] | None:
        """The KB engine's serial graph builds, read at scrape time (``None``: no graphs)."""
        knowledge = self.rooms.knowledge
        if knowledge is None or knowledge.kb.status.graph_serial_builds is None:
            return None
        status = knowledge.kb.status
        return lambda: int(status.graph_serial_builds or 0)

    def _kb_reload_failures(self) -> Callable[[], int] | None:
        """The KB's failed reloads of its in-memory vectors (``None``: no KB)."""
        knowledge = self.rooms.knowledge
        return (lambda: int(knowledge.kb.status.reload_failures)) if knowledge is not None else None

    def _kb_unreadable_vectors(self) -> Callable[[], int | None] | None:
        """The KB's stored vectors its load could not read (``None``: no KB; the
        callable's ``None``: not counted yet)."""
        knowledge = self.rooms.knowledge
        return (lambda: knowledge.kb.status.unreadable_vectors) if knowledge is not None else None

    def _kb_bucket_list_failures(self) -> Callable[[], int] | None:
        """The KB's failed reads of its bucket list (``None``: no KB)."""
        knowledge = self.rooms.knowledge
        return (lambda: int(knowledge.kb.status.bucket_list_failures)) if knowledge is not None else None

    def _kb_reloads(self) -> int:
        knowledge = self.rooms.knowledge
        return int(knowledge.kb.status.reloads) if knowledge is not None else 0

    def _kb_text_fallbacks(self) -> int:
        knowledge = self.rooms.knowledge
        return int(knowledge.kb.status.text_fallbacks) if knowledge is not None else 0

    def metrics_body(self) -> bytes:
        """This app's metrics in the Prometheus text format."""
        return self.metrics.exposition()

    async def service_metrics(self) -> bytes:
        """What ``/metrics`` answers: this app's, or every worker's merged."""
        if self.worker_metrics is None:
            return self.metrics_body()
        return await self.worker_metrics.body()
