"""What only the PostgreSQL engine has to show: migrating once however many replicas
start together, the writer's retries against a locked table, guarantees that hold
between replicas (two storage bundles on one database, as two processes would have),
pgvector's HNSW search, and the engine chooser."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import psycopg
import pytest

from knowledge.buckets import typed_values
from llm.types import Message
from storage.draft_records import Draft
from storage.errors import ConversationBusy, StorageUnavailable
from storage.interfaces import KBVectorSearch
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope, KBTextTuning
from storage.open import is_postgres_url, open_storage
from storage.postgres import PostgresOptions, PostgresStorage, open_postgres_storage, redact
from storage.postgres.kb_graphs import graph_name
from storage.postgres.migrations import MIGRATIONS, VERSION_TABLE
from storage.records import Admitted, NewRun
from tests.support.postgres import GUARDED, TestPostgres


@pytest.fixture
async def pg_url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


@pytest.fixture
async def replicas(pg_url: str) -> AsyncIterator[tuple[PostgresStorage, PostgresStorage]]:
    a = await open_postgres_storage(pg_url)
    b = await open_postgres_storage(pg_url)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_ten_replicas_starting_together_migrate_once(pg_server: TestPostgres) -> None:
    with pg_server.database(empty=True) as url:
        opened = await asyncio.gather(*(open_postgres_storage(url) for _ in range(10)))
        try:
            assert {s.schema_version for s in opened} == {MIGRATIONS[-1].version}
        finally:
            for s in opened:
                await s.close()
        with psycopg.connect(url, **GUARDED) as conn:
            rows = conn.execute(f"SELECT version FROM {VERSION_TABLE} ORDER BY version").fetchall()
            tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert [r[0] for r in rows] == [m.version for m in MIGRATIONS]
        assert {"runs", "run_events", "messages", "kb_chunks", "keywords", "workflow_drafts"} <= tables


async def _holding_lock(url: str, table: str, seconds: float) -> asyncio.Task[None]:
    """Another connection locks ``table`` and holds it for ``seconds``; returns once the
    lock is held (the task ends when it is released)."""
    held = asyncio.Event()

    async def hold() -> None:
        try:
            async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as conn, conn.transaction():
                await conn.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # type: ignore[arg-type]
                held.set()
                await asyncio.sleep(seconds)
        finally:
            held.set()

    holder = asyncio.create_task(hold())
    await held.wait()
    if holder.done():
        holder.result()  # the lock was never taken: say why
    return holder


async def test_a_locked_table_is_waited_for_within_the_retry_window(pg_url: str) -> None:
    storage = await open_postgres_storage(pg_url, PostgresOptions(write_retry_s=10, lock_timeout_ms=50))
    try:
        holder = await _holding_lock(pg_url, "conversations", 0.4)
        await storage.conversations.claim("c", "alice")  # times out on the lock, retries, succeeds
        await holder
        assert storage.db.stats.retries >= 1 and storage.db.healthy
        assert await storage.conversations.exists("c", "alice")
    finally:
        await storage.close()


async def test_past_the_retry_window_writes_fail_loudly_then_recover(pg_url: str) -> None:
    storage = await open_postgres_storage(pg_url, PostgresOptions(write_retry_s=0.3, lock_timeout_ms=50))
    try:
        holder = await _holding_lock(pg_url, "conversations", 1.3)
        failed: list[BaseException] = []
        storage.db.enqueue([("INSERT INTO conversations(id, user_id) VALUES ('q', 'u')", ())], on_fail=failed.append)
        with pytest.raises(StorageUnavailable):
            await storage.db.commit([("INSERT INTO conversations(id, user_id) VALUES ('x', 'u')", ())])
        assert len(failed) == 1 and isinstance(failed[0], StorageUnavailable)
        assert not storage.db.healthy and (await storage.readiness())["ok"] is False
        assert storage.db.stats.failures >= 1
        await holder
        await storage.conversations.claim("after", "u")
        ready = await storage.readiness()
        assert storage.db.healthy and ready["ok"] is True and ready["engine"] == "postgres"
        assert not await storage.conversations.exists("q", "u")  # the failed write was not half-done
    finally:
        await storage.close()


async def test_one_id_claimed_by_many_users_across_replicas_is_one_conversation_each(
    replicas: tuple[PostgresStorage, PostgresStorage],
) -> None:
    a, b = replicas
    await asyncio.gather(*((a if i % 2 else b).conversations.claim("race", f"user{i % 4}") for i in range(8)))
    await asyncio.gather(*((a if i % 2 else b).conversations.append("race", f"user{i}", [Message("user", f"u{i}")])
                           for i in range(4)))
    for i in range(4):
        assert [m.payload["content"] for m in await b.conversations.messages("race", f"user{i}")] == [f"u{i}"]


async def test_appends_from_two_replicas_never_collide(replicas: tuple[PostgresStorage, PostgresStorage]) -> None:
    a, b = replicas
    await a.conversations.claim("c", "alice")
    await asyncio.gather(
        *((a if i % 2 else b).conversations.append("c", "alice", [Message("user", f"m{i}"),
                                                                   Message("assistant", f"a{i}")])
          for i in range(30))
    )
    stored = await b.conversations.messages("c", "alice")
    assert [m.seq for m in stored] == list(range(1, 61))
    texts = [m.payload["content"] for m in stored]
    for i in range(0, 60, 2):
        assert texts[i + 1] == "a" + texts[i][1:]


async def test_reject_policy_holds_across_replicas(replicas: tuple[PostgresStorage, PostgresStorage]) -> None:
    a, b = replicas

    def run(rid: str) -> NewRun:
        return NewRun(rid, "conv", "alice", "knowledge", orjson.dumps({"message": "hi"}), "reject")

    results = await asyncio.gather(*((a if i % 2 else b).runs.create(run(f"r{i}")) for i in range(6)),
                                   return_exceptions=True)
    assert sum(r == Admitted([]) for r in results) == 1
    assert all(isinstance(r, ConversationBusy) for r in results if r != Admitted([]))
    assert len(await a.runs.unfinished()) == 1


async def test_draft_limit_and_keyword_merges_hold_across_replicas(
    replicas: tuple[PostgresStorage, PostgresStorage],
) -> None:
    a, b = replicas
    drafts = [Draft(str(uuid.uuid4()), "alice", "flow", "sales.orders", "on_create", created_at=1e9, last_access=1e9)
              for _ in range(10)]
    accepted = await asyncio.gather(
        *((a if i % 2 else b).drafts.insert(d, live_after=0.0, max_per_owner=3) for i, d in enumerate(drafts))
    )
    assert accepted.count(True) == 3
    await asyncio.gather(
        *((a if i % 2 else b).keywords.upsert({"eu vat": "EU VAT", "reverse charge": "Reverse charge"},
                                              query_id=f"q{i}", owner="alice", now=1e9 + i) for i in range(20))
    )
    rec = await a.keywords.get("eu vat", owner="alice")
    assert rec is not None and rec.usage_count == 20


async def test_the_run_writer_of_each_replica_keeps_its_order(
    replicas: tuple[PostgresStorage, PostgresStorage],
) -> None:
    from storage.records import RunEvent, RunWrite

    a, b = replicas
    await a.runs.create(NewRun("ra", "ca", "alice", "knowledge", b"{}"))
    await b.runs.create(NewRun("rb", "cb", "bob", "knowledge", b"{}"))
    order: list[str] = []
    for i in range(1, 101):
        for name, s in (("ra", a), ("rb", b)):
            s.runs.write(RunWrite(name, "c" + name[1], "alice" if name == "ra" else "bob", events=[RunEvent(i, "content_chunk", "{}")],
                                  messages=[Message("assistant", str(i))] if i % 10 == 0 else ()),
                         on_commit=lambda name=name, i=i: order.append(f"{name}{i}"))
    await asyncio.gather(a.db.flush(), b.db.flush())
    assert [o for o in order if o.startswith("ra")] == [f"ra{i}" for i in range(1, 101)]
    assert [o for o in order if o.startswith("rb")] == [f"rb{i}" for i in range(1, 101)]
    assert [e.seq for e in await b.runs.events_after("ra", 0)] == list(range(1, 101))
    assert [m.seq for m in await a.conversations.messages("cb", "bob")] == list(range(1, 11))


def _doc(doc_id: str, vectors: np.ndarray, bucket_meta: dict[str, Any] | None = None) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id, title=doc_id, source=f"{doc_id}.md", url=None, content_hash=doc_id, metadata=bucket_meta or {},
        chars=10, chunks=[KBChunkWrite(i, "", f"chunk {i} of {doc_id}") for i in range(len(vectors))],
        vectors=vectors.astype(np.float32), embed_model="m", embed_dim=vectors.shape[1],
    )


async def test_vector_candidates_use_hnsw_and_agree_with_an_exact_scan(pg_url: str) -> None:
    storage = await open_postgres_storage(pg_url)
    try:
        kb = storage.kb_index
        kb.exact_scope_vectors = 100  # both buckets (200 vectors each) get their own graph
        await kb.create_bucket("a", {}, typed_row=typed_values)
        await kb.create_bucket("b", {}, typed_row=typed_values)
        rng = np.random.default_rng(7)
        matrix = rng.normal(size=(400, 16)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        ids_a = await kb.write_documents("a", {}, [_doc(f"a{i}", matrix[i * 10:(i + 1) * 10]) for i in range(20)])
        ids_b = await kb.write_documents("b", {}, [_doc(f"b{i}", matrix[200 + i * 10:210 + i * 10]) for i in range(20)])
        await asyncio.wait_for(kb.graph_builds_done(), 60)  # built in the background, after the writes
        chunk_ids = np.array([c for doc in [*ids_a, *ids_b] for c in doc])
        with psycopg.connect(pg_url, **GUARDED) as conn:
            names = [graph_name(16, "a"), graph_name(16, "b")]
            found = conn.execute("SELECT count(*) FROM pg_indexes WHERE indexname = ANY(%s)", (names,)).fetchone()
            assert found == (2,)
        query = matrix[3] + 0.1 * matrix[250]
        query /= np.linalg.norm(query)
        exact = chunk_ids[np.argsort(-(matrix @ query))[:10]].tolist()
        got = await kb.vector_candidates(query, "m", KBScope(), 10)
        assert got.ids[0] == exact[0] and len(set(got.ids) & set(exact)) >= 8  # approximate, but close
        assert got.scores == sorted(got.scores, reverse=True) and got.scores[0] == pytest.approx(
            float(matrix[0 + 3] @ query), abs=1e-5)
        in_b = await kb.vector_candidates(query, "m", KBScope(bucket="b"), 5)
        assert set(in_b.ids) <= {c for doc in ids_b for c in doc} and len(in_b.ids) == 5
        listed = await kb.vector_candidates(query, "m", KBScope(doc_ids=["b5", "a0"]), 50)
        assert sorted(listed.ids) == sorted([*ids_b[5], *ids_a[0]])
        assert (await kb.vector_candidates(query, "other", KBScope(), 5)).ids == []
        assert isinstance(kb, KBVectorSearch)
        cos = await kb.cosines([int(chunk_ids[0]), int(chunk_ids[250]), 10**9], query, "m")
        assert set(cos) == {int(chunk_ids[0]), int(chunk_ids[250])}
        assert cos[int(chunk_ids[250])] == pytest.approx(float(matrix[250] @ query), abs=1e-5)
    finally:
        await storage.close()


async def test_a_bulk_load_builds_a_new_hnsw_index_once_at_its_end(pg_url: str) -> None:
    """Row-by-row HNSW inserts capped ingest near 340 chunks/s; a first load builds the
    bucket's graph once at the end. Searches inside the load stay right (exact), a graph
    that already exists is kept and maintained, and a load that fails still gets its graph."""
    storage = await open_postgres_storage(pg_url)

    def has_index(dim: int) -> bool:
        with psycopg.connect(pg_url, **GUARDED) as conn:
            found = conn.execute("SELECT 1 FROM pg_indexes WHERE indexname = %s", (graph_name(dim, "a"),))
            return found.fetchone() is not None

    try:
        kb = storage.kb_index
        kb.exact_scope_vectors = 100  # the bucket's 300 vectors get a graph
        await kb.create_bucket("a", {}, typed_row=typed_values)
        rng = np.random.default_rng(3)
        matrix = rng.normal(size=(300, 12)).astype(np.float32)
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
        async with kb.bulk_load():
            docs = [_doc(f"a{i}", matrix[i * 10:(i + 1) * 10]) for i in range(30)]
            ids = await kb.write_documents("a", {}, docs[:15]) + await kb.write_documents("a", {}, docs[15:])
            assert not has_index(12)
            flat = np.array([c for d in ids for c in d])
            got = await kb.vector_candidates(matrix[42], "m", KBScope(), 5)
            assert got.ids[0] == int(flat[42])
        assert has_index(12)
        # The index exists now: a later load maintains it instead of deferring anything.
        async with kb.bulk_load():
            await kb.write_documents("a", {}, [_doc("late", matrix[:3])])
            assert has_index(12)
        # A load that fails half-way still leaves its rows indexed.
        kb.exact_scope_vectors = 0  # (4 vectors of 20 dimensions: a graph from the first)
        with pytest.raises(RuntimeError):
            async with kb.bulk_load():
                await kb.write_documents("a", {}, [_doc("wide", rng.normal(size=(4, 20)))])
                raise RuntimeError("the source went away")
        assert has_index(20)
    finally:
        await storage.close()


async def test_chunk_vectors_and_tsvectors_are_kept_in_the_row(pg_url: str) -> None:
    """Both search sides read these columns for every candidate: out of line, each read
    was a TOAST lookup (migrations 11 and 12), so both are ``MAIN``."""
    with psycopg.connect(pg_url, **GUARDED) as conn:
        storage_of = dict(conn.execute(
            "SELECT attname, attstorage FROM pg_attribute WHERE attrelid = 'kb_chunks'::regclass "
            "AND attname IN ('embedding', 'tsv', 'text')").fetchall())
    assert storage_of == {"embedding": "m", "tsv": "m", "text": "x"}


async def test_pruned_text_ranking_equals_scoring_every_match(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MaxScore (``kb_text``): the chunks of the rarest terms set a bar that chunks of only
    the commonest terms cannot reach, so those are never scored — and the top list,
    scores and match count are exactly what scoring every match gives. (Scopes of
    documents are ranked on their rows here: a row costing nothing, the postings'
    answer for a scope, ``kb_postings.top_in_scope``, steps aside.)"""
    from storage.postgres import kb_postings, kb_text

    monkeypatch.setattr(kb_postings, "ROW_COST_IN_POSTINGS", 0)

    storage = await open_postgres_storage(pg_url)
    try:
        kb = storage.kb_index
        await kb.create_bucket("t", {}, typed_row=typed_values)
        rng = np.random.default_rng(11)
        share = {"report": 0.5, "budget": 0.3, "quarter": 0.7}
        rare = ["zeppelin", "quokka", "marzipan", "obsidian"]
        docs = []
        for i in range(600):
            words = [w for w, p in share.items() for _ in range(int(rng.integers(1, 4))) if rng.random() < p]
            if i % 37 == 0:
                words += list(rng.choice(rare, size=int(rng.integers(1, 3))))
            words += [f"filler{int(x)}" for x in rng.integers(0, 300, size=int(rng.integers(5, 40)))]
            docs.append(KBDocumentWrite(
                id=f"d{i}", title="", source="s.md", url=None, content_hash=str(i), metadata={}, chars=1,
                chunks=[KBChunkWrite(0, "", " ".join(words))], vectors=None, embed_model=None, embed_dim=None))
        await kb.write_documents("t", {}, docs)
        tuning = KBTextTuning()
        scored: list[int] = []
        real_rank = kb_text.TextRanker._rank

        async def counting(self: Any, condition: str, params: dict[str, Any], matching: Any) -> Any:
            scored.append(len(matching))
            return await real_rank(self, condition, params, matching)

        async def both(terms: list[str], scope: KBScope, limit: int) -> tuple[Any, Any]:
            kb_text.TextRanker._rank = counting  # type: ignore[method-assign]
            try:
                pruned = await kb.text_candidates(terms, scope, limit, tuning)
            finally:
                kb_text.TextRanker._rank = real_rank  # type: ignore[method-assign]
            factor, kb_text.FIRST_PASS_DF_FACTOR = kb_text.FIRST_PASS_DF_FACTOR, 10**9  # no pruning
            try:
                full = await kb.text_candidates(terms, scope, limit, tuning)
            finally:
                kb_text.FIRST_PASS_DF_FACTOR = factor
            return pruned, full

        terms = ["report", "budget", "quarter", "zeppelin", "quokka", "marzipan"]
        # Every document named: the MaxScore path (the whole index is answered from the
        # postings, issue 24 — the same top list).
        every = KBScope(doc_ids=[f"d{i}" for i in range(600)])
        for limit in (1, 3, 10, 40, 700):
            scored.clear()
            pruned, full = await both(terms, every, limit)
            assert pruned.ids == full.ids and pruned.scores == pytest.approx(full.scores)
            assert len(full.ids) == min(limit, full.total)
            if max(scored) == len(terms):  # a pass ranked every term: its count is exact
                assert pruned.total == full.total
            else:  # the commonest terms were left out: an estimate, never "all seen"
                assert len(pruned.ids) < pruned.total and full.total / 2 <= pruned.total <= full.total * 2
            if limit <= 3:  # no pass scored the chunks of every term
                assert max(scored) < len(terms), scored
            from_postings = await kb.text_candidates(terms, KBScope(), limit, tuning)
            assert from_postings.ids == full.ids and from_postings.scores == pytest.approx(full.scores)
        scope = KBScope(doc_ids=[f"d{i}" for i in range(0, 600, 3)])
        pruned, full = await both(terms, scope, 5)
        assert pruned.ids == full.ids and full.total < 600
        assert len(pruned.ids) < pruned.total and full.total / 2 <= pruned.total <= full.total * 2
    finally:
        await storage.close()


