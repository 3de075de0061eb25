"""A search's "no vectors yet" warning counts the documents it covered, on both engines.

Documents stored while the embedder could not embed wait for vectors (the re-embedding's
pending count: the whole index, ``/readyz``'s and ``/metrics``' view). A search by
meaning used to say that whole count in its ``warnings``: another user's attachment and
buckets it did not search included. Now its own scope's count
(``KBIndex.count_without_vectors``, the scope's statement): every shared bucket, one
bucket, one document, a list of buckets with the caller's own attachments. SQLite on a
file, PostgreSQL on a real server (``tests/support/postgres.py``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from app.cli.kb_file import open_kb_file
from knowledge.attachments import attachment_bucket
from knowledge.kb import KnowledgeBase
from knowledge.types import SearchResponse
from storage.postgres import open_postgres_storage
from tests.support.postgres import TestPostgres
from tests.test_unreadable_vectors_private import DocumentsDownEmbedder
from toolindex.hashing import HashingEmbedder

DOCS = [
    {"id": "kiwi", "title": "Kiwi", "text": "Kiwi birds cannot fly and live in New Zealand forests."},
    {"id": "penguin", "title": "Penguin", "text": "Penguins swim in cold southern oceans and eat krill."},
]
QUESTION = "penguins in cold southern oceans"
ATTACHMENTS = attachment_bucket("alice", "c-one")
DIM = 128

#: A knowledge base on the test's database, with this embedder (one replica's start).
Opener = Callable[[HashingEmbedder], Awaitable[tuple[KnowledgeBase, Callable[[], Awaitable[None]]]]]


def waiting(found: SearchResponse) -> list[str]:
    """``"N"`` of each "N document(s) have no vectors yet" warning."""
    return [w.split(" document(s) have no vectors yet")[0] for w in found.warnings if "no vectors yet" in w]


async def check_scopes(opened: Opener) -> None:
    kb, close = await opened(HashingEmbedder(dim=DIM))
    try:
        await kb.ingest_documents(DOCS)  # embedded: nothing of "default" waits
    finally:
        await close()
    kb, close = await opened(DocumentsDownEmbedder(dim=DIM))  # queries embed, documents do not
    try:
        hull = [{"id": "hull", "title": "Hull", "text": "Penguins swim past the keel."}]
        crane = [{"id": "crane", "title": "Crane", "text": "Penguins and cranes wade in marshes.",
                  "metadata": {"habitat": "wetland"}}]  # fmt: skip
        await kb.create_bucket("marsh", {"habitat": "TEXT"})
        assert (await kb.ingest_documents(hull, bucket=ATTACHMENTS, private=True)).queued_for_embedding == 1
        assert (await kb.ingest_documents(crane, bucket="marsh")).queued_for_embedding == 1
        assert kb.backfill.pending == 2  # the operator's view: the whole index

        assert waiting(await kb.search(QUESTION, mode="semantic")) == ["1"]  # every shared bucket: crane
        assert waiting(await kb.search(QUESTION, mode="semantic", bucket="default")) == []
        assert waiting(await kb.search(QUESTION, mode="semantic", bucket="marsh")) == ["1"]
        assert waiting(await kb.search(QUESTION, mode="semantic", bucket="marsh", doc_id="crane")) == ["1"]
        assert waiting(await kb.search(QUESTION, mode="hybrid", doc_id="kiwi")) == []
        for where in ({"title": "Crane"}, {"habitat": "wetland"}):  # a field of the document, a typed one
            assert waiting(await kb.search(QUESTION, mode="semantic", bucket="marsh", filters=where)) == ["1"], where
        own = await kb.search(QUESTION, mode="semantic", buckets=["default", ATTACHMENTS], private=[ATTACHMENTS])
        assert waiting(own) == ["1"], own.warnings  # her attachment: hull
        both = await kb.search(QUESTION, mode="semantic", buckets=["marsh", ATTACHMENTS], private=[ATTACHMENTS])
        assert waiting(both) == ["2"], both.warnings
    finally:
        await close()


async def test_sqlite_counts_what_the_search_covered(tmp_path: Path) -> None:
    async def opened(embedder: HashingEmbedder) -> tuple[KnowledgeBase, Callable[[], Awaitable[None]]]:
        kb = await open_kb_file(tmp_path / "kb.db", embedder)
        return kb, kb.aclose

    await check_scopes(opened)


@pytest.fixture
async def url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


async def test_postgres_counts_what_the_search_covered(url: str) -> None:
    async def opened(embedder: HashingEmbedder) -> tuple[KnowledgeBase, Callable[[], Awaitable[None]]]:
        storage = await open_postgres_storage(url)
        kb = await KnowledgeBase.create(storage.kb_index, embedder, schema_version=storage.schema_version)

        async def close() -> None:
            await kb.aclose()
            await storage.close()

        return kb, close

    await check_scopes(opened)
