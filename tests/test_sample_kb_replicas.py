"""Replicas started together on one fresh PostgreSQL database all become ready.

Every replica ingests the sample knowledge base at start-up. Before they took turns, two
replicas started at once both found the ``default`` bucket empty and both wrote the
sample's documents; the second's transaction failed on ``kb_chunks_doc_position``
(``UniqueViolation``), and that replica stayed "not ready" for good (``/readyz`` 503
``sample_kb: failed: UniqueViolation``), dropped by every readiness probe.

- three real ``agentchat serve`` processes on one fresh (empty, not even migrated)
  database, started at once: every one becomes ready, exactly one ingested the sample
  and the others found it there; repeated on a second fresh database;
- deterministically, in one process: two knowledge bases on two connection pools of one
  database; the first is held inside its sample write, and the second must wait for it
  (``/readyz`` says so) instead of writing the same documents beside it;
- a failed sample ingest is tried again with a growing pause, and ``/readyz`` says so
  meanwhile (failed, the next attempt, its error), then ready once it went through.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.postgres import TestPostgres
from tests.support.procs import AgentServer, until

REPLICAS = 3
ROUNDS = 2


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    return pg_server


def _env(url: str) -> dict[str, str]:
    return {
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "hashing",
        "OLLAMA_HOST": "http://127.0.0.1:9",
        "AGENT_DB_WRITE_RETRY_S": "1",
    }


def _knowledge(body: dict[str, Any] | None) -> dict[str, Any]:
    return dict(((body or {}).get("checks") or {}).get("knowledge") or {})


@pytest.mark.timeout(600)
async def test_replicas_started_together_on_a_fresh_database_all_become_ready(tmp_path: Path, pg: TestPostgres) -> None:
    for round_ in range(ROUNDS):
        with pg.database(empty=True) as url:
            work = tmp_path / f"round-{round_}"
            work.mkdir()
            servers = [AgentServer(work, _env(url), name=f"r{round_}-{i}") for i in range(REPLICAS)]
            for server in servers:
                server.start()
            try:
                bodies = await asyncio.gather(*(s.wait_ready(timeout=180) for s in servers))
                states = [str(_knowledge(b).get("sample_kb")) for b in bodies]
                ingested = [s for s in states if s.startswith("ingested")]
                assert len(ingested) == 1, states
                assert all(s.startswith("already there") for s in states if not s.startswith("ingested")), states
                for server in servers:
                    assert not server.grep("UniqueViolation", "sample knowledge base ingestion failed"), server.tail()
            finally:
                for server in servers:
                    await server.kill()
                    server.close()
            shutil.rmtree(work, ignore_errors=True)


class _HeldWrites:
    """A KB index whose document writes wait for ``release`` (after saying so), or fail
    the first ``failures`` times: everything else is the real index's."""

    def __init__(self, index: Any, *, hold: bool = False, failures: int = 0) -> None:
        self._index = index
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        if not hold:
            self.release.set()
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._index, name)

    async def write_documents(self, bucket: str, fields: Any, docs: Sequence[Any]) -> Any:
        self.reached.set()
        if self.failures:
            self.failures -= 1
            raise ConnectionError("the database did not answer (a transient failure)")
        await self.release.wait()
        return await self._index.write_documents(bucket, fields, docs)


async def _component(storage: Any, index: Any, **options: Any) -> Any:
    from app.knowledge_component import KnowledgeComponent, sample_turns
    from knowledge.kb import KnowledgeBase

    kb = await KnowledgeBase.create(index, None, schema_version=storage.schema_version)
    return KnowledgeComponent(kb, turns=sample_turns(storage), turn_poll_s=0.02, **options)


@asynccontextmanager
async def _opened(url: str) -> AsyncIterator[Any]:
    from storage.postgres import open_postgres_storage

    storage = await open_postgres_storage(url)
    try:
        yield storage
    finally:
        await storage.close()


