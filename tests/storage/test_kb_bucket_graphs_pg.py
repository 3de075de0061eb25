"""One HNSW graph per bucket on PostgreSQL (``storage/postgres/kb_graphs.py``, ``kb_vectors.py``).

A bucket gets its own partial HNSW index once it holds more vectors than the exact
threshold (set small here, on the index object, before the writes), at a bulk load's
end for the buckets it loaded, and loses it with the bucket. A query of a bucket with a
graph names the bucket as a literal so the planner can use that index (``EXPLAIN``,
also of the generic plan a prepared statement ends up with); a query of several
buckets, or of every bucket, is one statement per graph plus an exact scan of the
rest, merged. Whatever the parts, the top lists are the exact scan's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from knowledge.buckets import typed_values
from knowledge.filters import compile_filters
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.kb_graphs import graph_name
from storage.postgres.kb_vector_scan import ScanSettings, statement
from tests.support.postgres import TestPostgres

DIM = 12
THRESHOLD = 50


@pytest.fixture
async def storage(pg_server: TestPostgres) -> AsyncIterator[PostgresStorage]:
    with pg_server.database() as url:
        opened = await open_postgres_storage(url)
        assert await asyncio.wait_for(opened.kb_index.graph_repair(), 60) == []  # at the product's threshold
        opened.kb_index.exact_scope_vectors = THRESHOLD
        try:
            yield opened
        finally:
            await opened.close()


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


def _doc(
    doc_id: str, vectors: np.ndarray, text: str | None = None, meta: dict[str, str] | None = None
) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id, title=doc_id, source=f"{doc_id}.md", url=None, content_hash=doc_id, metadata=meta or {},
        chars=10, chunks=[KBChunkWrite(i, "", text or f"chunk {i} of {doc_id}") for i in range(len(vectors))],
        vectors=vectors.astype(np.float32), embed_model="m", embed_dim=DIM, typed=tuple((meta or {}).values()),
    )  # fmt: skip


async def _graphs(storage: PostgresStorage) -> set[str]:
    rows = await storage.db.fetchall("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'kb\\_chunks\\_hnsw%%'")
    return {str(r[0]) for r in rows}


async def _write(storage: PostgresStorage, bucket: str, prefix: str, matrix: np.ndarray, **kw: object) -> list[int]:
    """One chunk per document (the bucket made first if new); the chunk ids in matrix order."""
    if await storage.db.fetchone("SELECT 1 FROM kb_buckets WHERE name = %s", (bucket,)) is None:
        await storage.kb_index.create_bucket(bucket, {}, typed_row=typed_values)
    meta = kw.get("meta")
    docs = [
        _doc(f"{prefix}{i}", v.reshape(1, -1), meta=meta(i) if callable(meta) else None) for i, v in enumerate(matrix)
    ]
    ids = await storage.kb_index.write_documents(bucket, kw.get("fields") or {}, docs)  # type: ignore[arg-type]
    await _settled(storage)
    return [d[0] for d in ids]


async def _settled(storage: PostgresStorage) -> None:
    """The graph builds a write queued (in the background, after its commit) have run."""
    await asyncio.wait_for(storage.kb_index.graph_builds_done(), 60)


def _exact(ids: list[int], matrix: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    sims = matrix @ query
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))[:k]]


async def test_a_bucket_gets_its_graph_past_the_threshold_and_loses_it_with_the_bucket(
    storage: PostgresStorage,
) -> None:
    kb = storage.kb_index
    rng = np.random.default_rng(1)
    await kb.create_bucket("alpha", {}, typed_row=typed_values)
    await kb.create_bucket("beta", {}, typed_row=typed_values)
    await _write(storage, "alpha", "a", _unit(rng.normal(size=(40, DIM))))
    await _write(storage, "beta", "b", _unit(rng.normal(size=(10, DIM))))
    assert await _graphs(storage) == set()  # 40 and 10 vectors: under the threshold
    await _write(storage, "alpha", "a2_", _unit(rng.normal(size=(20, DIM))))
    assert await _graphs(storage) == {graph_name(DIM, "alpha")}
    # Every chunk carries its document's bucket.
    rows = await storage.db.fetchall(
        "SELECT count(*) FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.bucket = d.bucket"
    )
    assert rows == [(70,)]
    assert await kb.delete_bucket("alpha") is not None
    await asyncio.wait_for(kb.graph_builds_done(), 60)  # the drop runs in the background
    assert await _graphs(storage) == set()
    got = await kb.vector_candidates(_unit(rng.normal(size=DIM)), "m", KBScope("beta"), 5)
    assert len(got.ids) == 5


async def test_a_bulk_load_builds_the_graphs_of_the_buckets_it_loaded_at_its_end(storage: PostgresStorage) -> None:
    kb = storage.kb_index
    rng = np.random.default_rng(2)
    async with kb.bulk_load():
        for bucket, n in (("x", 120), ("y", 80), ("z", 10)):
            await _write(storage, bucket, bucket, _unit(rng.normal(size=(n, DIM))))
        assert await _graphs(storage) == set()  # built at the end, once
    assert await _graphs(storage) == {graph_name(DIM, "x"), graph_name(DIM, "y")}


async def test_a_bucket_query_uses_its_graph_in_a_custom_and_a_generic_plan(storage: PostgresStorage) -> None:
    """The bucket is a literal in the statement, so even the generic plan (psycopg
    prepares a statement after 5 runs; PostgreSQL may then plan it once for any
    parameters) proves the partial index's predicate."""
    kb = storage.kb_index
    rng = np.random.default_rng(3)
    await _write(storage, "docs", "d", _unit(rng.normal(size=(200, DIM))))
    await _write(storage, "other", "o", _unit(rng.normal(size=(200, DIM))))
    [part] = await kb._vectors.parts(KBScope("docs"), "m", DIM, 10)
    assert part.graph == "docs" and not part.plan.exact
    query = _unit(rng.normal(size=DIM))
    async with storage.db.reading() as conn, conn.transaction():
        st = statement(conn, part, query, "m", 10, ScanSettings())
        for setting in st.settings:
            await conn.execute(f"SET LOCAL {setting}")  # type: ignore[arg-type]
        await conn.execute("SET LOCAL enable_seqscan = off")  # a 400-row table: the planner must not shrug
        custom = "\n".join(str(r[0]) for r in await (await conn.execute("EXPLAIN " + st.sql, st.params)).fetchall())
        # The same statement with $n placeholders, planned for no values at all.
        names: list[str] = []

        def placeholder(m: re.Match[str]) -> str:
            if m.group(1) not in names:
                names.append(m.group(1))
            return f"${names.index(m.group(1)) + 1}"

        generic_sql = re.sub(r"%\((\w+)\)s", placeholder, st.sql).replace("%%", "%")
        generic = "\n".join(
            str(r[0]) for r in await (await conn.execute(f"EXPLAIN (GENERIC_PLAN) {generic_sql}")).fetchall()
        )
    for plan in (custom, generic):
        assert graph_name(DIM, "docs") in plan, plan
        assert graph_name(DIM, "other") not in plan, plan


