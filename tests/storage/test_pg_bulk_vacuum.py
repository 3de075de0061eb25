"""The vacuum at a bulk load's end (``kb_bulk_load.BulkLoad._vacuum_postings``) is upkeep: it
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


async def _unmarked_postings(storage: Any) -> int:
    from storage.postgres.kb_vacuum import UNMARKED_POSTINGS

    row = await storage.kb_index._db.fetchone(UNMARKED_POSTINGS)
    assert row is not None
    return int(row[0])


async def test_a_vacuum_pass_that_leaves_postings_pages_unmarked_is_followed_by_another(
    small_kb: tuple[KnowledgeBase, Any, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What left pages unmarked in the suite was a commit elsewhere not yet flushed (see
    ``storage.postgres.kb_vacuum``); here, deterministically, a snapshot another session
    holds from before the load until the first pass has ended: that pass can mark none
    of the load's pages, the next one (the snapshot gone) marks them all."""
    from storage.postgres import kb_vacuum

    kb, storage, url = small_kb
    passes: list[int] = []
    first_pass = kb_vacuum.vacuum_pass

    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as holder:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await holder.execute("SELECT count(*) FROM kb_documents")  # the snapshot is taken here

        async def observed(conn: Any, tables: str) -> int:
            unmarked = await first_pass(conn, tables)
            passes.append(unmarked)
            if len(passes) == 1:
                await holder.rollback()  # the horizon moves on
            return unmarked

        monkeypatch.setattr(kb_vacuum, "vacuum_pass", observed)
        async with kb.bulk_load():
            result = await kb.ingest_documents(stdlib_documents()[5:40], bucket="pydocs")
    assert not result.rejected
    # Two passes, or three if a commit elsewhere (another database's) held off the second's marks.
    assert len(passes) >= 2 and passes[0] > 0 and passes[-1] == 0, passes
    assert await _unmarked_postings(storage) == 0


async def test_the_vacuum_passes_are_bounded_and_the_load_stands(
    small_kb: tuple[KnowledgeBase, Any, str], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot held through every pass (a long report on another replica): the vacuum
    gives up after ``VACUUM_PASSES``, says how many pages it left, and the load stands."""
    from storage.postgres import kb_vacuum

    kb, storage, url = small_kb
    passes: list[int] = []
    first_pass = kb_vacuum.vacuum_pass

    async def observed(conn: Any, tables: str) -> int:
        passes.append(await first_pass(conn, tables))
        return passes[-1]

    monkeypatch.setattr(kb_vacuum, "vacuum_pass", observed)
    caplog.set_level(logging.INFO, logger="agentchat.storage")
    docs = stdlib_documents()[5:40]
    async with await psycopg.AsyncConnection.connect(url, connect_timeout=10) as holder:
        await holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        await holder.execute("SELECT count(*) FROM kb_documents")
        async with kb.bulk_load():
            result = await kb.ingest_documents(docs, bucket="pydocs")
        await holder.rollback()
    assert not result.rejected
    assert len(passes) == kb_vacuum.VACUUM_PASSES and all(p > 0 for p in passes), passes
    assert f"left {passes[-1]} postings pages unmarked" in caplog.text, caplog.text
    row = await storage.kb_index._db.fetchone("SELECT count(*) FROM kb_documents")
    assert row == (40,)
