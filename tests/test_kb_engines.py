"""The knowledge base on both engines: the dense side answered by pgvector on
PostgreSQL ranks the labelled queries at least as well as the in-memory matrix on
SQLite; a filtered dense search through the HNSW index keeps its recall; and two app
instances on one PostgreSQL find each other's documents at once, by meaning and by
text, without a restart (nothing of the vectors lives in a replica's memory)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import orjson
import pytest

from app.cli.kb_file import open_kb_file
from app.config import Settings
from bench.corpus_quality import QUERIES, K, ndcg, recall
from knowledge.buckets import typed_values
from knowledge.dense import DatabaseDense, MatrixDense
from knowledge.kb import KnowledgeBase
from llm.extractive import ExtractiveProvider
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope
from storage.postgres import PostgresStorage, open_postgres_storage
from tests.conftest import collect_sse, running_app
from tests.support.corpus import stdlib_documents
from tests.support.postgres import TestPostgres
from toolindex.hashing import HashingEmbedder

#: Every third labelled query (and the documents they need, plus distractors) keeps the
#: test to seconds; the benchmark (bench/corpus_quality.py) runs them all.
QUERY_STEP = 3
DISTRACTOR_STEP = 4


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


@pytest.fixture
async def pg_storage(pg: TestPostgres) -> AsyncIterator[PostgresStorage]:
    with pg.database() as url:
        storage = await open_postgres_storage(url)
        try:
            yield storage
        finally:
            await storage.close()


class MemoEmbedder:
    """The hashing embedder, computing each text once for both engines' ingests."""

    def __init__(self) -> None:
        self._inner = HashingEmbedder(dim=384)
        self.name, self.model, self.dim, self.max_chars = (
            self._inner.name, self._inner.model, self._inner.dim, self._inner.max_chars)
        self._seen: dict[tuple[str, str], np.ndarray] = {}

    async def embed(self, text: str, *, task: Any = "query") -> np.ndarray:
        return await self._inner.embed(text, task=task)

    async def embed_batch(self, texts: list[str], *, task: Any = "document") -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if (t, task) not in self._seen]
        if missing:
            for t, row in zip(missing, await self._inner.embed_batch(missing, task=task), strict=True):
                self._seen[(t, task)] = row
        return np.stack([self._seen[(t, task)] for t in texts])

    async def aclose(self) -> None:
        await self._inner.aclose()


def labelled_subset() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    docs = stdlib_documents()
    known = {d["id"] for d in docs}
    queries = []
    for q in orjson.loads(QUERIES.read_bytes())["queries"][::QUERY_STEP]:
        relevant = [r for r in q["relevant"] if r in known]
        if relevant:
            queries.append({"query": q["query"], "relevant": relevant})
    needed = {r for q in queries for r in q["relevant"]}
    chosen = [d for i, d in enumerate(docs) if d["id"] in needed or i % DISTRACTOR_STEP == 0]
    return chosen, queries


async def scores(
    kb: KnowledgeBase, queries: list[dict[str, Any]], modes: tuple[str, ...]
) -> dict[str, tuple[float, float]]:
    out = {}
    for mode in modes:
        n = r = 0.0
        for q in queries:
            res = await kb.search(q["query"], bucket="pydocs", mode=mode, top_k=40)  # type: ignore[arg-type]
            assert res.mode == mode and not res.warnings, (mode, res.warnings)
            ranked = list(dict.fromkeys(h.doc_id for h in res.hits))
            n += ndcg(ranked, set(q["relevant"]))
            r += recall(ranked, set(q["relevant"]))
        out[mode] = (n / len(queries), r / len(queries))
    return out


async def test_labelled_queries_rank_at_least_as_well_on_postgresql(
    pg_storage: PostgresStorage, tmp_path: Path
) -> None:
    docs, queries = labelled_subset()
    assert len(queries) >= 15 and len(docs) >= 80
    embedder = MemoEmbedder()
    lite = await open_kb_file(tmp_path / "kb.sqlite3", embedder)
    pg = await KnowledgeBase.create(pg_storage.kb_index, embedder, schema_version=pg_storage.schema_version)
    try:
        assert isinstance(lite._vectors, MatrixDense)
        assert isinstance(pg._vectors, DatabaseDense) and not hasattr(pg._vectors, "matrix")
        for kb in (lite, pg):
            report = await kb.ingest_documents(docs, bucket="pydocs")
            assert not report.rejected
        modes = ("text", "semantic", "hybrid")
        base = await scores(lite, queries, modes)
        exact = await scores(pg, queries, modes)  # the scope is small: pgvector scores it exactly
        pg_storage.kb_index.exact_scope_vectors = 0  # every dense search through the HNSW index
        indexed = await scores(pg, queries, ("semantic", "hybrid"))
    finally:
        await lite.aclose()
        await pg.aclose()
    assert base["hybrid"][0] > 0.5, base  # the set is answerable: the comparison means something
    for mode, (ndcg_lite, recall_lite) in base.items():
        for label, got in (("exact", exact), ("hnsw", indexed)):
            if mode in got:
                ndcg_pg, recall_pg = got[mode]
                assert ndcg_pg >= ndcg_lite - 1e-9, (label, mode, f"nDCG@{K}", ndcg_pg, ndcg_lite)
                assert recall_pg >= recall_lite - 1e-9, (label, mode, f"Recall@{K}", recall_pg, recall_lite)


