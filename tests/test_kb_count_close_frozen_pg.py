"""A knowledge base's close while its start's count of unreadable vectors waits on a
frozen PostgreSQL is bounded (``DatabaseDense.aclose``, ``app/ops/close_budget.py``).

The count is one statement scanning every chunk; the close cancels it and used to wait
for it with no bound. A cancelled statement waits for the server to answer the cancel,
which a frozen server (SIGSTOP: a stuck disk, a paused VM) never does - psycopg gives up
after 5 s and 5 s more, and a shutdown meanwhile waited, outside any step of the close
budget. Now the close waits ``KBConfig.unreadable_count_stop_s``, names the count it left
in the log, and goes on; the count ends by itself once the server runs again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import psycopg
import pytest

from knowledge.kb import KnowledgeBase
from knowledge.types import KBConfig
from storage.postgres import open_postgres_storage
from tests.support.deadline import within
from tests.support.pg_sigstop import frozen
from tests.support.postgres import GUARDED, TestPostgres
from tests.test_kb_unreadable_vectors_pg import _ingested_with_penguin_cut, until_the_count_waits_on_the_lock
from toolindex.hashing import HashingEmbedder

COUNT_TASK = "kb-unreadable-count"


@pytest.fixture
async def url(pg_server: TestPostgres) -> AsyncIterator[str]:
    with pg_server.database() as url:
        yield url


def count_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == COUNT_TASK]


async def test_a_close_during_the_count_on_a_frozen_server_goes_on_without_it(
    pg_server: TestPostgres, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    await _ingested_with_penguin_cut(url)
    async with await psycopg.AsyncConnection.connect(url, **GUARDED) as locker:
        # The count waits in PostgreSQL (the chunks' table locked), then the server freezes.
        await locker.execute("LOCK TABLE kb_chunks IN ACCESS EXCLUSIVE MODE")
        storage = await open_postgres_storage(url)
        config = KBConfig(unreadable_count_stop_s=0.5)
        created = KnowledgeBase.create(
            storage.kb_index, HashingEmbedder(dim=128), config=config, schema_version=storage.schema_version
        )
        kb = await within(
            created,
            "the knowledge base's start while the chunks' table is locked",
        )
        await until_the_count_waits_on_the_lock(url)
        [count] = count_tasks()
        try:
            with frozen(pg_server), caplog.at_level(logging.ERROR, logger="agentchat.knowledge"):
                await within(kb.aclose(), "the close during the count on a frozen server")
                assert not count.done(), "the close waited until the cancelled count ended"
            said = "count of unreadable stored vectors did not end"
            assert any(said in r.getMessage() and getattr(r, "task", None) == COUNT_TASK for r in caplog.records), [
                r.getMessage() for r in caplog.records
            ]
            assert kb.status.unreadable_vectors is None
        finally:
            # The server runs again: the count left behind ends by itself.
            await within(asyncio.wait({count}), "the count left behind, once the server runs again")
            await locker.rollback()
            await within(storage.close(), "the storage's close")
        assert not count_tasks()
