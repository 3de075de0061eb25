"""Every 503 ``storage_unavailable`` a request's admission read answers is counted,
by the check refused (``agentchat_admission_storage_refusals_total{check}``).

Before its client has a run id, a request's reads share one storage budget
(``app/server/storage_budget.bounded``); past it the budget's backstop cancels the read
and the request is answered 503. A read cancelled never failed in the store, so the
refusal showed in no metric - only the bucket check's was counted (a32ffeb), in the
knowledge base's bucket-list failures. Here every reader connection of the real SQLite
storage is held (long reads elsewhere), so each read waits past the budget."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from tests.conftest import running_app
from tests.support.sqlite_lock import sqlite_file_locked
from tests.test_compat_faces_owners import env

REFUSALS = "agentchat_admission_storage_refusals_total"
CHECKS = (
    "bucket_list",
    "run_limit",
    "waiting_run",
    "conversation",
    "answered_turns",
    "transcript_import",
    "history_cut",
    "run_admission",
)


def refusals(metrics: str) -> dict[str, float]:
    found = re.findall(rf'^{REFUSALS}{{check="([a-z_]+)"}} (\S+)$', metrics, re.MULTILINE)
    return {check: float(value) for check, value in found}


@contextlib.asynccontextmanager
async def readers_held(app: Any) -> AsyncIterator[None]:
    """Each reader connection of the app's SQLite storage lent to a long read."""
    db = app.state.services.storage.db
    async with contextlib.AsyncExitStack() as held:
        for _ in range(db.opts.readers):
            await held.enter_async_context(db.reading())
        yield


async def test_the_openai_faces_reads_cut_by_the_budget_are_counted_by_check(tmp_path: Path) -> None:
    settings = Settings.from_env({**env(tmp_path), "AGENT_AUTH": "none", "AGENT_DB_POOL_TIMEOUT_S": "0.3"})
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        before = refusals((await http.get("/metrics")).text)
        assert before == dict.fromkeys(CHECKS, 0.0), before

        turns = [
            {"role": "user", "content": "What is a bucket?"},
            {"role": "assistant", "content": "A bucket is a named part of the knowledge base."},
            {"role": "user", "content": "How do I make one?"},
        ]
        async with readers_held(app):
            # A transcript with an earlier answer: was it ours (the user's runs read)?
            chained = await http.post("/v1/chat/completions", json={"model": "agentchat-knowledge", "messages": turns})
            # A conversation named: does the user have it?
            named = await http.post(
                "/v1/chat/completions",
                json={"model": "agentchat-knowledge", "messages": turns[-1:]},
                headers={"X-Conversation-Id": "conv_counted"},
            )
        for refused in (chained, named):
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "5"
        after = refusals((await http.get("/metrics")).text)
        assert after == {**dict.fromkeys(CHECKS, 0.0), "answered_turns": 1.0, "conversation": 1.0}, after


async def test_a_bucket_check_cut_by_the_budget_is_counted_as_its_check(tmp_path: Path) -> None:
    settings = Settings.from_env({**env(tmp_path), "AGENT_AUTH": "none", "AGENT_DB_POOL_TIMEOUT_S": "0.3"})
    async with running_app(settings) as (base, app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        body = {"message": "What is a bucket?", "context_type": "knowledge", "context": {"buckets": ["nope"]}}
        async with readers_held(app):
            refused = await http.post("/v1/agent/runs", json=body)
        assert refused.status_code == 503 and refused.json()["error"] == "storage_unavailable", refused.text
        after = refusals((await http.get("/metrics")).text)
        assert after == {**dict.fromkeys(CHECKS, 0.0), "bucket_list": 1.0}, after


async def test_a_run_admission_write_refused_by_a_locked_file_is_counted(tmp_path: Path) -> None:
    """Another process holds the file's write lock: the run's admission write is retried
    until the budget is spent, then refused - counted as ``run_admission``."""
    settings = Settings.from_env({**env(tmp_path), "AGENT_AUTH": "none", "AGENT_DB_POOL_TIMEOUT_S": "0.5"})
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=30) as http:
        async with sqlite_file_locked(settings.db_path):
            refused = await http.post("/v1/agent/runs", json={"message": "hi", "context_type": "knowledge"})
        assert refused.status_code == 503 and refused.json()["error"] == "storage_unavailable", refused.text
        after = refusals((await http.get("/metrics")).text)
        assert after == {**dict.fromkeys(CHECKS, 0.0), "run_admission": 1.0}, after