async def test_open_storage_picks_the_engine_from_the_target(pg_url: str, tmp_path: Path) -> None:
    assert is_postgres_url(pg_url) and is_postgres_url("postgres://u@h/db")
    assert not is_postgres_url(str(tmp_path / "a.db")) and not is_postgres_url(tmp_path / "a.db")
    pg = await open_storage(pg_url, write_retry_s=2.0)
    lite = await open_storage(tmp_path / "a.db", write_retry_s=2.0)
    try:
        assert (pg.engine, lite.engine) == ("postgres", "sqlite")
        assert pg.schema_version == MIGRATIONS[-1].version
        assert pg.db.opts.write_retry_s == 2.0 and lite.db.opts.write_retry_s == 2.0
        assert pg.kb_index.location.startswith("postgresql://") and lite.kb_index.location.endswith("a.db")
        assert redact("postgresql://bob:s3cret@db.example:6543/agent") == "postgresql://bob@db.example:6543/agent"
        for s in (pg, lite):
            await s.conversations.claim("c", "alice")
            assert (await s.readiness())["ok"] is True
    finally:
        await pg.close()
        await lite.close()


async def test_the_pool_size_setting_reaches_the_pool(pg_url: str) -> None:
    """AGENT_DB_MAX_CONNECTIONS sizes the pool of each replica (three replicas with the
    default stay under PostgreSQL's default ``max_connections`` of 100)."""
    from app.config import Settings

    assert Settings.from_env({}).db_max_connections == 20
    assert Settings.from_env({"AGENT_DB_MAX_CONNECTIONS": "7"}).db_max_connections == 7
    with pytest.raises(ValueError):
        Settings.from_env({"AGENT_DB_MAX_CONNECTIONS": "1"})
    storage = await open_storage(pg_url, write_retry_s=3, max_connections=7)
    try:
        assert isinstance(storage, PostgresStorage)
        assert storage.db.pool.max_size == 7 and storage.db.opts.write_retry_s == 3
    finally:
        await storage.close()
