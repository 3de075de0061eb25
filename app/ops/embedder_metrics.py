"""The embedder's background recovery as metrics, not only in ``/readyz``.

An explicit remote ``AGENT_EMBEDDER`` that failed its start-up probe is probed again
until it answers (``app.ops.embedder_recovery``); meanwhile knowledge search runs on text
and tool selection offers every tool. ``/readyz`` says so, and a log line when it starts
and ends; an alert needs a series: ``agentchat_embedder_recovering`` (1 while the probing
goes on, 0 otherwise: never started, or the embedder was put to work) and
``agentchat_embedder_recovery_probes_total`` (probes since the start-up's). Both are
exposed by every app, 0 where nothing is probed, so an alert on them never reads "no data".
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.ops.embedder_check import EmbedderCheck


class EmbedderRecoveryCollector(Collector):
    """Read from the app's ``EmbedderCheck`` (its ``recovery``, if any) at scrape time."""

    def __init__(self, check: EmbedderCheck) -> None:
        self._check = check

    def describe(self) -> Iterable[Metric]:
        return ()  # values are read at scrape time; no names to check ahead

    def collect(self) -> Iterable[Metric]:
        recovery = self._check.recovery
        recovering = recovery is not None and recovery.state != "recovered"
        yield GaugeMetricFamily(
            "agentchat_embedder_recovering",
            "1 while the explicit AGENT_EMBEDDER that failed its start-up probe is probed again in the background "
            "(knowledge search on text only, tool selection offering every tool), 0 otherwise.",
            value=1 if recovering else 0,
        )
        probes = CounterMetricFamily(
            "agentchat_embedder_recovery_probes",
            "Probes of the explicit AGENT_EMBEDDER after its failed start-up probe (the last one answered once "
            "agentchat_embedder_recovering is 0).",
        )
        probes.add_metric([], recovery.tries if recovery is not None else 0)
        yield probes


__all__ = ["EmbedderRecoveryCollector"]
