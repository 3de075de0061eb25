"""A close that cancels PostgreSQL graph builds a bulk load awaits (``storage/postgres/
kb_graph_builds.py``) ends the load cleanly: its rows have committed, the graph is the
next open's repair's, and the caller gets no ``CancelledError``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import numpy as np
import psycopg
import pytest

from knowledge.buckets import typed_values
from storage.kb_records import KBChunkWrite, KBDocumentWrite
from storage.postgres import open_postgres_storage
from storage.postgres.kb_graph_queue import APPLICATION_NAME
from storage.postgres.kb_graphs import graph_state
from storage.postgres.kb_index import PostgresKBIndex
from storage.postgres.kb_vectors import EXACT_SCOPE_VECTORS
from tests.storage.test_kb_graph_builds_pg import DIM as SMALL_DIM
from tests.storage.test_kb_graph_builds_pg import _doc as small_doc
from tests.support.deadline import reap, within
from tests.support.postgres import TestPostgres
from tests.support.procs import REPO, answers_ctrl_c, child_env

pytestmark = pytest.mark.slow  # an `agentchat ingest` subprocess, 10k vectors seeded

#: The hashing embedder's (``AGENT_EMBEDDER=hashing``, the CLI's here).
DIM = 384
MODEL = "hashing-v2"


async def seed_past_threshold(url: str, bucket: str) -> None:
    """``bucket`` with one vector more than the graph threshold, and no graph (the
    writes' own build is kept from starting by a threshold raised for them)."""
    storage = await open_postgres_storage(url)
    try:
        await asyncio.wait_for(storage.kb_index.graph_repair(), 60)
        storage.kb_index.exact_scope_vectors = 10**9
        await storage.kb_index.create_bucket(bucket, {}, typed_row=typed_values)
        rng = np.random.default_rng(7)
        per_doc = 1_000
        total = EXACT_SCOPE_VECTORS + 1
        for start in range(0, total, per_doc):
            n = min(per_doc, total - start)
            m = rng.normal(size=(n, DIM))
            m /= np.linalg.norm(m, axis=1, keepdims=True)
            doc = KBDocumentWrite(
                id=f"seed{start}", title="seed", source=f"seed{start}.md", url=None, content_hash=f"seed{start}",
                metadata={}, chars=10, chunks=[KBChunkWrite(i, "", f"seed chunk {i}") for i in range(n)],
                vectors=m.astype(np.float32), embed_model=MODEL, embed_dim=DIM, typed=(),
            )  # fmt: skip
            await storage.kb_index.write_documents(bucket, {}, [doc])
    finally:
        await storage.close()


async def lock_waiters(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()"
        " AND wait_event_type = 'Lock'",
        (APPLICATION_NAME,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def documents(conn: psycopg.AsyncConnection[tuple[object, ...]], bucket: str) -> int:
    cur = await conn.execute("SELECT count(*) FROM kb_documents WHERE bucket = %s", (bucket,))
    row = await cur.fetchone()
    return int(row[0]) if row else 0


async def read_lines(stream: asyncio.StreamReader, into: list[str]) -> None:
    while line := await stream.readline():
        into.append(line.decode(errors="replace"))


#: The interruptions, one after the other on one seeded database: (signal, exit code, last line).
INTERRUPTIONS = [
    (signal.SIGINT, 130, "agentchat ingest: interrupted"),
    (signal.SIGTERM, 143, "agentchat ingest: terminated (SIGTERM)"),
]


async def interrupt_an_ingest(
    url: str, docs: Path, env: dict[str, str], sig: signal.Signals, code_expected: int, last_line: str
) -> None:
    """``agentchat ingest`` of ``docs`` into ``manual`` stopped by ``sig`` while the load's
    end waits for the bucket's graph (held by another session's open write): the report
    and one line on what stands, ``code_expected``, no traceback; the build cancelled on
    the server."""
    observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
    holder = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
    before = await documents(observer, "manual")
    await holder.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")  # every concurrent build waits for it
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", "ingest", str(docs), "--bucket", "manual", "--quiet",
        cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        preexec_fn=answers_ctrl_c,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    out: list[str] = []
    err: list[str] = []
    readers = [asyncio.create_task(read_lines(proc.stdout, out)), asyncio.create_task(read_lines(proc.stderr, err))]
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 120
        # The load's end says what it waits for; the build waits for the open write.
        while not (any("the load ends once the graphs" in line for line in err) and await lock_waiters(observer)):
            assert proc.returncode is None, "".join(err)
            assert loop.time() < deadline, "".join(err)
            await asyncio.sleep(0.05)
        os.kill(proc.pid, sig)
        code = await within(proc.wait(), f"agentchat ingest after {sig.name}", 60)
        await within(asyncio.gather(*readers), "its output", 10)
        text = "".join(err)
        assert code == code_expected, text
        assert "Traceback" not in text and "CancelledError" not in text, text
        assert "stopped while building the indexes: the documents above are stored" in text, text
        assert text.splitlines()[-1] == last_line, text
        assert "1 document added" in "".join(out), "".join(out)
        assert await documents(observer, "manual") == before + 1  # the ingest's row
        assert await sessions(observer) == 0  # the close cancelled the build on the server
    finally:
        await reap(proc, "agentchat", grace=5)
        await holder.close()
        await observer.close()


async def test_an_ingest_interrupted_while_its_graph_builds_ends_cleanly_and_the_next_open_builds_it(
    pg_server: TestPostgres, tmp_path: Path
) -> None:
    """Ctrl-C, then SIGTERM, on ``agentchat ingest`` while the load's end waits for a
    bucket graph (held by another session's open write): each time the report and one
    line on what stands, exit 130 (143), no traceback, the build cancelled on the server;
    and the next open builds the graph. Both interruptions run on one seeded database
    (each leaves it as the seed did: past the threshold, no graph), so the 10,001 vectors
    are seeded and their graph built once, not once per signal (the build alone is some
    7 CPU-s of PostgreSQL)."""
    with pg_server.database() as url:
        await seed_past_threshold(url, "manual")
        env = child_env(
            {"AGENT_DB_PATH": str(tmp_path / "agent.db"), "AGENT_DATABASE_URL": url, "AGENT_EMBEDDER": "hashing"}
        )
        for n, (sig, code_expected, last_line) in enumerate(INTERRUPTIONS):
            docs = tmp_path / f"docs-{sig.name}"
            docs.mkdir()
            (docs / f"fjord-{n}.md").write_text(
                f"# Fjords {n}\n\nA fjord is a long narrow inlet carved by glaciers ({sig.name}).\n"
            )
            await interrupt_an_ingest(url, docs, env, sig, code_expected, last_line)
        observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        try:
            assert await documents(observer, "manual") == EXACT_SCOPE_VECTORS // 1_000 + 1 + len(INTERRUPTIONS)
            again = await open_postgres_storage(url)
            try:
                assert await asyncio.wait_for(again.kb_index.graph_repair(), 120) == [(DIM, "manual")]
                assert await graph_state(observer, DIM, "manual") is True  # type: ignore[arg-type]
            finally:
                await again.close()
        finally:
            await observer.close()


async def sessions(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
        (APPLICATION_NAME,),
    )
    row = await cur.fetchone()
    return int(row[0]) if row else 0


SMALL_THRESHOLD = 50


async def test_a_close_under_a_bulk_load_awaiting_its_graph_leaves_the_load_its_rows(
    pg_server: TestPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage closed (the server stopping) while a bulk load in another task waits
    for its bucket's graph: the load ends without an error — its rows committed; the
    graph is not built here — where it used to end with a CancelledError it never asked
    for. The next open's repair builds the graph."""
    rng = np.random.default_rng(5)
    with pg_server.database() as url:
        storage = await open_postgres_storage(url)
        observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        holder = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
        try:
            await asyncio.wait_for(storage.kb_index.graph_repair(), 60)
            storage.kb_index.exact_scope_vectors = SMALL_THRESHOLD
            kb = storage.kb_index
            for bucket in ("small", "big"):
                await kb.create_bucket(bucket, {}, typed_row=typed_values)
            await kb.write_documents("small", {}, [small_doc("s0", rng.normal(size=(3, SMALL_DIM)))])
            await holder.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")  # the graph's build waits for it

            async def load() -> None:
                async with kb.bulk_load():
                    docs = [small_doc(f"b{i}", rng.normal(size=(1, SMALL_DIM))) for i in range(SMALL_THRESHOLD + 10)]
                    await kb.write_documents("big", {}, docs)

            loading = asyncio.create_task(load())
            deadline = asyncio.get_running_loop().time() + 60
            while not await lock_waiters(observer):
                assert not loading.done(), loading
                assert asyncio.get_running_loop().time() < deadline, "the load's graph build never waited"
                await asyncio.sleep(0.02)
            await asyncio.wait_for(storage.close(), 60)
            await asyncio.wait_for(loading, 60)  # no CancelledError: nobody cancelled the load
            assert await documents(observer, "big") == SMALL_THRESHOLD + 10
            assert await sessions(observer) == 0
        finally:
            await storage.close()  # again: nothing left to close after the first
            await holder.close()
        monkeypatch.setattr(PostgresKBIndex.__init__, "__kwdefaults__", {"exact_scope_vectors": SMALL_THRESHOLD})
        try:
            again = await open_postgres_storage(url)
            try:
                assert await asyncio.wait_for(again.kb_index.graph_repair(), 60) == [(SMALL_DIM, "big")]
                assert await graph_state(observer, SMALL_DIM, "big") is True  # type: ignore[arg-type]
            finally:
                await again.close()
        finally:
            await observer.close()


async def test_a_close_under_the_repair_at_open_answers_its_waiter_with_nothing_built(
    pg_server: TestPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``graph_repair()`` awaited in one task while the storage closes in another (the
    repair's build held by an open write): ``[]``, not a ``CancelledError``."""
    rng = np.random.default_rng(6)
    with pg_server.database() as url:
        first = await open_postgres_storage(url)
        try:
            first.kb_index.exact_scope_vectors = 10**9  # no graph built for these writes
            await first.kb_index.create_bucket("big", {}, typed_row=typed_values)
            docs = [small_doc(f"b{i}", rng.normal(size=(1, SMALL_DIM))) for i in range(SMALL_THRESHOLD + 10)]
            await first.kb_index.write_documents("big", {}, docs)
        finally:
            await first.close()
        monkeypatch.setattr(PostgresKBIndex.__init__, "__kwdefaults__", {"exact_scope_vectors": SMALL_THRESHOLD})
        observer = await psycopg.AsyncConnection.connect(url, autocommit=True, connect_timeout=10)
        holder = await psycopg.AsyncConnection.connect(url, connect_timeout=10)
        await holder.execute("LOCK TABLE kb_chunks IN ROW EXCLUSIVE MODE")
        try:
            storage = await open_postgres_storage(url)  # its repair builds big's graph: it waits
            try:
                waiting = asyncio.create_task(storage.kb_index.graph_repair())
                deadline = asyncio.get_running_loop().time() + 60
                while not await lock_waiters(observer):
                    assert asyncio.get_running_loop().time() < deadline, "the repair's build never waited"
                    await asyncio.sleep(0.02)
            finally:
                await asyncio.wait_for(storage.close(), 60)
            assert await asyncio.wait_for(waiting, 30) == []
        finally:
            await holder.close()
            await observer.close()
