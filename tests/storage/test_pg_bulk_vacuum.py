"""The vacuum at a bulk load's end (``PostgresKBIndex._vacuum_postings``) is upkeep: it
makes the postings' reads index-only sooner than autovacuum would. When it cannot run
(here: another session holds a lock VACUUM needs, past the pool's ``lock_timeout``), the
load — its rows committed, its indexes built — has still succeeded; the vacuum's failure
is logged, not raised as a failed load (nor as "database unreachable").
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from knowledge.kb import KnowledgeBase
from knowledge.textnorm import content_terms
from storage.kb_records import KBScope, KBTextTuning
from tests.support.corpus import stdlib_documents
from tests.support.postgres import TestPostgres

pytestmark = pytest.mark.postgres


@pytest.fixture
async def small_kb(pg_server: TestPostgres) -> AsyncIterator[tuple[KnowledgeBase, Any, str]]:
    """A knowledge base already holding documents (a later load defers no index), on a
    pool whose lock waits give up after 200 ms."""
    from storage.postgres import PostgresOptions, open_postgres_storage

    with pg_server.database() as url:
        storage = await open_postgres_storage(url, PostgresOptions(lock_timeout_ms=200))
        kb = await KnowledgeBase.create(storage.kb_index, None, on_close=storage.close)
        try:
            await kb.ingest_documents(stdlib_documents()[:5], bucket="pydocs")
            yield kb, storage, url
        finally:
            await kb.aclose()


async def test_a_vacuum_that_cannot_get_its_lock_leaves_the_bulk_load_done(
    small_kb: tuple[KnowledgeBase, Any, str], caplog: pytest.LogCaptureFixture
) -> None:
    kb, storage, url = small_kb
    docs = stdlib_documents()[5:10]
    caplog.set_level(logging.WARNING, logger="agentchat.storage")
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as other:
        # Writes go on beside this lock (ROW EXCLUSIVE does not conflict with it); a
        # VACUUM of kb_chunks cannot start until it is released.
        await other.execute("SET lock_timeout = '10s'")
        await other.execute("LOCK TABLE kb_chunks IN SHARE UPDATE EXCLUSIVE MODE")
        async with kb.bulk_load():
            result = await kb.ingest_documents(docs, bucket="pydocs")
        await other.rollback()
    assert not result.rejected
    assert "the vacuum after a bulk load did not run" in caplog.text, caplog.text
    # The loaded documents are there and found.
    terms = content_terms(docs[0]["title"])
    found = await storage.kb_index.text_candidates(terms, KBScope("pydocs"), 10, KBTextTuning())
    titles = await storage.kb_index._db.fetchall(
        "SELECT DISTINCT d.title FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id WHERE c.id = ANY(%s)",
        (found.ids,),
    )
    assert docs[0]["title"] in {t for (t,) in titles}, (terms, titles)
