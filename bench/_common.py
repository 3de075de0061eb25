"""Small helpers shared by the benchmarks: percentiles, RSS, results files, repo path."""

from __future__ import annotations

import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": round(pct(values, 50), 4),
        "p95": round(pct(values, 95), 4),
        "p99": round(pct(values, 99), 4),
        "mean": round(statistics.fmean(values), 4) if values else float("nan"),
    }


def rss_kb(pid: int | None = None) -> int:
    """Resident set size in KiB (Linux /proc)."""
    path = f"/proc/{pid or os.getpid()}/status"
    with open(path) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def write_results(name: str, payload: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>.json``; a ``name`` that is a path (it holds a ``/`` or
    ends in ``.json``: what a ``--out`` is often given) is written there instead."""
    path = Path(name) if "/" in name or name.endswith(".json") else RESULTS / f"{name}.json"
    name = path.stem
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()},
        **payload,
    }
    path.write_bytes(orjson.dumps(payload, option=orjson.OPT_INDENT_2))
    return path


# --- helpers of the load benchmarks (capacity, scaleout, langgraph_peer) ----------------------------


def tree_rss_kb(pid: int) -> int:
    """RSS of ``pid`` and every descendant, in KiB (a server that forks workers)."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            total += rss_kb(current)
            with open(f"/proc/{current}/task/{current}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def raise_fd_limit() -> int:
    """Lift the soft limit on open files to the hard one (a thousand sockets per process)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def histogram_totals(metrics_text: str, name: str) -> dict[str, dict[str, float]]:
    """``{label_values: {"count": n, "sum": s}}`` of a Prometheus histogram in ``/metrics`` text."""
    out: dict[str, dict[str, float]] = {}
    for line in metrics_text.splitlines():
        for part in ("count", "sum"):
            prefix = f"{name}_{part}"
            if line.startswith(prefix) and line[len(prefix) : len(prefix) + 1] in ("{", " "):
                labels, _, value = line[len(prefix) :].rpartition(" ")
                key = labels.strip("{} ") or "all"
                out.setdefault(key, {"count": 0.0, "sum": 0.0})[part] = float(value)
    return out


def ms(values_s: list[float]) -> dict[str, float]:
    """``summary`` of seconds, in milliseconds."""
    return summary([v * 1000 for v in values_s])


def cpu_s(pid: int, thread: int | None = None) -> float:
    """User + system CPU seconds of ``pid`` (or of its thread ``thread``) so far (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/task/{thread}/stat" if thread is not None else f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and every live descendant (a server that forks
    workers), so far."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        total += cpu_s(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total
