"""Bucket graphs built without holding knowledge-base writers (``storage/postgres/kb_graph_builds.py``).

Every build is ``CREATE INDEX CONCURRENTLY`` on a connection of its own, in the
background: the repair after open, and after the commit of a write that took a bucket
past the threshold. The tests make a build wait in a known phase without timing
anything: another session keeps a write transaction open (``LOCK TABLE kb_chunks IN ROW
EXCLUSIVE MODE``, the lock every insert takes), which a concurrent build waits for
before it builds ("waiting for writers before build") and which a plain ``CREATE INDEX``
(SHARE) would wait for too — queueing every later writer behind itself, which is what the
first test shows does not happen any more. While a graph is being built, or left
invalid by a cancelled build, the bucket is searched exactly: the same top lists.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from knowledge.buckets import typed_values
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.kb_graph_queue import APPLICATION_NAME
from storage.postgres.kb_graphs import graph_ddl, graph_name, graph_state
from tests.support.postgres import TestPostgres
from tests.support.readyz_counts import current

DIM = 12
THRESHOLD = 50


@pytest.fixture
async def storage(pg_server: TestPostgres) -> AsyncIterator[PostgresStorage]:
    with pg_server.database() as url:
        opened = await open_postgres_storage(url)
        assert await asyncio.wait_for(opened.kb_index.graph_repair(), 60) == []
        opened.kb_index.exact_scope_vectors = THRESHOLD
        try:
            yield opened
        finally:
            await asyncio.wait_for(opened.close(), 60)


@pytest.fixture
async def observer(storage: PostgresStorage) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """A session that watches the catalog and the other sessions (autocommit)."""
    conn = await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True, connect_timeout=10)
    try:
        yield conn
    finally:
        await conn.close()


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


def _doc(doc_id: str, vectors: np.ndarray) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id, title=doc_id, source=f"{doc_id}.md", url=None, content_hash=doc_id, metadata={}, chars=10,
        chunks=[KBChunkWrite(i, "", f"chunk {i} of {doc_id}") for i in range(len(vectors))],
        vectors=vectors.astype(np.float32), embed_model="m", embed_dim=int(vectors.shape[1]), typed=(),
    )  # fmt: skip


async def _write(
    storage: PostgresStorage, bucket: str, prefix: str, matrix: np.ndarray, *, per_doc: int = 1
) -> list[int]:
    """Documents of ``per_doc`` chunks (the bucket made first if new); the chunk ids in
    matrix order. Returns as the write does: graph builds it queued may still run."""
    if await storage.db.fetchone("SELECT 1 FROM kb_buckets WHERE name = %s", (bucket,)) is None:
        await storage.kb_index.create_bucket(bucket, {}, typed_row=typed_values)
    docs = [_doc(f"{prefix}{i}", matrix[i : i + per_doc]) for i in range(0, len(matrix), per_doc)]
    ids = await asyncio.wait_for(storage.kb_index.write_documents(bucket, {}, docs), 30)
    return [c for d in ids for c in d]


def _exact(ids: list[int], matrix: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    sims = matrix @ query
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))[:k]]


async def _until(what: str, probe: Callable[[], Awaitable[object]], timeout: float = 30.0) -> None:
    """Wait for ``probe`` to hold, failing the test with ``what`` past ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await probe():
        if loop.time() > deadline:
            pytest.fail(f"gave up after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


async def _lock_waiters(conn: psycopg.AsyncConnection[tuple[object, ...]], application: str) -> list[str]:
    """The create-index phase of each session of ``application`` in this database that
    waits for a lock now ("" when it reports no progress)."""
    cur = await conn.execute(
        "SELECT coalesce(p.phase, '') FROM pg_stat_activity a"
        " LEFT JOIN pg_stat_progress_create_index p ON p.pid = a.pid"
        " WHERE a.application_name = %s AND a.datname = current_database() AND a.wait_event_type = 'Lock'",
        (application,),
    )
    return [str(r[0]) for r in await cur.fetchall()]


async def _sessions(conn: psycopg.AsyncConnection[tuple[object, ...]], application: str) -> int:
    cur = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
        (application,),
    )
    return len(await cur.fetchall())