async def test_scoped_several_buckets_every_bucket_and_filtered_top_lists_equal_the_exact_scan(
    storage: PostgresStorage,
) -> None:
    kb = storage.kb_index
    vs = kb._vectors
    rng = np.random.default_rng(4)
    fields = {"kind": "TEXT"}
    await kb.create_bucket("a", fields, typed_row=typed_values)
    ma, mb, mc = (_unit(rng.normal(size=(n, DIM))) for n in (300, 250, 30))
    ids_a = await _write(storage, "a", "a", ma, fields=fields, meta=lambda i: {"kind": "x" if i % 3 else "y"})
    ids_b = await _write(storage, "b", "b", mb)
    ids_c = await _write(storage, "c", "c", mc)  # small: no graph, scanned exactly
    assert await _graphs(storage) == {graph_name(DIM, "a"), graph_name(DIM, "b")}
    schema = await kb._schema("a")
    only_x = compile_filters({"kind": "x"}, schema, bucket="a")
    xs = [i for i in range(300) if i % 3]
    x_docs = [f"a{i}" for i in xs]
    for _ in range(6):
        query = _unit(rng.normal(size=DIM))
        cases = [
            (KBScope("a"), ids_a, ma, {"a"}),
            (KBScope("b"), ids_b, mb, {"b"}),
            (KBScope("c"), ids_c, mc, set()),
            (KBScope(), ids_a + ids_b + ids_c, np.vstack([ma, mb, mc]), {"a", "b"}),
            (
                KBScope(doc_ids=[f"a{i}" for i in range(300)] + [f"c{i}" for i in range(30)]),
                ids_a + ids_c,
                np.vstack([ma, mc]),
                {"a"},
            ),
            (KBScope("a", only_x, None, x_docs), [ids_a[i] for i in xs], ma[xs], {"a"}),
            (KBScope("a", only_x), [ids_a[i] for i in xs], ma[xs], {"a"}),
        ]
        for scope, ids, matrix, graphs in cases:
            parts = await vs.parts(scope, "m", DIM, 20)
            assert {p.graph for p in parts if p.graph is not None} == graphs, scope
            got = await kb.vector_candidates(query, "m", scope, 20)
            assert got.ids == _exact(ids, matrix, query, 20), scope
            assert got.scores == sorted(got.scores, reverse=True)
    assert vs.exact_reruns == 0


