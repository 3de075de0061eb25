"""Graph builds on a PostgreSQL short of shared memory (Docker's 64 MB ``/dev/shm``).

A parallel HNSW build (pgvector >= 0.6) allocates ``maintenance_work_mem`` whole as one
dynamic shared memory segment; where that does not fit, PostgreSQL fails the build with
"could not resize shared memory segment … No space left on device" (53100). The failure
here is real, not injected: a server of its own keeps its dynamic shared memory in files
(``dynamic_shared_memory_type = mmap``, under ``pg_dynshmem``), and an 8 MB tmpfs
mounted there before it starts is the too-small ``/dev/shm``: the 64 MB segment (the
server's own ``maintenance_work_mem``, which the build's never goes below) does not fit.
Mounted after the start it was not seen alike by every process (a parallel worker could
not open its leader's segment), hence ``TestPostgres(before_start=…)``.
Mounting takes root (``mount``); without it the test is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import psycopg.sql
import pytest

from knowledge.buckets import typed_values
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.kb_graphs import (
    HNSW_BUILD_MEMORY_KB,
    ensure_graph,
    graph_build_memory_kb,
    graph_state,
)
from tests.storage.test_kb_graph_builds_pg import _doc
from tests.support.postgres import TestPostgres

DIM = 16
THRESHOLD = 50


def test_build_memory_fits_the_graph_with_headroom() -> None:
    """What the graph needs (2,250 bytes a 384-dim vector, measured) with headroom; the
    server's own higher setting wins; 2 GB at most."""
    assert graph_build_memory_kb(100_000, 384, 65_536) == 274_659  # 100k × 2,250 B × 1.25
    assert graph_build_memory_kb(1_000, 384, 65_536) == 65_536  # the server's own 64 MB
    assert graph_build_memory_kb(100_000, 768, 0) > graph_build_memory_kb(100_000, 384, 0)
    assert graph_build_memory_kb(10_000_000, 384, 65_536) == HNSW_BUILD_MEMORY_KB  # capped
    assert graph_build_memory_kb(10_000_000, 384, 4 * HNSW_BUILD_MEMORY_KB) == 4 * HNSW_BUILD_MEMORY_KB  # a DBA's
    assert graph_build_memory_kb(0, 384, 1024) == 1024


@pytest.fixture(scope="module")
def cramped_server() -> Iterator[TestPostgres]:
    """A server whose dynamic shared memory lives in files under ``pg_dynshmem``, an 8 MB
    tmpfs mounted before the server starts (every process of it sees the mount), where
    index builds are planned parallel for any table (``min_parallel_table_scan_size``)."""
    mounted: list[Path] = []
    refused: list[str] = []

    def mount_small(data: Path) -> None:
        if os.geteuid() != 0:
            refused.append("mounting a tmpfs takes root")
            return
        nobody = pwd.getpwnam("nobody")
        where = data / "pg_dynshmem"
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size=8m,mode=0700,uid={nobody.pw_uid},gid={nobody.pw_gid}", "tmpfs",
             str(where)],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            mounted.append(where)
        else:
            refused.append(done.stderr.decode(errors="replace").strip())

    server = TestPostgres(
        settings={
            "dynamic_shared_memory_type": "mmap",
            "min_parallel_table_scan_size": "0",
            "max_parallel_workers_per_gather": "0",  # only the index builds go parallel
        },
        before_start=mount_small,
    )
    try:
        server.start()
        if refused:
            pytest.skip(f"no small tmpfs under pg_dynshmem here: {refused[0]}")
        server.prepare_template()
        yield server
    finally:
        home = server._dir
        server.stop()  # before the unmount: the server's files are open there
        for where in mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30, check=False)
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)  # what stop could not remove under the mount


@pytest.fixture
async def storage(cramped_server: TestPostgres) -> AsyncIterator[PostgresStorage]:
    with cramped_server.database() as url:
        opened = await open_postgres_storage(url)
        opened.kb_index.exact_scope_vectors = THRESHOLD
        try:
            yield opened
        finally:
            await asyncio.wait_for(opened.close(), 60)


