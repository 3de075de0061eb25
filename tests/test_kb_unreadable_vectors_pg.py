"""A stored chunk vector of another width than its document says, on a real PostgreSQL:
the column is an unsized ``vector``, so such a row can be stored (``agentchat migrate-db``
copies a torn SQLite vector as it is, an embedder may answer another width than it
said), and the engine's search leaves it out by its own condition (``vector_dims``).
It used to be left out uncounted, its document still embedded, never re-embedded. Now,
as on SQLite (``tests/test_kb_unreadable_vectors.py``), it is counted (``/readyz``'s
``semantic_search.index``, ``KBStatus.unreadable_vectors`` for ``/metrics``, a
search's ``warnings``) and its document is re-embedded by the back-fill pass."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from knowledge.attachments import attachment_bucket
from knowledge.dense import dense_side
from knowledge.kb import KnowledgeBase
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.database import PostgresOptions
from tests.support.deadline import until
from tests.support.postgres import GUARDED, TestPostgres
from toolindex.hashing import HashingEmbedder

DOCS = [
    {"id": "kiwi", "title": "Kiwi", "text": "Kiwi birds cannot fly and live in New Zealand forests."},
    {"id": "penguin", "title": "Penguin", "text": "Penguins swim in cold southern oceans and eat krill."},
    {"id": "ostrich", "title": "Ostrich", "text": "Ostriches run fast across the African savanna."},
]
QUESTION = "penguins in cold southern oceans"


@pytest.fixture
async def url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def _opened(url: str) -> tuple[PostgresStorage, KnowledgeBase]:
    """A replica's start: its own storage and knowledge base on the shared database."""
    storage = await open_postgres_storage(url)
    kb = await KnowledgeBase.create(storage.kb_index, HashingEmbedder(dim=128), schema_version=storage.schema_version)
    return storage, kb


async def _closed(storage: PostgresStorage, kb: KnowledgeBase) -> None:
    await kb.aclose()
    await storage.close()


async def _cut_vector(url: str, doc_id: str) -> None:
    """Store ``doc_id``'s vectors at half their width, as a copy of a torn SQLite vector does."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, **GUARDED) as conn:
        await conn.execute(
            "UPDATE kb_chunks SET embedding = ((embedding::real[])[1:64])::vector WHERE doc_id = %s", (doc_id,)
        )


async def _ingested_with_penguin_cut(url: str) -> None:
    """``DOCS`` ingested by a replica since stopped, penguin's vectors then cut."""
    storage, kb = await _opened(url)
    try:
        await kb.ingest_documents(DOCS)
    finally:
        await _closed(storage, kb)
    await _cut_vector(url, "penguin")


async def test_a_vector_of_another_width_is_counted_and_its_document_re_embedded(url: str) -> None:
    await _ingested_with_penguin_cut(url)

    leader, sibling = await _opened(url), await _opened(url)
    try:
        kb = leader[1]
        index = (await kb.status.semantic())["index"]
        assert (index["unreadable_vectors"], index["unreadable_documents"]) == (1, 1), index
        assert kb.status.unreadable_vectors == 1
        found = await kb.search(QUESTION, mode="semantic")
        assert "penguin" not in [h.doc_id for h in found.hits]
        assert any(
            "1 chunk(s) of 1 document(s) have stored vectors that could not be read" in w for w in found.warnings
        ), found.warnings
        assert sibling[1].status.unreadable_vectors == 1  # every replica counts at its start

        assert await kb.backfill.run_pass() == 1
        assert kb.status.unreadable_vectors == 0
        assert (await kb.status.semantic())["index"]["unreadable_vectors"] == 0
        found = await kb.search(QUESTION, mode="semantic")
        assert found.hits[0].doc_id == "penguin" and not found.warnings, found.warnings

        # The sibling asks again about what it counted once it takes the change in (its
        # searches look for other processes' writes at most once a second).
        async def sibling_sees_the_repair() -> bool:
            found = await sibling[1].search(QUESTION, mode="semantic")
            return not found.warnings and found.hits[0].doc_id == "penguin"

        await until(sibling_sees_the_repair, "the sibling replica to take the repair in", step=0.05)
        assert sibling[1].status.unreadable_vectors == 0
    finally:
        await _closed(*sibling)
        await _closed(*leader)

    storage, kb = await _opened(url)
    try:  # the repair was stored: a new replica counts nothing
        assert kb.status.unreadable_vectors == 0
    finally:
        await _closed(storage, kb)