async def test_two_buckets_with_the_same_text_and_vectors_never_see_each_other(storage: PostgresStorage) -> None:
    kb = storage.kb_index
    rng = np.random.default_rng(5)
    matrix = _unit(rng.normal(size=(80, DIM)))
    docs_l = [_doc(f"l{i}", v.reshape(1, -1), text="the same words") for i, v in enumerate(matrix)]
    docs_r = [_doc(f"r{i}", v.reshape(1, -1), text="the same words") for i, v in enumerate(matrix)]
    for bucket in ("left", "right"):
        await kb.create_bucket(bucket, {}, typed_row=typed_values)
    left = [d[0] for d in await kb.write_documents("left", {}, docs_l)]
    right = [d[0] for d in await kb.write_documents("right", {}, docs_r)]
    await _settled(storage)
    assert await _graphs(storage) == {graph_name(DIM, "left"), graph_name(DIM, "right")}
    for v in matrix[:5]:
        got_l = await kb.vector_candidates(v, "m", KBScope("left"), 30)
        got_r = await kb.vector_candidates(v, "m", KBScope("right"), 30)
        assert got_l.ids == _exact(left, matrix, v, 30) and got_r.ids == _exact(right, matrix, v, 30)
        assert not set(got_l.ids) & set(right) and not set(got_r.ids) & set(left)


async def test_a_bucket_named_with_quotes_a_percent_sign_and_unicode_has_its_graph(storage: PostgresStorage) -> None:
    """Bucket names are user text: the predicate's literal is quoted, the index named by
    a hash. Today's names are narrower (``kb_tables.ident``: ``create_bucket`` refuses
    others), so the buckets are made by hand here: the graphs must not rely on that."""
    kb = storage.kb_index
    rng = np.random.default_rng(6)
    odd = "o'brien's \"100%\" ünïcødé ✓ %(q)s"
    near = "o'brien's"  # a prefix of it: another bucket
    for name in (odd, near):
        await storage.db.fetchall(
            "INSERT INTO kb_buckets(name, schema, created_at) VALUES (%s, '{}', '2026-11-27') RETURNING name", (name,)
        )
    m_odd, m_near = _unit(rng.normal(size=(90, DIM))), _unit(rng.normal(size=(70, DIM)))
    ids_odd = await _write(storage, odd, "odd", m_odd)
    ids_near = await _write(storage, near, "near", m_near)
    assert await _graphs(storage) == {graph_name(DIM, odd), graph_name(DIM, near)}
    [part] = await kb._vectors.parts(KBScope(odd), "m", DIM, 10)
    assert part.graph == odd
    for v in rng.normal(size=(4, DIM)):
        query = _unit(v)
        got = await kb.vector_candidates(query, "m", KBScope(odd), 10)
        assert got.ids == _exact(ids_odd, m_odd, query, 10)
        both = await kb.vector_candidates(query, "m", KBScope(), 10)
        assert both.ids == _exact(ids_odd + ids_near, np.vstack([m_odd, m_near]), query, 10)


