"""The knowledge base's generation (``storage/stores/kb_generation.py``, migration 28) on
both engines: every write counts it up in its own transaction, the writer alone calls
the count its own, and another process's change reaches what this one caches (bucket
schemas, text statistics) before its next search.

"Another process" is a second storage bundle opened on the same database: its own
connections, nothing shared in memory.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from knowledge.buckets import typed_values
from knowledge.filters import FilterError
from knowledge.kb import KnowledgeBase
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBVectorWrite
from toolindex.hashing import HashingEmbedder


def document(doc_id: str, text: str, typed: tuple[Any, ...] = ()) -> KBDocumentWrite:
    return KBDocumentWrite(
        id=doc_id,
        title=doc_id,
        source="test",
        url=None,
        content_hash="h1",
        metadata={},
        chars=len(text),
        chunks=[KBChunkWrite(0, "", text)],
        vectors=None,
        embed_model=None,
        embed_dim=None,
        typed=typed,
        origin="test",
        file_stamp="1:1",
    )


async def test_every_write_counts_the_generation_up_and_is_its_writer_s_own(two_bundles: tuple[Any, Any]) -> None:
    here, there = (b.kb_index for b in two_bundles)
    start = await here.kb_generation()
    assert await there.kb_generation() == start

    async def written(write: Any) -> Any:
        before = await here.kb_generation()
        out = await write
        after = await there.kb_generation()
        assert after == before + 1, (before, after)
        assert here.written_here(before, after) is True
        assert there.written_here(before, after) is False
        return out

    await written(here.create_bucket("b1", {"n": "INTEGER"}, typed_row=typed_values))
    (ids,) = await written(here.write_documents("b1", {"n": "INTEGER"}, [document("d1", "first text", (None,))]))
    vectors = np.ones((len(ids), 8), np.float32)
    await written(here.store_vectors("m:x", 8, [KBVectorWrite("d1", "h1", ids, vectors)]))
    await written(here.delete_documents(["d1"]))
    await written(here.delete_bucket("b1"))

    # A file's new stamp changes nothing a search sees: no generation.
    await here.create_bucket("default", {}, typed_row=typed_values)
    await here.write_documents("default", {}, [document("d2", "second text")])
    before = await here.kb_generation()
    await here.set_file_stamps([("d2", "2:2")])
    assert await there.kb_generation() == before


async def test_a_field_another_process_adds_is_known_to_this_one_s_next_search(
    two_bundles: tuple[Any, Any],
) -> None:
    """The bucket schemas are cached (the knowledge layer's and, on PostgreSQL, the
    index's own); a field added elsewhere was an unknown field here until a restart."""
    here, there = two_bundles
    server = await KnowledgeBase.create(here.kb_index, HashingEmbedder())
    cli = await KnowledgeBase.create(there.kb_index, HashingEmbedder())
    try:
        await cli.create_bucket("invoices", {"vendor": "TEXT"})
        await cli.ingest_documents(
            [{"id": "inv1", "title": "Invoice", "text": "Invoice for fjord tours", "metadata": {"vendor": "acme"}}],
            bucket="invoices",
        )
        found = await server.search("invoice", bucket="invoices", filters={"vendor": "acme"})
        assert [h.doc_id for h in found.hits] == ["inv1"]
        await cli.create_bucket("invoices", {"amount": "REAL"})
        await cli.ingest_documents(
            [{"id": "inv2", "title": "Invoice", "text": "Invoice for glacier walks", "metadata": {"amount": 1200}}],
            bucket="invoices",
        )
        # SQLite: the next search; PostgreSQL looks at most once a second (``check_every_s``).
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                found = await server.search("invoice", bucket="invoices", filters={"amount": {"$gt": 1000}})
                break
            except FilterError:
                assert server._vectors.check_every_s > 0, "SQLite must know the field at once"
                assert asyncio.get_running_loop().time() < deadline, "the field never became known here"
                await asyncio.sleep(0.05)
        assert [h.doc_id for h in found.hits] == ["inv2"]
    finally:
        await server.aclose()
        await cli.aclose()


class _HeldBeforeCommit:
    """The engine of a write whose transaction stops after its last statement (the
    generation counted up) and before its commit."""

    def __init__(self, sql: Any) -> None:
        self._sql = sql
        self.bumped = asyncio.Event()
        self.release = asyncio.Event()

    async def transact(self, fn: Any, **kw: Any) -> Any:
        async def held(tx: Any) -> Any:
            out = await fn(tx)
            self.bumped.set()
            await self.release.wait()
            return out

        return await self._sql.transact(held, **kw)

    async def transact_whole(self, fn: Any, **kw: Any) -> Any:
        """Held on the event loop (a wait there cannot run on SQLite's writer thread)."""
        return await self.transact(fn, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)


async def test_a_write_under_way_here_hides_only_its_own_generation(two_bundles: tuple[Any, Any]) -> None:
    """Between its bump and its commit a write's generation is pending: a range holding
    it cannot be decided yet (``None``), one holding only another process's generations
    is ``False`` at once; once committed it is this process's own."""
    here, there = (b.kb_index for b in two_bundles)
    await there.create_bucket("default", {}, typed_row=typed_values)
    start = await here.kb_generation()
    assert here.written_here(start, start + 1) is False  # nobody here writes: another's

    held = _HeldBeforeCommit(here._sql)
    written = here._written
    write = asyncio.create_task(written.write(held, lambda tx: tx.execute("SELECT 1")))
    try:
        await asyncio.wait_for(held.bumped.wait(), 30)
        assert here.written_here(start, start + 1) is None  # ours, not yet committed
        assert there.written_here(start, start + 1) is False
        assert here.written_here(start, start + 2) is False  # start + 2 is nobody's here
    finally:
        held.release.set()
        await asyncio.wait_for(write, 30)
    assert await there.kb_generation() == start + 1
    assert here.written_here(start, start + 1) is True
    here.seen_upto(start + 1)
    assert not written._mine and not written._pending  # kept no longer than needed


async def test_a_failed_write_leaves_no_pending_generation(two_bundles: tuple[Any, Any]) -> None:
    here, _ = (b.kb_index for b in two_bundles)
    start = await here.kb_generation()

    async def failing(tx: Any) -> None:
        raise ValueError("refused")

    with pytest.raises(ValueError):
        await here._written.write(here._sql, failing)
    assert await here.kb_generation() == start
    assert not here._written._pending and here.written_here(start, start + 1) is False