async def test_a_document_replaced_here_during_a_count_is_not_counted_again(url: str) -> None:
    """The back-fill pass counts with one scan, and this process may replace a counted
    document meanwhile (an ingest: ``remove_document`` once its readable vectors are
    stored). The scan may have read the old vectors; its count set the document back,
    and ``/readyz`` and every search's ``warnings`` said it was unreadable until the
    next pass (the pass itself finds it readable and leaves it)."""
    await _ingested_with_penguin_cut(url)  # the scan reads what was stored before the replacement

    storage = await open_postgres_storage(url)
    try:
        embedder = HashingEmbedder(dim=128)
        dense = dense_side(storage.kb_index, f"{embedder.name}:{embedder.model}", embedder.dim)
        counting = asyncio.create_task(dense.count_unreadable())
        await asyncio.sleep(0)  # the scan is under way
        dense.remove_document("penguin")  # replaced here, its new vectors stored
        await counting
        assert dense.unreadable() == {}
        await dense.count_unreadable()  # a count begun after it reads the store as it is
        assert dense.unreadable() == {"penguin": 1}
    finally:
        await storage.close()


async def test_a_reload_during_a_count_keeps_what_the_count_found(url: str) -> None:
    """A replica asks again about the documents it counted when another process changes
    the knowledge base (``reload``); the back-fill pass counts them all. When the pass's
    count ended while the reload waited, the reload's answer - about the documents counted
    before - replaced the whole count, and a document newly found unreadable was out of
    ``/readyz``, the metric and the warnings until the next pass. One connection here, so
    the two queries run in the order they were asked: the count's first."""
    await _ingested_with_penguin_cut(url)

    storage = await open_postgres_storage(url, PostgresOptions(min_connections=1, max_connections=1))
    try:
        embedder = HashingEmbedder(dim=128)
        dense = dense_side(storage.kb_index, f"{embedder.name}:{embedder.model}", embedder.dim)
        await dense.load()
        assert dense.unreadable() == {"penguin": 1}
        await _cut_vector(url, "kiwi")  # another process's doing, after this replica's start
        counting = asyncio.create_task(dense.count_unreadable())
        await asyncio.sleep(0)  # the count holds the connection
        await asyncio.gather(dense.reload(), counting)
        assert dense.unreadable() == {"kiwi": 1, "penguin": 1}
    finally:
        await storage.close()


async def test_a_searchs_warning_counts_only_the_unreadable_vectors_it_covered(url: str) -> None:
    """``/readyz`` and the metric count the whole index (the operator's view), but a
    search's warning speaks to whoever searched: it counted every unreadable vector,
    another user's attachment and buckets the search did not cover included. Now only
    those of the documents it covered: its buckets, and the caller's own attachments when
    searched (``KBIndex.docs_in_scope``, the scope's own statement)."""
    attachments = attachment_bucket("alice", "c-one")
    storage, kb = await _opened(url)
    try:
        await kb.ingest_documents(DOCS)
        await kb.ingest_documents([{"id": "hull", "title": "Hull", "text": "Penguins swim past the keel."}],
                                  bucket=attachments, private=True)  # fmt: skip
        await kb.ingest_documents([{"id": "crane", "title": "Crane", "text": "Cranes wade in marshes."}],
                                  bucket="marsh")  # fmt: skip
    finally:
        await _closed(storage, kb)
    await _cut_vector(url, "penguin")
    await _cut_vector(url, "hull")

    storage, kb = await _opened(url)
    try:
        assert kb.status.unreadable_vectors == 2  # the operator's view: the whole index

        def warned(found: Any) -> list[str]:
            return [w.split(" have stored vectors")[0] for w in found.warnings if "could not be read" in w]

        every_shared = await kb.search(QUESTION, mode="semantic")  # the attachment is not searched
        assert warned(every_shared) == ["1 chunk(s) of 1 document(s)"], every_shared.warnings
        assert warned(await kb.search(QUESTION, mode="semantic", bucket="marsh")) == []
        assert warned(await kb.search(QUESTION, mode="semantic", doc_id="kiwi")) == []
        own = await kb.search(QUESTION, mode="semantic", buckets=["default", attachments], private=[attachments])
        assert warned(own) == ["2 chunk(s) of 2 document(s)"], own.warnings
    finally:
        await _closed(storage, kb)