async def test_migration_26_fills_the_chunks_buckets_and_replaces_the_global_graph(pg_server: TestPostgres) -> None:
    """A database of step 25 (one graph per dimension, chunks without a bucket): the
    step drops that graph, gives every chunk its document's bucket, and the repair at
    open (``ensure_bucket_graphs``, here with a small threshold) builds the big bucket's."""
    import psycopg
    from pgvector.psycopg import register_vector_async

    from storage.postgres import migrations

    rng = np.random.default_rng(7)
    matrix = _unit(rng.normal(size=(90, DIM)))
    buckets = ["big"] * 70 + ["small"] * 20
    with pg_server.database(empty=True) as url:
        await migrations.migrate(url, migrations.MIGRATIONS[:25])
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            await register_vector_async(conn)
            await conn.execute("INSERT INTO kb_buckets (name, created_at) VALUES ('big', 'now'), ('small', 'now')")
            for i, (bucket, vec) in enumerate(zip(buckets, matrix, strict=True)):
                await conn.execute(
                    "INSERT INTO kb_documents (id, bucket, content_hash, created_at, updated_at, chunk_count,"
                    " embed_model, embed_dim) VALUES (%s, %s, %s, 'now', 'now', 1, 'm', %s)",
                    (f"d{i}", bucket, str(i), DIM),
                )
                await conn.execute(
                    "INSERT INTO kb_chunks (doc_id, position, title, text, ntok, embedding)"
                    " VALUES (%s, 0, '', %s, 2, %s)",
                    (f"d{i}", f"chunk {i}", vec),
                )
            await conn.execute(
                f"CREATE INDEX kb_chunks_hnsw_{DIM} ON kb_chunks USING hnsw ((embedding::vector({DIM}))"
                f" vector_cosine_ops) WHERE vector_dims(embedding) = {DIM}"  # as step 25's code made it
            )
        storage = await open_postgres_storage(url)  # migrates to the last step
        try:
            assert await _graphs(storage) == set()  # the global graph is gone; 70 < 10,000
            rows = await storage.db.fetchall("SELECT c.bucket, count(*) FROM kb_chunks c GROUP BY 1 ORDER BY 1")
            assert rows == [("big", 70), ("small", 20)]
            kb = storage.kb_index
            assert await asyncio.wait_for(kb.graph_repair(), 60) == []  # 70 < 10,000
            kb.exact_scope_vectors = THRESHOLD
            assert await kb.ensure_bucket_graphs() == [(DIM, "big")]
            assert await _graphs(storage) == {graph_name(DIM, "big")}
            by_doc = dict((str(r[0]), int(r[1])) for r in await storage.db.fetchall("SELECT doc_id, id FROM kb_chunks"))
            ids = [by_doc[f"d{i}"] for i in range(90)]
            query = _unit(rng.normal(size=DIM))
            [part] = await kb._vectors.parts(KBScope("big"), "m", DIM, 10)
            assert part.graph == "big"
            got = await kb.vector_candidates(query, "m", KBScope("big"), 10)
            assert got.ids == _exact(ids[:70], matrix[:70], query, 10)
        finally:
            await storage.close()


async def test_a_whole_bucket_walks_as_wide_as_its_pool_and_a_large_one_iterates_further() -> None:
    """The plan alone (no server: ``iterative`` stands for the pgvector version)."""
    from storage.postgres.kb_vectors import LARGE_GRAPH_VECTORS, MAX_EF_SEARCH, VectorSearch

    async def no_schema(_bucket: str | None) -> None:
        return None

    vs = VectorSearch(None, no_schema)  # type: ignore[arg-type]
    vs._work_mem = 4 * 2**20  # what the server's work_mem would read: pgvector's default, 4 MB
    for iterative in (False, True):
        vs.iterative = iterative
        small = await vs.graph_plan(50_000, 50_000, 100, join=False, whole=True)
        assert not small.exact and small.pool == 0 and small.ef_search == MAX_EF_SEARCH  # plain, 10 x 100
        large = await vs.graph_plan(250_000, 250_000, 100, join=False, whole=True)
        if iterative:  # a pool of 2,000: only an iterative scan collects it
            assert large.pool == 2000 and large.ef_search == MAX_EF_SEARCH and large.scan_tuples >= 4000
        else:  # pgvector < 0.8 cannot walk past ef_search
            assert large.pool == 0 and large.ef_search == MAX_EF_SEARCH
        assert LARGE_GRAPH_VECTORS < 250_000
        # A filter inside the bucket: its share of the graph widens the walk, as before.
        thin = await vs.graph_plan(20_000, 250_000, 100, join=False)
        # Iterating, a walk of 2 x 1,000 / 8 % = 25,000 tuples, more than the scope holds;
        # without, 2 x 100 / 8 % = 2,500 candidates needed, past ef_search 1,000: exact.
        assert thin.exact
        wide = await vs.graph_plan(150_000, 250_000, 100, join=False)
        assert not wide.exact and wide.ef_search == 667 and wide.pool == (1000 if iterative else 0)