async def _state(conn: psycopg.AsyncConnection[tuple[object, ...]], bucket: str) -> bool | None:
    return await graph_state(conn, DIM, bucket)  # type: ignore[arg-type]


async def _open_write(url: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """Another session in the middle of a write transaction on ``kb_chunks``."""
    conn = await psycopg.AsyncConnection.connect(url, connect_timeout=10, application_name="test-open-write")
    await conn.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
    return conn


async def _graph_used(storage: PostgresStorage, bucket: str) -> bool:
    parts = await storage.kb_index._vectors.parts(KBScope(bucket), "m", DIM, 10)
    return any(p.graph == bucket for p in parts)


async def test_a_writer_is_not_held_while_a_graph_builds(
    storage: PostgresStorage, observer: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    """The repair's build waits for a write transaction another session keeps open; a
    new KB write into the same bucket commits meanwhile (with the plain ``CREATE INDEX``
    of before, queued for its SHARE lock, this write waited behind it and failed on the
    pool's lock timeout), and searches of the bucket stay exact until the graph is valid."""
    kb = storage.kb_index
    rng = np.random.default_rng(21)
    matrix = _unit(rng.normal(size=(THRESHOLD + 30, DIM)))
    ids = await _write(storage, "big", "g", matrix)
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    assert await _state(observer, "big") is True
    await storage.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])  # as an upgrade leaves it
    kb._stats_changed()
    queries = [_unit(v) for v in rng.normal(size=(4, DIM))]
    holder = await _open_write(storage.db.url)
    try:
        kb.start_graph_repair(10)
        await _until("the graph build to wait for the open write", lambda: _lock_waiters(observer, APPLICATION_NAME))
        assert await _lock_waiters(observer, APPLICATION_NAME) == ["waiting for writers before build"]
        late = _unit(rng.normal(size=(3, DIM)))
        late_ids = await _write(storage, "big", "late", late, per_doc=3)  # one document of three chunks
        # Committed while the build still waits, its graph in the catalog but not valid.
        row = await (await observer.execute("SELECT count(*) FROM kb_chunks WHERE doc_id = 'late0'")).fetchone()
        assert row == (3,)
        assert await _lock_waiters(observer, APPLICATION_NAME) == ["waiting for writers before build"]
        assert await _state(observer, "big") is False
        status = await kb.vector_index_status()
        assert status["buckets_building_graph"] == ["big"] and status["buckets_without_graph"] == ["big"]
        assert status["buckets_with_invalid_graph"] == []
        assert not await _graph_used(storage, "big")
        every, every_m = ids + late_ids, np.vstack([matrix, late])
        exact_lists = []
        for q in queries:
            got = await kb.vector_candidates(q, "m", KBScope("big"), 10)
            assert got.ids == _exact(every, every_m, q, 10)
            exact_lists.append(got.ids)
    finally:
        await holder.rollback()
        await holder.close()
    assert await asyncio.wait_for(kb.graph_repair(), 60) == [(DIM, "big")]
    assert await _state(observer, "big") is True
    assert await _graph_used(storage, "big")
    assert [(await kb.vector_candidates(q, "m", KBScope("big"), 10)).ids for q in queries] == exact_lists
    status = await kb.vector_index_status()
    assert status["buckets_without_graph"] == [] and status["buckets_building_graph"] == []


