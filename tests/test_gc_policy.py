"""The serving GC policy (``app/cli/gcpolicy.py``) is in force in a served process.

``agentchat serve`` freezes what start-up allocated (``gc.freeze()``) once uvicorn
accepts connections, so collections — a full one stalls every live stream — never walk
the modules, the app and its services again, and raises the young-generation threshold.
Read from the server's own ``/metrics`` (``agentchat_gc_frozen_objects``,
``agentchat_gc_threshold``), of one process and of each ``--workers`` child. Every
command runs its imports under that young-generation threshold already.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.cli.gcpolicy import DEFAULT_YOUNG_THRESHOLD
from tests.support.procs import OFFLINE_SERVE_ENV, REPO, AgentServer, child_env

pytestmark = pytest.mark.slow

#: Nothing listens here: the default model provider is never reached by these tests.
UNREACHABLE = "http://127.0.0.1:9"


def gc_samples(body: str) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """``({worker: frozen objects}, {(worker, generation): threshold})``; ``worker`` is
    ``""`` for a single process."""
    frozen: dict[str, float] = {}
    thresholds: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            worker = sample.labels.get("worker", "")
            if sample.name == "agentchat_gc_frozen_objects":
                frozen[worker] = sample.value
            elif sample.name == "agentchat_gc_threshold":
                thresholds[(worker, sample.labels["generation"])] = sample.value
    return frozen, thresholds


async def scrape_until_frozen(
    server: AgentServer, workers: int, timeout_s: float = 60
) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """``/metrics`` until ``workers`` processes report frozen objects: the policy is
    applied just after uvicorn starts accepting, so the first scrape may precede it.
    ``timeout_s`` only guards against a hang."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=10) as http:
        while True:
            response = await http.get(f"{server.base}/metrics")
            assert response.status_code == 200
            frozen, thresholds = gc_samples(response.text)
            if sum(1 for n in frozen.values() if n > 0) >= workers:
                return frozen, thresholds
            if time.monotonic() > deadline:
                pytest.fail(f"no frozen objects reported by {workers} process(es):\n{response.text[-3000:]}")
            await asyncio.sleep(0.05)


async def test_a_served_process_has_frozen_its_start_up_objects(tmp_path: Path) -> None:
    server = AgentServer(tmp_path, {"OLLAMA_HOST": UNREACHABLE}, name="gc-policy")
    server.start()
    try:
        await server.wait_healthy()
        frozen, thresholds = await scrape_until_frozen(server, 1)
    finally:
        server.close()
    # The whole start-up (imports, the app, its services) is tens of thousands of objects.
    assert frozen[""] > 10_000
    assert thresholds[("", "0")] == DEFAULT_YOUNG_THRESHOLD


async def test_the_freeze_follows_no_full_collection(tmp_path: Path) -> None:
    """Before its freeze a serve collects the young generation only: a full collection
    walked every object its start made (~40 ms of CPU) to free a few dozen. With the
    threshold raised from the first line (``tune_for_start``) no full collection runs at
    start at all: prometheus_client's ``python_gc_collections_total{generation="2"}``
    is 0 once the start-up objects are frozen (1 before: the policy's own)."""
    env = {**OFFLINE_SERVE_ENV, "AGENT_AUTH": "none"}
    server = AgentServer(tmp_path, env, name="gc-policy-young")
    server.start()
    try:
        await server.wait_healthy()
        frozen, _ = await scrape_until_frozen(server, 1)
        async with httpx.AsyncClient(timeout=10) as http:
            body = (await http.get(f"{server.base}/metrics")).text
    finally:
        server.close()
    assert frozen[""] > 10_000
    full = [s.value for f in text_string_to_metric_families(body) for s in f.samples
            if s.name == "python_gc_collections_total" and s.labels.get("generation") == "2"]  # fmt: skip
    assert full == [0.0], full


async def test_every_worker_applies_the_policy(tmp_path: Path) -> None:
    env = {"AGENT_WORKERS": "2", "OLLAMA_HOST": UNREACHABLE}
    server = AgentServer(tmp_path, env, name="gc-policy-workers")
    server.start()
    try:
        await server.wait_healthy()
        frozen, thresholds = await scrape_until_frozen(server, 2)
    finally:
        server.close()
    assert len(frozen) == 2 and all(n > 10_000 for n in frozen.values()), frozen
    assert {thresholds[(worker, "0")] for worker in frozen} == {DEFAULT_YOUNG_THRESHOLD}


def test_every_command_imports_under_the_serving_young_threshold(tmp_path: Path) -> None:
    """``agentchat`` raises the young-generation threshold on its first line, before its
    imports (``tune_for_start``): what a start creates lives as long as the process, and
    CPython's default threshold (700) ran ~90 collections during ``agentchat buckets``
    (~165 during a serve's start, ~40 ms of its CPU) that freed almost nothing. The
    process here is a real ``agentchat buckets`` (its ``main`` run by ``python -c`` so
    it can report its collector on the way out), on a database not made yet: it imports
    all it would use, then says there is nothing to list."""
    code = (
        "import atexit, gc, json, sys\n"
        "atexit.register(lambda: print('gc ' + json.dumps([gc.get_threshold()[0], gc.get_stats()[0]['collections']]),"
        " flush=True))\n"
        "from app.cli import main\n"
        "raise SystemExit(main(['buckets']))\n"
    )
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 1 and "no database yet" in out.stderr, out.stderr  # after its imports, before any work
    threshold, young_collections = json.loads(out.stdout.rsplit("gc ", 1)[1])
    assert threshold == DEFAULT_YOUNG_THRESHOLD
    # 700 -> 20,000 allocations between young collections: ~90 become a few dozen at most.
    assert young_collections < 50, young_collections