async def test_a_search_of_every_bucket_finds_a_bucket_another_replica_has_just_created(
    storage: PostgresStorage, pg_server: TestPostgres
) -> None:
    """The counts of buckets and graphs are cached for up to STATS_TTL_S; a search of
    every bucket must still cover a bucket written by another replica a moment ago."""
    kb = storage.kb_index
    rng = np.random.default_rng(7)
    ma = _unit(rng.normal(size=(120, DIM)))
    ids_a = await _write(storage, "a", "a", ma)
    query = _unit(rng.normal(size=DIM))
    first = await kb.vector_candidates(query, "m", KBScope(), 10)  # this replica's counts now cached
    assert first.ids == _exact(ids_a, ma, query, 10)
    other = await open_postgres_storage(storage.db.url)
    await asyncio.wait_for(other.kb_index.graph_repair(), 60)
    other.kb_index.exact_scope_vectors = THRESHOLD
    try:
        mz = _unit(np.vstack([query + 0.01 * rng.normal(size=DIM) for _ in range(5)]))  # nearest to the query
        mbig = _unit(rng.normal(size=(80, DIM)))
        ids_z = await _write(other, "z", "z", mz)  # small: no graph
        ids_big = await _write(other, "big", "big", mbig)  # past the threshold: its own graph, unknown here
    finally:
        await other.close()
    got = await kb.vector_candidates(query, "m", KBScope(), 10)
    every = ids_a + ids_z + ids_big
    assert got.ids == _exact(every, np.vstack([ma, mz, mbig]), query, 10)
    assert set(ids_z) <= set(got.ids)