async def test_a_second_process_waits_for_the_first_ones_sample_ingest(pg: TestPostgres) -> None:
    """Deterministic: A is held inside its write of the sample; B, on its own pool of the
    same database, must wait its turn (and say so) rather than write the same documents."""
    from app.knowledge_component import SAMPLE_WAITING

    with pg.database() as url:
        async with _opened(url) as storage_a, _opened(url) as storage_b:
            held = _HeldWrites(storage_a.kb_index, hold=True)
            a = await _component(storage_a, held)
            b = await _component(storage_b, storage_b.kb_index)
            task_a = asyncio.create_task(a.ingest_sample())
            task_b: asyncio.Task[None] | None = None
            try:
                await until(lambda: held.reached.is_set(), "A inside its write of the sample", timeout=60)
                task_b = asyncio.create_task(b.ingest_sample())
                await until(
                    lambda: b.sample == SAMPLE_WAITING or task_b.done(), "B waiting for its turn (or done)", timeout=60
                )
                assert b.sample == SAMPLE_WAITING, f"B did not wait for A's ingest: {b.sample}"
                waiting = await b.readiness()
                assert waiting["ok"] is False and waiting["sample_kb"] == SAMPLE_WAITING, waiting
                held.release.set()
                await asyncio.wait_for(asyncio.gather(task_a, task_b), 120)
            finally:
                held.release.set()
                for task in (task_a, task_b):
                    if task is not None and not task.done():
                        task.cancel()
                await a.kb.aclose()
                await b.kb.aclose()
            assert a.sample.startswith("ingested "), a.sample
            assert b.sample.startswith("already there"), b.sample
            assert (await a.readiness())["ok"] and (await b.readiness())["ok"]


async def test_a_turn_held_by_a_hung_process_is_waited_for_only_so_long(pg: TestPostgres) -> None:
    """A holder that hangs while alive (SIGSTOP, a stuck loop) keeps its session and the
    lock: past ``turn_wait_max_s`` the waiting process ingests without the turn instead
    of staying unready for ever (review: a replica waited 45 s and more, 503)."""
    from app.knowledge_component import SAMPLE_LOCK, SAMPLE_WAITING
    from storage.postgres.leader_lock import AdvisoryLeaderLock

    with pg.database() as url:
        hung = AdvisoryLeaderLock(url, key=SAMPLE_LOCK, application_name="hung-replica")
        assert await hung.try_acquire()
        try:
            async with _opened(url) as storage:
                component = await _component(storage, storage.kb_index, turn_wait_max_s=0.5)
                seen: list[str] = []
                task = asyncio.create_task(component.ingest_sample())
                try:
                    await until(lambda: component.sample == SAMPLE_WAITING or task.done(), "waiting", timeout=60)
                    seen.append(component.sample)
                    await asyncio.wait_for(task, 120)
                finally:
                    if not task.done():
                        task.cancel()
                    await component.kb.aclose()
                assert seen == [SAMPLE_WAITING], seen  # it did wait its turn first
                assert component.sample.startswith("ingested "), component.sample
                assert (await component.readiness())["ok"]
        finally:
            await hung.release()


async def test_a_failed_sample_ingest_is_tried_again_and_readyz_says_so(tmp_path: Path) -> None:
    from storage.sqlite import open_sqlite_storage

    storage = await open_sqlite_storage(tmp_path / "kb.sqlite3")
    failing = _HeldWrites(storage.kb_index, failures=2)
    pauses: list[tuple[float, dict[str, Any]]] = []
    component: Any = None

    async def pause(seconds: float) -> None:
        pauses.append((seconds, await component.readiness()))

    try:
        component = await _component(storage, failing, pause=pause)
        await asyncio.wait_for(component.ingest_sample(), 120)
        assert [s for s, _ in pauses] == [2, 4], pauses  # doubled after each failure
        for attempt, (seconds, ready) in enumerate(pauses, start=1):
            assert ready["ok"] is False, ready
            assert ready["sample_kb"].startswith(f"failed (attempt {attempt}, trying again in {seconds:g} s): "), ready
            assert "ConnectionError: the database did not answer" in ready["sample_kb"], ready
        final = await component.readiness()
        assert final["ok"] is True and final["sample_kb"].startswith("ingested "), final
    finally:
        if component is not None:
            await component.kb.aclose()
        await storage.close()