async def _fill(storage: PostgresStorage, bucket: str, seed: int, vectors: int) -> None:
    """``bucket`` made and given ``vectors`` random vectors, ten to a document."""
    kb = storage.kb_index
    await kb.create_bucket(bucket, {}, typed_row=typed_values)
    matrix = np.random.default_rng(seed).standard_normal((vectors, DIM)).astype(np.float32)
    docs = [_doc(f"{bucket}{i}", matrix[i : i + 10]) for i in range(0, len(matrix), 10)]
    await asyncio.wait_for(kb.write_documents(bucket, {}, docs), 30)


async def _graph_valid(storage: PostgresStorage, bucket: str) -> bool:
    async with storage.db.reading() as conn:
        return await graph_state(conn, DIM, bucket) is True


async def test_build_short_of_shared_memory_runs_serially_and_says_so(
    storage: PostgresStorage, caplog: pytest.LogCaptureFixture
) -> None:
    """The parallel build fails for want of shared memory (for real: the 8 MB tmpfs); the
    graph is built serially anyway, with a WARNING naming the fix, the count for
    ``/metrics`` and the bucket in the KB's status. Before: the build failed, the bucket
    was searched exactly for ever, and every write or open tried (and failed) again."""
    caplog.set_level(logging.INFO, logger="agentchat.storage")
    kb = storage.kb_index
    await _fill(storage, "big", 7, THRESHOLD * 4)
    assert await asyncio.wait_for(kb._graphs.build_now(["big"]), 120) == [(DIM, "big")]
    assert await _graph_valid(storage, "big")
    assert kb.graph_serial_builds == 1  # /metrics: agentchat_kb_graph_builds_serial_total
    status = await kb.vector_index_status()
    assert "shared memory segment" in status["graph_builds_serial"]["big"]
    assert status["graph_builds_failed"] == {}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("for want of shared memory" in m and "shm_size" in m for m in warned), warned


async def test_plain_build_short_of_shared_memory_runs_serially(
    storage: PostgresStorage, caplog: pytest.LogCaptureFixture
) -> None:
    """``ensure_graph`` (``migrate-db``'s fresh target, the benches: a plain build inside
    the caller's transaction): the failed parallel build is undone to a savepoint and the
    graph built serially in the same transaction, with the same WARNING. Before: the
    error aborted the caller's transaction."""
    kb = storage.kb_index
    kb.exact_scope_vectors = 10_000  # no graph queued by the write: ensure_graph builds it
    await _fill(storage, "plain", 8, THRESHOLD * 2)
    caplog.set_level(logging.INFO, logger="agentchat.storage")
    async with await psycopg.AsyncConnection.connect(storage.db.url, connect_timeout=10) as conn:
        assert await asyncio.wait_for(ensure_graph(conn, DIM, "plain", bulk_build=True), 60)
        await conn.commit()
    assert await _graph_valid(storage, "plain")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("for want of shared memory" in m and "shm_size" in m for m in warned), warned


async def test_a_failed_builds_leftover_is_dropped_before_the_serial_build(
    storage: PostgresStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed parallel build's invalid index whose drop failed too (an administrator's
    cancel, say) is dropped before the serial build: ``CREATE INDEX CONCURRENTLY IF NOT
    EXISTS`` kept it, and the graph was reported built while the bucket was searched
    exactly."""
    from storage.postgres import kb_graph_queue

    real_drop, drops = kb_graph_queue.drop_ddl, [0]

    def first_drop_fails(name: str) -> Any:
        drops[0] += 1
        return psycopg.sql.SQL("SELECT 1 / 0") if drops[0] == 1 else real_drop(name)

    monkeypatch.setattr(kb_graph_queue, "drop_ddl", first_drop_fails)
    await _fill(storage, "left", 9, THRESHOLD * 4)
    assert await asyncio.wait_for(storage.kb_index._graphs.build_now(["left"]), 120) == [(DIM, "left")]
    assert drops[0] >= 2  # the failing drop, then the serial build's own
    assert await _graph_valid(storage, "left")
