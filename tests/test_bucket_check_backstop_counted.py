"""A run whose context names a bucket the cache does not know rereads the bucket list
within the request's storage budget (``app/server/context_scope.py``), and past it the
budget's backstop (``storage_budget.bounded``) cancels the read and answers 503
``storage_unavailable``. That refusal went uncounted: the knowledge base counts the
bucket list's failed reads (``agentchat_kb_bucket_list_failures_total``), but a read
cancelled never failed there. Here every reader connection of the real SQLite storage
is held (long reads elsewhere), so the reread waits for one past the budget."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx

from app.config import Settings
from tests.conftest import running_app
from tests.test_compat_faces_owners import env

FAILURES = "agentchat_kb_bucket_list_failures_total"


def counted(metrics: str) -> float:
    [line] = [ln for ln in metrics.splitlines() if ln.startswith(FAILURES + " ")]
    return float(line.split()[1])


async def test_a_bucket_check_cut_by_the_budget_is_counted(tmp_path: Path) -> None:
    settings = Settings.from_env({**env(tmp_path), "AGENT_AUTH": "none", "AGENT_DB_POOL_TIMEOUT_S": "0.3"})
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        db = app.state.services.storage.db
        body = {"message": "What is a bucket?", "context_type": "knowledge", "context": {"buckets": ["nope"]}}
        unknown = await http.post("/v1/agent/runs", json=body)
        assert unknown.status_code == 400 and unknown.json()["error"] == "unknown_bucket", unknown.text
        assert counted((await http.get("/metrics")).text) == 0

        async with contextlib.AsyncExitStack() as held:
            for _ in range(db.opts.readers):  # each one lent to a long read
                await held.enter_async_context(db.reading())
            refused = await http.post("/v1/agent/runs", json=body)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"] == "storage_unavailable" and refused.headers["retry-after"] == "5"
        assert counted((await http.get("/metrics")).text) == 1