async def test_the_write_that_takes_a_bucket_past_the_threshold_returns_before_its_graph_exists(
    storage: PostgresStorage,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The graph is built after the write's commit, in the background: the write returns
    while the build still waits (for another session's open write, so the order is
    certain), the bucket is searched exactly meanwhile, and once the graph appears the
    search, through it, answers the same top lists."""
    caplog.set_level(logging.INFO, logger="agentchat.storage")
    kb = storage.kb_index
    rng = np.random.default_rng(22)
    first = _unit(rng.normal(size=(THRESHOLD - 10, DIM)))
    ids = await _write(storage, "big", "a", first)
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    assert await _state(observer, "big") is None  # under the threshold
    second = _unit(rng.normal(size=(30, DIM)))
    holder = await _open_write(storage.db.url)
    try:
        ids += await _write(storage, "big", "b", second, per_doc=3)  # past the threshold; returns
        assert await _state(observer, "big") is not True
        await _until("the graph build to start", lambda: _lock_waiters(observer, APPLICATION_NAME))
        assert await _state(observer, "big") is False
        every = np.vstack([first, second])
        queries = [_unit(v) for v in rng.normal(size=(5, DIM))]
        assert not await _graph_used(storage, "big")
        exact_lists = [(await kb.vector_candidates(q, "m", KBScope("big"), 10)).ids for q in queries]
        assert exact_lists == [_exact(ids, every, q, 10) for q in queries]
    finally:
        await holder.rollback()
        await holder.close()
    await _until("the search to use the bucket's new graph", lambda: _graph_used(storage, "big"), 60)
    assert await _state(observer, "big") is True
    assert [(await kb.vector_candidates(q, "m", KBScope("big"), 10)).ids for q in queries] == exact_lists
    messages = [r.getMessage() for r in caplog.records]
    assert any("building the graph of bucket 'big'" in m for m in messages), messages
    assert any(m.startswith("knowledge base: built the graph of bucket 'big'") and m.endswith(" s") for m in messages)


async def test_an_invalid_graph_is_ignored_by_the_search_and_replaced_by_the_repair(
    storage: PostgresStorage, observer: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    """A concurrent build cancelled half-way (``pg_cancel_backend``) leaves its index
    INVALID. The search does not count it as the bucket's graph (exact results, listed
    in the status), and the repair drops it and builds the graph again."""
    kb = storage.kb_index
    rng = np.random.default_rng(23)
    matrix = _unit(rng.normal(size=(THRESHOLD + 40, DIM)))
    ids = await _write(storage, "big", "g", matrix)
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    await storage.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])
    await _leave_invalid(storage, observer, "big")
    await _write(storage, "small", "s", _unit(rng.normal(size=(5, DIM))))
    await _leave_invalid(storage, observer, "small")  # a bucket under the threshold: dropped
    kb._stats_changed()
    assert not await _graph_used(storage, "big")
    queries = [_unit(v) for v in rng.normal(size=(4, DIM))]
    exact_lists = [(await kb.vector_candidates(q, "m", KBScope("big"), 10)).ids for q in queries]
    assert exact_lists == [_exact(ids, matrix, q, 10) for q in queries]
    status = await kb.vector_index_status()
    assert status["buckets_with_invalid_graph"] == ["big", "small"] and status["buckets_without_graph"] == ["big"]
    assert status["bucket_graphs"] == 0
    kb.start_graph_repair(10)
    assert await asyncio.wait_for(kb.graph_repair(), 60) == [(DIM, "big")]
    assert await _state(observer, "big") is True
    assert await _state(observer, "small") is None
    assert await _graph_used(storage, "big")
    assert [(await kb.vector_candidates(q, "m", KBScope("big"), 10)).ids for q in queries] == exact_lists
    assert (await kb.vector_index_status())["buckets_with_invalid_graph"] == []


async def _leave_invalid(
    storage: PostgresStorage, observer: psycopg.AsyncConnection[tuple[object, ...]], bucket: str
) -> None:
    """The bucket's graph left INVALID: a concurrent build (by hand) waiting for an open
    write, cancelled with ``pg_cancel_backend``."""
    holder = await _open_write(storage.db.url)
    manual = await psycopg.AsyncConnection.connect(
        storage.db.url, autocommit=True, connect_timeout=10, application_name="test-manual-build"
    )
    try:
        build = asyncio.create_task(manual.execute(graph_ddl(DIM, bucket)))
        await _until("the manual build to wait", lambda: _lock_waiters(observer, "test-manual-build"))
        await observer.execute("SELECT pg_cancel_backend(%s)", (manual.info.backend_pid,))
        with pytest.raises(psycopg.errors.QueryCanceled):
            await asyncio.wait_for(build, 30)
    finally:
        await holder.rollback()
        await holder.close()
        await manual.close()
    assert await _state(observer, bucket) is False  # the leftover


async def test_a_close_cancels_a_build_on_the_server_and_the_next_repair_cleans_its_leftover(
    pg_server: TestPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    from storage.postgres.kb_index import PostgresKBIndex

    rng = np.random.default_rng(24)
    with pg_server.database() as url:
        first = await open_postgres_storage(url)
        try:
            await asyncio.wait_for(first.kb_index.graph_repair(), 60)
            first.kb_index.exact_scope_vectors = THRESHOLD
            await _write(first, "big", "g", _unit(rng.normal(size=(THRESHOLD + 10, DIM))))
            await asyncio.wait_for(first.kb_index.graph_builds_done(), 60)
            await first.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])
        finally:
            await first.close()
        monkeypatch.setattr(PostgresKBIndex.__init__, "__kwdefaults__", {"exact_scope_vectors": THRESHOLD})
        observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        holder = await _open_write(url)
        try:
            second = await open_postgres_storage(url)  # its repair's build waits for the open write
            try:
                await _until("the repair's build to wait", lambda: _lock_waiters(observer, APPLICATION_NAME))
            finally:
                await asyncio.wait_for(second.close(), 30)
            await _until("the build's session to end", lambda: _no_sessions(observer), 30)
            await holder.rollback()
            assert await _state(observer, "big") is False  # the cancelled build's leftover
            third = await open_postgres_storage(url)
            try:
                assert await asyncio.wait_for(third.kb_index.graph_repair(), 60) == [(DIM, "big")]
                assert await _state(observer, "big") is True
            finally:
                await third.close()
        finally:
            await holder.close()
            await observer.close()


async def _no_sessions(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    return await _sessions(conn, APPLICATION_NAME) == 0


async def test_two_replicas_build_a_graph_once_one_at_a_time(
    storage: PostgresStorage, observer: psycopg.AsyncConnection[tuple[object, ...]]
) -> None:
    """Both replicas find the bucket's graph due; one builds it, the other waits for the
    DDL lock (tried and polled: no second build session ever waits on the server) and
    then finds the graph valid: built once."""
    kb = storage.kb_index
    rng = np.random.default_rng(25)
    await _write(storage, "big", "g", _unit(rng.normal(size=(THRESHOLD + 20, DIM))))
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    await storage.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])
    other = await open_postgres_storage(storage.db.url)
    try:
        await asyncio.wait_for(other.kb_index.graph_repair(), 60)
        other.kb_index.exact_scope_vectors = THRESHOLD
        holder = await _open_write(storage.db.url)
        try:
            here = kb._graphs.request(DIM, "big")
            await _until("this replica's build to wait", lambda: _lock_waiters(observer, APPLICATION_NAME))
            there = other.kb_index._graphs.request(DIM, "big")
            await _until(
                "the other replica to try the DDL lock",
                lambda: _tried_lock(observer),
            )
            assert await _lock_waiters(observer, APPLICATION_NAME) == ["waiting for writers before build"]
            cur = await observer.execute(
                "SELECT count(*) FROM pg_stat_progress_create_index WHERE datname = current_database()"
            )
            assert await cur.fetchone() == (1,)
            assert not there.done()
        finally:
            await holder.rollback()
            await holder.close()
        assert await asyncio.wait_for(asyncio.shield(here), 60) is True
        assert await asyncio.wait_for(asyncio.shield(there), 60) is False  # found valid under the lock
        assert await _state(observer, "big") is True
    finally:
        await asyncio.wait_for(other.close(), 60)


async def _tried_lock(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> bool:
    """Two builder sessions in this database: the second one exists only to try the lock."""
    return await _sessions(conn, APPLICATION_NAME) >= 2


async def test_a_failed_build_is_logged_listed_and_built_by_the_next_write(
    storage: PostgresStorage,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A build cancelled on the server (as an operator's ``pg_cancel_backend`` would) fails:
    it is logged, its invalid index dropped at once, the bucket listed as failed and
    searched exactly, and the next write into the bucket builds the graph."""
    kb = storage.kb_index
    rng = np.random.default_rng(26)
    matrix = _unit(rng.normal(size=(THRESHOLD + 20, DIM)))
    ids = await _write(storage, "big", "g", matrix)
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    await storage.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])
    kb._stats_changed()
    holder = await _open_write(storage.db.url)
    try:
        failed = kb._graphs.request(DIM, "big")
        await _until("the build to wait", lambda: _lock_waiters(observer, APPLICATION_NAME))
        await observer.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = %s"
            " AND datname = current_database() AND wait_event_type = 'Lock'",
            (APPLICATION_NAME,),
        )
    finally:
        # The failed build's DROP INDEX CONCURRENTLY of its leftover waits for this
        # transaction as the build did (it holds no writer): released first.
        await holder.rollback()
        await holder.close()
    with pytest.raises(psycopg.errors.QueryCanceled):
        await asyncio.wait_for(asyncio.shield(failed), 30)
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    assert await _state(observer, "big") is None  # its invalid index dropped at once
    status = await kb.vector_index_status()
    assert status["buckets_without_graph"] == ["big"] and list(status["graph_builds_failed"]) == ["big"]
    assert "QueryCanceled" in status["graph_builds_failed"]["big"]
    warned = [r.getMessage() for r in caplog.records if "'big'" in r.getMessage() and r.levelno == logging.WARNING]
    assert warned and "QueryCanceled" in warned[0], warned
    query = _unit(rng.normal(size=DIM))
    assert (await kb.vector_candidates(query, "m", KBScope("big"), 10)).ids == _exact(ids, matrix, query, 10)
    more = _unit(rng.normal(size=(3, DIM)))
    ids += await _write(storage, "big", "late", more, per_doc=3)  # the next write asks again
    await _until("the search to use the rebuilt graph", lambda: _graph_used(storage, "big"), 60)
    every = np.vstack([matrix, more])
    assert (await kb.vector_candidates(query, "m", KBScope("big"), 10)).ids == _exact(ids, every, query, 10)
    assert (await kb.vector_index_status())["graph_builds_failed"] == {}


