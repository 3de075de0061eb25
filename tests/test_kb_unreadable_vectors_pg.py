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
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
import pytest

from app.knowledge_component import KnowledgeComponent
from knowledge.attachments import attachment_bucket
from knowledge.dense import dense_side
from knowledge.kb import KnowledgeBase
from storage.postgres import PostgresStorage, open_postgres_storage
from storage.postgres.database import PostgresOptions
from tests.support.deadline import until, within
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


async def _counted(kb: KnowledgeBase) -> int:
    """The whole-index count once it has landed: each replica counts in the background
    after its start (a scan of every chunk must not hold its readiness)."""

    async def landed() -> bool:
        return kb.status.unreadable_vectors is not None

    await until(landed, "the count of unreadable vectors after the start", step=0.02)
    assert kb.status.unreadable_vectors is not None
    return kb.status.unreadable_vectors


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
        assert await _counted(kb) == 1
        index = (await kb.status.semantic())["index"]
        assert (index["unreadable_vectors"], index["unreadable_documents"]) == (1, 1), index
        assert kb.status.unreadable_vectors == 1
        found = await kb.search(QUESTION, mode="semantic")
        assert "penguin" not in [h.doc_id for h in found.hits]
        assert any(
            "1 chunk(s) of 1 document(s) have stored vectors that could not be read" in w for w in found.warnings
        ), found.warnings
        assert await _counted(sibling[1]) == 1  # every replica counts after its start

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
        assert await _counted(kb) == 0
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
        await dense.count_unreadable()  # waits for the count the load began
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
        assert await _counted(kb) == 2  # the operator's view: the whole index

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


async def test_a_replica_is_ready_while_its_count_of_unreadable_vectors_is_held_back(url: str) -> None:
    """The count scans every chunk of the embedder (1.7-2.0 s warm per 1,000,000 chunks,
    the whole heap read cold): a replica's start waited for it, every start of a 10M-chunk
    corpus tens of seconds, for a case that is rare. Now it runs in the background: the
    knowledge base is created and ready while the count is held (a gate in front of the
    engine's own count here), ``/readyz`` says it is still counting - not 0 - and once it
    lands the count, the metric's value and the search's warning follow."""
    await _ingested_with_penguin_cut(url)
    storage = await open_postgres_storage(url)
    index = storage.kb_index
    engine_count = index.unreadable_vectors
    gate, asked = asyncio.Event(), asyncio.Event()

    async def held(embed_model: str, dim: int, doc_ids: Sequence[str] | None = None) -> dict[str, int]:
        if doc_ids is None:  # the whole count
            asked.set()
            await gate.wait()
        return await engine_count(embed_model, dim, doc_ids)

    index.unreadable_vectors = held  # type: ignore[method-assign]
    kb: KnowledgeBase | None = None
    try:
        kb = await within(
            KnowledgeBase.create(index, HashingEmbedder(dim=128), schema_version=storage.schema_version),
            "the knowledge base's start while its count of unreadable vectors is held",
        )
        await within(asked.wait(), "the count to begin")
        ready = await KnowledgeComponent(kb).readiness()
        assert ready["ok"], ready
        index_status = ready["semantic_search"]["index"]
        assert (index_status["unreadable_vectors"], index_status["unreadable_documents"]) == (None, None)
        assert index_status["unreadable_count"] == "counting", index_status
        assert kb.status.unreadable_vectors is None  # the gauge is left out, not 0
        found = await kb.search(QUESTION, mode="semantic")
        assert not any("could not be read" in w for w in found.warnings), found.warnings

        gate.set()
        assert await _counted(kb) == 1
        index_status = (await kb.status.semantic())["index"]
        assert (index_status["unreadable_vectors"], index_status["unreadable_count"]) == (1, "counted")
        found = await kb.search(QUESTION, mode="semantic")
        assert any("1 chunk(s) of 1 document(s)" in w for w in found.warnings), found.warnings
    finally:
        gate.set()
        if kb is not None:
            await kb.aclose()
        await storage.close()


