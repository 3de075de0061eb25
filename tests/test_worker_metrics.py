"""``/metrics`` merged over the workers of one port (``app/ops/worker_metrics.py``).

Two workers' real expositions (prometheus_client registries) are merged and read back with
Prometheus' own parser: counters and histograms are the sums, gauges stay per worker
(``worker`` label). Through real processes (``--workers 2``) in
``tests/test_workers_feed.py``: every scrape, whichever worker answers, counts the runs
started on both.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.ops.worker_metrics import merge


def exposition(runs: int, live: int, durations: list[float]) -> bytes:
    registry = CollectorRegistry()
    started = Counter("agentchat_runs_started", "Runs started.", ["context"], registry=registry)
    started.labels("knowledge").inc(runs)
    Gauge("agentchat_live_runs", "Runs live now.", registry=registry).set(live)
    hist = Histogram("agentchat_run_duration_seconds", "Run durations.", buckets=(1, 10), registry=registry)
    for d in durations:
        hist.observe(d)
    return generate_latest(registry)


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text.decode())
        for s in fam.samples
    }


def test_counters_and_histograms_add_up_and_gauges_stay_per_worker() -> None:
    merged = samples(
        merge(
            [
                ("vm:1:a", exposition(3, 2, [0.5, 5])),
                ("vm:2:b", exposition(4, 7, [20])),
            ],
            missing=1,
        )
    )
    assert merged[("agentchat_runs_started_total", (("context", "knowledge"),))] == 7
    assert merged[("agentchat_run_duration_seconds_bucket", (("le", "1.0"),))] == 1
    assert merged[("agentchat_run_duration_seconds_bucket", (("le", "10.0"),))] == 2
    assert merged[("agentchat_run_duration_seconds_bucket", (("le", "+Inf"),))] == 3
    assert merged[("agentchat_run_duration_seconds_count", ())] == 3
    assert merged[("agentchat_run_duration_seconds_sum", ())] == 25.5
    assert merged[("agentchat_live_runs", (("worker", "vm:1:a"),))] == 2
    assert merged[("agentchat_live_runs", (("worker", "vm:2:b"),))] == 7
    assert ("agentchat_live_runs", ()) not in merged
    assert merged[("agentchat_metrics_workers", ())] == 2
    assert merged[("agentchat_metrics_workers_missing", ())] == 1