async def test_readyz_lists_a_bucket_whose_graph_is_being_built(pg_server: TestPostgres, tmp_path: Path) -> None:
    """The service over PostgreSQL: documents posted through the API take their bucket
    past the threshold; while the graph builds (held by another session's open write)
    ``/readyz`` lists the bucket as being built and without a graph, and once the build
    is done, as having one."""
    import httpx

    from app.config import Settings
    from tests.conftest import running_app

    docs = [{"id": f"doc-{i}", "title": f"Note {i}", "text": f"Calibration note {i} for sensor {i}."} for i in range(6)]
    with pg_server.database() as url:
        settings = Settings.from_env(
            {
                "AGENT_DATABASE_URL": url,
                "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",
                "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
                "AGENT_INGEST_SAMPLE_KB": "false",
                "AGENT_ADMIN_OPEN": "true",  # POST /v1/kb/documents in `none` mode
                "AGENT_EMBEDDER": "hashing",
                "AGENT_LLM_PROVIDER": "extractive",
                "OLLAMA_HOST": "http://127.0.0.1:9",
            }
        )
        async with running_app(settings) as (base, app), httpx.AsyncClient(timeout=30) as client:
            kb = app.state.services.storage.kb_index
            await asyncio.wait_for(kb.graph_repair(), 60)
            kb.exact_scope_vectors = 3  # the six documents' chunks take their bucket past it

            async def readyz() -> dict[str, Any]:
                body: dict[str, Any] = (await client.get(f"{base}/readyz")).json()
                return body

            async def index() -> dict[str, Any]:
                """Once the counts are current: the buckets without a graph come from the
                vector counts kept, counted again in the background after a write."""
                ready = await current(readyz)
                return dict(ready["checks"]["knowledge"]["semantic_search"]["index"])

            holder = await _open_write(url)
            try:
                posted = await client.post(f"{base}/v1/kb/documents", json={"documents": docs})
                assert posted.status_code == 200, posted.text
                observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
                try:
                    await _until("the graph build to wait", lambda: _lock_waiters(observer, APPLICATION_NAME))
                finally:
                    await observer.close()
                building = await index()
                assert len(building["buckets_building_graph"]) == 1, building
                assert building["buckets_without_graph"] == building["buckets_building_graph"]
                assert building["bucket_graphs"] == 0 and building["graph_build_running"] is not None
            finally:
                await holder.rollback()
                await holder.close()

            async def built() -> bool:
                now = await index()
                return bool(now["bucket_graphs"] == 1 and not now["buckets_without_graph"])

            await _until("/readyz to show the graph built", built, 60)
            assert (await index())["buckets_building_graph"] == []
