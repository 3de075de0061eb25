"""The collector's policy as metrics: what ``agentchat serve`` froze and the thresholds.

prometheus_client's ``GCCollector`` already exports ``python_gc_collections_total`` and
``python_gc_objects_collected_total`` per generation. What it does not say is whether
the serving policy (``app/cli/gcpolicy.py``: freeze the start-up objects, a larger
young-generation threshold) is in force in this process. A full collection stops every
live stream for as long as it walks the tracked objects, so an operator looking at
inter-token gaps needs to see that the start-up objects are out of its way.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector


class GCPolicyCollector(Collector):
    """``agentchat_gc_frozen_objects`` and ``agentchat_gc_threshold{generation}``, read
    from the interpreter at scrape time."""

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return ()  # values are read at scrape time; no names to check ahead

    def collect(self) -> Iterable[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "agentchat_gc_frozen_objects",
            "Objects in the collector's permanent generation (gc.freeze() after start-up): "
            "collections never walk them. 0: the serving GC policy was not applied.",
            value=gc.get_freeze_count(),
        )
        thresholds = GaugeMetricFamily(
            "agentchat_gc_threshold",
            "The collector's thresholds (gc.get_threshold()), by generation.",
            labels=["generation"],
        )
        for generation, value in enumerate(gc.get_threshold()):
            thresholds.add_metric([str(generation)], value)
        yield thresholds