async def test_a_missing_graph_is_built_in_the_background_after_open_and_a_close_cancels_the_build(
    pg_server: TestPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bucket past the threshold without its graph (an upgrade past migration 26, a
    crash before a bulk load's end): the start does not wait for the build (minutes at
    1M vectors); the repair builds it in the background, and a close stops it."""
    from storage.postgres.kb_index import PostgresKBIndex

    rng = np.random.default_rng(8)
    matrix = _unit(rng.normal(size=(90, DIM)))
    with pg_server.database() as url:
        first = await open_postgres_storage(url)
        try:
            await asyncio.wait_for(first.kb_index.graph_repair(), 60)
            first.kb_index.exact_scope_vectors = THRESHOLD
            await _write(first, "big", "g", matrix)
            assert await _graphs(first) == {graph_name(DIM, "big")}
            await first.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])  # as a crash would leave it
        finally:
            await first.close()
        # The next opens' threshold, from their first moment (the repair starts in open).
        monkeypatch.setattr(PostgresKBIndex.__init__, "__kwdefaults__", {"exact_scope_vectors": THRESHOLD})
        second = await open_postgres_storage(url)
        try:
            assert await asyncio.wait_for(second.kb_index.graph_repair(), 60) == [(DIM, "big")]
            assert await _graphs(second) == {graph_name(DIM, "big")}
            await second.db.execute([(f'DROP INDEX "{graph_name(DIM, "big")}"', ())])
        finally:
            await second.close()
        third = await open_postgres_storage(url)
        await asyncio.wait_for(third.close(), 30)  # closed at once: the repair is cancelled, not awaited
        assert third.kb_index._graphs._repair is None and third.kb_index._graphs._worker is None


async def test_a_bucket_another_replica_deleted_gets_its_graph_again_when_it_grows_back(
    storage: PostgresStorage,
) -> None:
    """This replica built the bucket's graph; another deletes the bucket (its graph goes
    with it) and the bucket is written again here past the threshold: it gets a graph
    again, not searched exactly until this process restarts."""
    rng = np.random.default_rng(10)
    await _write(storage, "big", "g", _unit(rng.normal(size=(THRESHOLD + 10, DIM))))
    assert await _graphs(storage) == {graph_name(DIM, "big")}
    other = await open_postgres_storage(storage.db.url)
    try:
        await asyncio.wait_for(other.kb_index.graph_repair(), 60)
        assert await other.kb_index.delete_bucket("big") is not None
        await asyncio.wait_for(other.kb_index.graph_builds_done(), 60)  # the drop runs in the background
    finally:
        await other.close()
    assert await _graphs(storage) == set()
    await _write(storage, "big", "h", _unit(rng.normal(size=(THRESHOLD + 10, DIM))))
    assert await _graphs(storage) == {graph_name(DIM, "big")}


async def test_a_big_buckets_walk_grows_with_the_bucket_and_its_scan_memory_with_the_walk() -> None:
    """The plan alone: a whole bucket past ``LARGE_GRAPH_VECTORS`` hands over a pool that
    grows with the bucket (up to a cap), may visit tuples in proportion, and gets the
    scan memory those tuples need over the server's ``work_mem`` — every iterative plan
    does (a filtered walk too): pgvector ends a walk at its memory, whatever its tuples."""
    from storage.postgres.kb_vector_walk import (
        LARGE_GRAPH_MAX_POOL,
        LARGE_GRAPH_UNIT,
        SCAN_BYTES_PER_TUPLE,
        WALK_TUPLES_PER_POOL,
    )
    from storage.postgres.kb_vectors import VectorSearch

    async def no_schema(_bucket: str | None) -> None:
        return None

    vs = VectorSearch(None, no_schema)  # type: ignore[arg-type]
    vs.iterative = True
    for work_mem in (4 * 2**20, 1 * 2**20):
        vs._work_mem = work_mem
        quarter = await vs.graph_plan(LARGE_GRAPH_UNIT, LARGE_GRAPH_UNIT, 100, join=False, whole=True)
        half = await vs.graph_plan(2 * LARGE_GRAPH_UNIT, 2 * LARGE_GRAPH_UNIT, 100, join=False, whole=True)
        assert (quarter.pool, half.pool) == (2000, 4000)  # twice the bucket, twice the pool
        assert half.scan_tuples == WALK_TUPLES_PER_POOL * 4000 == 2 * quarter.scan_tuples
        for plan in (quarter, half):  # memory enough for every tuple the walk may visit
            assert plan.scan_mem * work_mem >= plan.scan_tuples * SCAN_BYTES_PER_TUPLE
            assert (plan.scan_mem - 1) * work_mem < plan.scan_tuples * SCAN_BYTES_PER_TUPLE
        huge = await vs.graph_plan(10**8, 10**8, 100, join=False, whole=True)
        assert huge.pool == LARGE_GRAPH_MAX_POOL and huge.scan_mem <= 1000  # pgvector's bound
        wide = await vs.graph_plan(150_000, 250_000, 100, join=False)  # a filter: one unit, pool 10 x 100
        assert wide.pool == 1000 and wide.scan_mem * work_mem >= wide.scan_tuples * SCAN_BYTES_PER_TUPLE
        # A filter's pool grows with the graph too: 12.5 % of a 250k graph (the 1M bench's
        # datasheet filters) walks to 1,000 through it; 7.6 % of a 500k graph (its invoice
        # filters) to 2,000, past what the scope holds, so it is scanned exactly.
        sheets = await vs.graph_plan(31_000, LARGE_GRAPH_UNIT, 100, join=False)
        assert not sheets.exact and sheets.pool == 1000
        assert (await vs.graph_plan(38_000, 2 * LARGE_GRAPH_UNIT, 100, join=False)).exact
        assert (await vs.graph_plan(120_000, 2 * LARGE_GRAPH_UNIT, 100, join=False)).pool == 2000
    vs.iterative = False  # pgvector < 0.8: no walk past ef_search, no scan memory to set
    plain = await vs.graph_plan(2 * LARGE_GRAPH_UNIT, 2 * LARGE_GRAPH_UNIT, 100, join=False, whole=True)
    assert plain.pool == 0 and plain.scan_mem == 0


async def test_a_search_of_every_bucket_whose_buckets_all_have_graphs_reads_no_chunk_in_its_exact_part(
    storage: PostgresStorage,
) -> None:
    """The exact part of a search of every bucket covers the buckets no graph part
    serves (none here). It reads their documents first and looks their chunks up: no
    chunk row is read. As ``c.doc_id IN (subquery)`` the planner scanned every chunk
    and probed each one's document (at 1M chunks: seconds per search, for nothing)."""
    rng = np.random.default_rng(8)
    await _write(storage, "a", "a", _unit(rng.normal(size=(120, DIM))))
    await _write(storage, "b", "b", _unit(rng.normal(size=(90, DIM))))
    parts = await storage.kb_index._vectors.parts(KBScope(), "m", DIM, 10)
    assert sorted(str(p.graph) for p in parts if p.graph is not None) == ["a", "b"]
    [rest] = [p for p in parts if p.graph is None]
    query = _unit(rng.normal(size=DIM))

    def chunk_rows(node: dict[str, Any]) -> int:
        own = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))
        own = own if node.get("Relation Name") == "kb_chunks" else 0
        return own + sum(chunk_rows(n) for n in node.get("Plans", []))

    async with storage.db.reading() as conn, conn.transaction():
        st = statement(conn, rest, query, "m", 10, ScanSettings())
        cur = await conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + st.sql, st.params)  # type: ignore[arg-type]
        [[plan]] = await cur.fetchall()
    assert chunk_rows(plan[0]["Plan"]) == 0, plan
    got = await storage.kb_index.vector_candidates(query, "m", KBScope(), 10)
    assert len(got.ids) == 10
