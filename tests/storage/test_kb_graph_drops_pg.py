"""A deleted bucket's graphs are dropped in the background (``GraphUpkeep.drop``), never
awaited by the delete (found in review): the drop needs the DDL lock every graph build
and drop shares, and while another replica builds any bucket's graph (minutes at 1M
vectors) ``DELETE /v1/kb/buckets/{name}`` and a conversation's deletion (its
attachments' bucket) hung, although the bucket's rows were already gone; a failed drop
failed a delete that had committed (a 500). Here the lock is held by another session, as
another replica's build holds it."""

from __future__ import annotations

import asyncio

import numpy as np
import psycopg

from storage.postgres import PostgresStorage
from storage.postgres.kb_graph_queue import DDL_LOCK
from tests.storage.test_kb_graph_builds_pg import THRESHOLD, _state, _unit, _write, observer, storage  # noqa: F401

DELETE_S = 10.0


async def test_deleting_a_bucket_does_not_wait_for_another_replicas_build(
    storage: PostgresStorage,  # noqa: F811
    observer: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
) -> None:
    kb = storage.kb_index
    rng = np.random.default_rng(7)
    await _write(storage, "big", "g", _unit(rng.normal(size=(THRESHOLD + 20, 12))))
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    assert await _state(observer, "big") is True
    other = await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True, connect_timeout=10)
    try:
        cur = await other.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (DDL_LOCK,))
        assert (await cur.fetchone()) == (True,)  # another replica's build under way
        try:
            gone = await asyncio.wait_for(kb.delete_bucket("big"), DELETE_S)
        except TimeoutError:
            raise AssertionError(
                f"deleting the bucket still waited after {DELETE_S:.0f} s for another session's graph DDL lock"
            ) from None
        assert gone is not None and len(gone) == THRESHOLD + 20
    finally:
        await other.close()  # releases the lock; the queued drop then runs
    await asyncio.wait_for(kb.graph_builds_done(), 60)


async def test_a_failed_graph_drop_does_not_fail_a_delete_that_committed(
    storage: PostgresStorage,  # noqa: F811
    observer: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
    monkeypatch: object,
) -> None:
    """The bucket's rows go in their own transaction, then its graphs are dropped by the
    background worker: when that drop fails (here: the builder cannot connect, as with
    ``too many connections``), the delete still answers for its committed rows (it
    raised, and the route answered 500 with the bucket gone)."""
    import pytest

    kb = storage.kb_index
    rng = np.random.default_rng(8)
    await _write(storage, "big", "g", _unit(rng.normal(size=(THRESHOLD + 20, 12))))
    await asyncio.wait_for(kb.graph_builds_done(), 60)

    async def refused() -> None:
        raise psycopg.OperationalError("connection failed: FATAL: sorry, too many clients already")

    mp = pytest.MonkeyPatch()
    mp.setattr(kb._graphs, "_connect", refused)
    try:
        try:
            gone = await asyncio.wait_for(kb.delete_bucket("big"), 30)
        except psycopg.Error as exc:
            left = await storage.db.fetchone("SELECT count(*) FROM kb_documents WHERE bucket = 'big'")
            raise AssertionError(
                f"delete_bucket raised {type(exc).__name__} after its rows were deleted ({left[0]} documents left)"
            ) from None
        assert gone is not None
    finally:
        mp.undo()
    await asyncio.wait_for(kb.graph_builds_done(), 60)


async def test_a_pending_drop_leaves_a_bucket_made_again_with_its_graph(
    storage: PostgresStorage,  # noqa: F811
    observer: psycopg.AsyncConnection[tuple[object, ...]],  # noqa: F811
) -> None:
    """The bucket is deleted while another session holds the DDL lock, and written
    again past the threshold before the drop could run: the graph (a partial index on
    the bucket's name) indexes the new rows, so the drop leaves it, valid."""
    kb = storage.kb_index
    rng = np.random.default_rng(9)
    await _write(storage, "big", "g", _unit(rng.normal(size=(THRESHOLD + 20, 12))))
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    other = await psycopg.AsyncConnection.connect(storage.db.url, autocommit=True, connect_timeout=10)
    try:
        cur = await other.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (DDL_LOCK,))
        assert (await cur.fetchone()) == (True,)
        assert await asyncio.wait_for(kb.delete_bucket("big"), DELETE_S) is not None
        await _write(storage, "big", "h", _unit(rng.normal(size=(THRESHOLD + 20, 12))))
    finally:
        await other.close()
    await asyncio.wait_for(kb.graph_builds_done(), 60)
    assert await _state(observer, "big") is True


async def test_a_build_asked_for_after_close_starts_no_worker(storage: PostgresStorage) -> None:  # noqa: F811
    """A write finishing while the storage closes asks for its graph after the builds
    were stopped: no worker (and no connection nobody would close) is started for it."""
    from storage.postgres import open_postgres_storage

    other = await open_postgres_storage(storage.db.url)
    await asyncio.wait_for(other.close(), 30)
    upkeep = other.kb_index._graphs
    asked = upkeep.request(12, "late")
    assert asked.done() and asked.result() is False
    assert upkeep._worker is None