async def until_the_count_waits_on_the_lock(url: str) -> None:
    """Until the start's count of unreadable vectors waits in PostgreSQL for a lock on
    the chunks' table (watched from a connection of its own)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, **GUARDED) as watcher:

        async def count_waits_on_the_lock() -> bool:
            cur = await watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%vector_dims%' AND pid <> pg_backend_pid()"
            )
            row = await cur.fetchone()
            return row is not None and row[0] > 0

        await until(count_waits_on_the_lock, "the count to wait for the table lock", step=0.02)


async def test_a_close_during_the_count_ends_it(url: str) -> None:
    """The count waits in PostgreSQL (another session holds the chunks' table locked): the
    start returns all the same, and closing the knowledge base cancels the count and waits
    for it - no task left behind, the storage closes."""
    await _ingested_with_penguin_cut(url)
    async with await psycopg.AsyncConnection.connect(url, **GUARDED) as locker:
        await locker.execute("LOCK TABLE kb_chunks IN ACCESS EXCLUSIVE MODE")
        storage = await open_postgres_storage(url)
        try:
            kb = await within(
                KnowledgeBase.create(storage.kb_index, HashingEmbedder(dim=128), schema_version=storage.schema_version),
                "the knowledge base's start while the chunks' table is locked",
            )
            await until_the_count_waits_on_the_lock(url)
            assert [t for t in asyncio.all_tasks() if t.get_name() == "kb-unreadable-count"]
            await within(kb.aclose(), "the close during the count")
            assert not [t for t in asyncio.all_tasks() if t.get_name() == "kb-unreadable-count"]
            assert kb.status.unreadable_vectors is None
        finally:
            await within(storage.close(), "the storage's close after the count was cancelled")
        await locker.rollback()


async def test_the_first_back_fill_pass_takes_the_starts_count_rather_than_scanning_again(url: str) -> None:
    """The leader starts its back-fill pass at once, and the pass counts before it repairs:
    beside the start's count still under way that was a second scan of every chunk. It
    waits for the start's count and repairs what it found."""
    await _ingested_with_penguin_cut(url)
    storage = await open_postgres_storage(url)
    index = storage.kb_index
    engine_count = index.unreadable_vectors
    gate, whole_counts = asyncio.Event(), []

    async def held(embed_model: str, dim: int, doc_ids: Sequence[str] | None = None) -> dict[str, int]:
        if doc_ids is None:
            whole_counts.append(embed_model)
            await gate.wait()
        return await engine_count(embed_model, dim, doc_ids)

    index.unreadable_vectors = held  # type: ignore[method-assign]
    kb = await KnowledgeBase.create(index, HashingEmbedder(dim=128), schema_version=storage.schema_version)
    try:
        passing = asyncio.create_task(kb.backfill.run_pass())

        async def count_begun() -> bool:
            return len(whole_counts) >= 1

        await until(count_begun, "the start's count to begin", step=0.01)
        gate.set()
        assert await within(passing, "the pass") == 1  # penguin re-embedded
        assert len(whole_counts) == 1
        assert kb.status.unreadable_vectors == 0
    finally:
        gate.set()
        await kb.aclose()
        await storage.close()


async def test_a_failed_count_at_start_is_said_and_counted_again_at_the_next_reload(url: str) -> None:
    """The start's count in the background may fail (the database away for a moment): the
    start no longer fails with it, so ``/readyz`` says why it has no count, and a replica
    that does not lead the back-fill passes counts again when it takes another process's
    change in (``reload``) rather than never."""
    await _ingested_with_penguin_cut(url)
    storage = await open_postgres_storage(url)
    index = storage.kb_index
    engine_count = index.unreadable_vectors
    failures = [RuntimeError("the database went away")]

    async def failing_once(embed_model: str, dim: int, doc_ids: Sequence[str] | None = None) -> dict[str, int]:
        if doc_ids is None and failures:
            raise failures.pop()
        return await engine_count(embed_model, dim, doc_ids)

    index.unreadable_vectors = failing_once  # type: ignore[method-assign]
    kb = await KnowledgeBase.create(index, HashingEmbedder(dim=128), schema_version=storage.schema_version)
    other = await _opened(url)
    try:

        async def said_failed() -> bool:
            return str((await kb.status.semantic())["index"]["unreadable_count"]).startswith("failed: ")

        await until(said_failed, "the failed count to be shown", step=0.02)
        assert kb.status.unreadable_vectors is None
        await other[1].ingest_documents([{"id": "crane", "title": "Crane", "text": "Cranes wade in marshes."}])

        async def counted_after_the_change() -> bool:
            await kb.search(QUESTION, mode="semantic")  # takes the other replica's change in
            return kb.status.unreadable_vectors == 1

        await until(counted_after_the_change, "the count after the next reload", step=0.05)
    finally:
        await _closed(*other)
        await kb.aclose()
        await storage.close()
