"""An ingest keeps ``KBIndex.writes_in_flight`` batch writes running at once while it
prepares the next batch (``knowledge.ingest_stages.BatchWrites``): three on PostgreSQL,
each on a pooled connection of its own, two on SQLite, whose one writer takes them in turn.

Why: with two, a PostgreSQL bulk load's rows phase left CPU unused (``bench/ingest_ab.py``:
the rows 12 % shorter with three at the same server CPU, ``ingest_pg_s42_writes3_40k.json``).

How it is seen: the real index's ``write_documents`` is wrapped to count the writes
running at once; each one after the first (which runs alone by design) waits until the
engine's count of writes runs (or a guard has passed), so the count reaches what the
ingest allows whatever the machine's speed, and shows it if the ingest allows more.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from knowledge.kb import KBConfig, KnowledgeBase
from storage.interfaces import KBIndex
from storage.kb_records import KBDocumentWrite
from tests.support.postgres import TestPostgres
from tests.support.storage import opened_storage

#: How long a write waits for the others to start beside it (a guard: they start within
#: milliseconds when the bound allows it; when it does not, the wait ends and the count
#: says so).
GUARD_S = 5.0
#: Batches of two one-chunk documents: one write each.
BATCHES = 14


async def _most_at_once(index: KBIndex) -> int:
    """Ingest ``BATCHES`` batches; the most writes that ran at once."""
    kb = await KnowledgeBase.create(index, None, config=KBConfig(batch_documents=2))
    real_write = index.write_documents
    bound = index.writes_in_flight
    changed = asyncio.Condition()
    running = most = started = 0

    async def write_documents(bucket: str, fields: Any, docs: Sequence[KBDocumentWrite]) -> list[list[int]]:
        nonlocal running, most, started
        async with changed:
            running += 1
            started += 1
            most = max(most, running)
            changed.notify_all()
            if started > 1:  # the first write runs alone by design
                # Held until the bound is reached (or every write has started), so the
                # count reaches what the ingest allows whatever the machine's speed.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(changed.wait_for(lambda: running >= bound or started == BATCHES), GUARD_S)
        try:
            return await real_write(bucket, fields, docs)
        finally:
            async with changed:
                running -= 1

    index.write_documents = write_documents  # type: ignore[method-assign]
    try:
        docs = [{"id": f"d{i}", "text": f"document {i} about writes in flight"} for i in range(2 * BATCHES)]
        report = await kb.ingest_documents(docs)
    finally:
        await kb.aclose()
    assert report.added == 2 * BATCHES and report.rejected == []
    assert started == BATCHES
    return most


async def test_sqlite_keeps_two_writes_in_flight(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "agent.db") as storage:
        assert storage.kb_index.writes_in_flight == 2
        assert await _most_at_once(storage.kb_index) == 2


@pytest.mark.postgres
async def test_postgres_keeps_three_writes_in_flight(pg_server: TestPostgres) -> None:
    from storage.postgres import open_postgres_storage

    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        try:
            assert storage.kb_index.writes_in_flight == 3
            assert await _most_at_once(storage.kb_index) == 3
        finally:
            await storage.close()