async def test_a_filtered_dense_search_through_the_index_keeps_its_recall(pg_storage: PostgresStorage) -> None:
    """A filter keeping 5% of the documents, searched through HNSW (not exactly): the
    nearest in-scope chunks are found, not just the few among the global neighbours."""
    kb = pg_storage.kb_index
    kb.exact_scope_vectors = 0  # the bucket gets its HNSW graph, and every scope goes through it
    await kb.create_bucket("parts", {"rare": "BOOLEAN"}, typed_row=typed_values)
    rng = np.random.default_rng(11)
    n, dim = 1000, 32
    matrix = rng.normal(size=(n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    rare = [i % 20 == 0 for i in range(n)]
    docs = [
        KBDocumentWrite(
            id=f"p{i}", title=f"part {i}", source="parts", url=None, content_hash=str(i), metadata={"rare": rare[i]},
            chars=8, chunks=[KBChunkWrite(0, "", f"part {i}")], vectors=matrix[i:i + 1], embed_model="m",
            embed_dim=dim, typed=(int(rare[i]),),
        )
        for i in range(n)
    ]
    chunk_ids = [ids[0] for ids in await kb.write_documents("parts", {"rare": "BOOLEAN"}, docs)]
    await asyncio.wait_for(kb.graph_builds_done(), 60)  # built in the background, after the write
    from knowledge.filters import compile_filters

    scope_filter = compile_filters({"rare": True}, {"rare": "BOOLEAN"}, bucket="parts")
    in_scope = [i for i in range(n) if rare[i]]
    scoped = KBScope("parts", scope_filter, None, [f"p{i}" for i in in_scope])
    [part] = await kb._vectors.parts(scoped, "m", dim, 10)
    # Through the bucket's graph, with a widened search.
    assert part.graph == "parts" and not part.plan.exact and part.plan.ef_search > 40
    found = []
    for q in range(5):
        query = matrix[in_scope[q * 7]] + 0.5 * rng.normal(size=dim).astype(np.float32)
        query /= np.linalg.norm(query)
        exact = [chunk_ids[i] for i in sorted(in_scope, key=lambda i: -float(matrix[i] @ query))[:10]]
        got = await kb.vector_candidates(query, "m", scoped, 10)
        assert set(got.ids) <= {chunk_ids[i] for i in in_scope}
        found.append(len(set(got.ids) & set(exact)) / 10)
    assert np.mean(found) >= 0.9, found  # post-filtering 40 neighbours would keep ~2 of them


def _settings(url: str, tmp_path: Path, name: str) -> Settings:
    return Settings.from_env({
        "AGENT_DATABASE_URL": url,
        "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789",  # PostgreSQL: a key the database does not hold
        "AGENT_DB_PATH": str(tmp_path / f"{name}-unused.sqlite3"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_ADMIN_OPEN": "true",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_LLM_PROVIDER": "extractive",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    })


DOC = {
    "id": "doc-zephyr",
    "title": "Zephyr calibration",
    "text": "The quarterly zephyr calibration of the wind tunnel resets the anemometer baseline "
            "and records the drift of every pressure sensor in the calibration ledger.",
}


async def test_two_apps_on_one_postgresql_find_each_others_documents_at_once(
    pg: TestPostgres, tmp_path: Path
) -> None:
    with pg.database() as url:
        async with (
            running_app(_settings(url, tmp_path, "a"), provider=ExtractiveProvider()) as (base_a, _app_a),
            running_app(_settings(url, tmp_path, "b"), provider=ExtractiveProvider()) as (base_b, app_b),
            httpx.AsyncClient(timeout=30) as http,
        ):
            kb_b: KnowledgeBase = app_b.state.services.rooms.knowledge.kb
            query = "zephyr calibration of the anemometer"
            # B has searched its empty KB before A ingests: nothing it remembers may hide
            # A's document afterwards.
            before = await kb_b.search(query, mode="semantic")
            assert before.hits == [] and before.mode == "text" and before.warnings
            assert (await kb_b.search(query, mode="text")).hits == []

            posted = await http.post(f"{base_a}/v1/kb/documents", json={"documents": [DOC]})
            assert posted.status_code == 200, posted.text

            semantic = await kb_b.search(query, mode="semantic")
            assert semantic.mode == "semantic" and not semantic.warnings
            assert [h.doc_id for h in semantic.hits][:1] == ["doc-zephyr"]
            text = await kb_b.search(query, mode="text")
            assert [h.doc_id for h in text.hits][:1] == ["doc-zephyr"]
            assert (await kb_b.status.stats())["vectors"] == 1

            events = await collect_sse(http, "POST", f"{base_b}/v1/agent/chat", json={
                "message": "What does the quarterly zephyr calibration reset?", "context_type": "knowledge"})
            response = next(e.json() for e in events if e.event == "response")
            assert "anemometer baseline" in response["answer"] and response["used_internal_kb"] is True
            assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"

            deleted = await http.delete(f"{base_a}/v1/kb/documents/doc-zephyr")
            assert deleted.status_code == 200, deleted.text
            gone = await asyncio.gather(kb_b.search(query, mode="semantic"), kb_b.search(query, mode="text"))
            assert [r.hits for r in gone] == [[], []]
