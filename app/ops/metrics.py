"""Prometheus metrics of one app instance, on ``GET /metrics``.

Each app owns its own ``CollectorRegistry`` (built by the factory, hung on ``Services``):
two apps in one process — tests build many — never share a metric. Three kinds of
metric live in it:

* **live values** read at scrape time from the objects that keep them (run census and
  counters, storage write stats, tool-index state, resolution cache), by ``LiveCollector``;
* **the process** (CPU, memory, open files, start time), GC and platform collectors;
* **run outcomes** recorded by the agent loop through ``RunMetrics``: per-tool latency
  and outcome, run duration, and the seed-002 success criteria made readable —
  SC-001 (the knowledge base is searched in every run), SC-002 (``generate_response``
  right the first time), SC-003 (keywords indexed after every Perplexity call),
  SC-005 (end-to-end latency) and SC-007 (failed tool calls that a retry recovered).

The loop calls ``RunMetrics.tool_finished`` after each tool call and
``RunMetrics.run_finished`` once per run with a ``FinishedRun``; everything the success
criteria need is derived from the ordered list of calls, so the loop reports facts and
``run_metrics`` owns their interpretation. The live values are ``live_metrics``'; this
module puts the app's one registry together.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

from app.ops.admission_metrics import AdmissionMetrics
from app.ops.gc_metrics import GCPolicyCollector
from app.ops.history_metrics import HistoryMetrics
from app.ops.live_metrics import LiveCollector, LiveSources
from app.ops.run_metrics import RunMetrics

#: The exposition format the body is written in (Prometheus text 0.0.4, which every
#: scraper reads; the body contains only names that need no escaping).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

#: Take-over happens within about half a lease (10 s by default) after expiry.
TAKEOVER_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0)


class AppMetrics:
    """One app's registry: process collectors, the live collector and ``RunMetrics``."""

    def __init__(self, *, tool_names: Container[str] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.registry.register(GCPolicyCollector())
        self.runs = RunMetrics(self.registry, tool_names=tool_names)
        self.history = HistoryMetrics(self.registry)
        self.admission = AdmissionMetrics(self.registry)
        self._live: LiveCollector | None = None
        # A request that found every connection of an outbound pool busy (``llm.pool``).
        self.pool_wait_seconds = Histogram(
            "agentchat_pool_wait_seconds",
            "Time a request waited for a connection of a full outbound pool (llm, backend, embed, perplexity)",
            ["pool"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )

        # From the moment a dead replica's lease expired to the run resumed here.
        self.take_over_latency = Histogram(
            "agentchat_run_takeover_latency_seconds",
            "Time from the expiry of a dead replica's lease on a run to the run carried on here.",
            buckets=TAKEOVER_BUCKETS,
            registry=self.registry,
        )

        # Server-sent-event responses being written right now (every route that streams).
        self.open_streams = Gauge(
            "agentchat_open_streams",
            "SSE responses open now (native, OpenAI-compatible and AI SDK streams).",
            registry=self.registry,
        )

    def pool_waited(self, pool: str, seconds: float) -> None:
        self.pool_wait_seconds.labels(pool=pool).observe(seconds)

    def attach_live(self, sources: LiveSources) -> None:
        """Register the live collector (once: the factory calls this when the services exist)."""
        if self._live is not None:
            raise RuntimeError("live metrics are already attached")
        self._live = LiveCollector(sources)
        self.registry.register(self._live)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format (``CONTENT_TYPE``)."""
        return generate_latest(self.registry)
