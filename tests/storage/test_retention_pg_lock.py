"""Retention on PostgreSQL is one replica at a time: while another session holds the
retention advisory lock, a pass does nothing and says so (``ran`` False, counted as
``skipped``); once it is free, the pass compacts."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
import psycopg
import pytest
from prometheus_client import CollectorRegistry

from app.ops.history_metrics import HistoryMetrics
from app.retention import RetentionPolicy, retention_pass
from storage.postgres import open_postgres_storage
from storage.records import NewRun, RunEvent, RunWrite
from storage.stores.retention import RETENTION_LOCK
from tests.support.postgres import TestPostgres


@pytest.fixture
async def pg(pg_server: TestPostgres) -> AsyncIterator[tuple[str, Any]]:
    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        try:
            yield url, storage
        finally:
            await storage.close()


async def test_a_pass_skips_while_another_replica_holds_the_lock(pg: tuple[str, Any]) -> None:
    url, s = pg
    await s.runs.create(NewRun("r", "c", "alice", "workflow", orjson.dumps({"message": "hi"})))
    chunks = [RunEvent(i, "content_chunk", orjson.dumps({"chunk": f"{i} "}).decode()) for i in range(1, 6)]
    await s.runs.commit(RunWrite("r", "c", "alice", events=chunks, status="completed", finished=True))
    policy = RetentionPolicy(run_events_days=0.000001)
    metrics = HistoryMetrics(CollectorRegistry())
    later = time.time() + 60
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
        await other.execute("SELECT pg_advisory_lock(%s)", (RETENTION_LOCK,))
        skipped = await retention_pass(s.retention, s.history, policy, now=later, metrics=metrics)
        assert not skipped.ran and skipped.runs_compacted == 0
        assert len(await s.runs.events_after("r", 0)) == 5
        await other.execute("SELECT pg_advisory_unlock(%s)", (RETENTION_LOCK,))
    done = await retention_pass(s.retention, s.history, policy, now=later, metrics=metrics)
    assert done.ran and done.runs_compacted == 1 and done.events_removed == 4
    replay = await s.runs.events_after("r", 0)
    assert [(e.seq, orjson.loads(e.data)["chunk"]) for e in replay] == [(5, "1 2 3 4 5 ")]
    assert metrics.retention_passes.labels(outcome="skipped")._value.get() == 1
    assert metrics.retention_passes.labels(outcome="done")._value.get() == 1
