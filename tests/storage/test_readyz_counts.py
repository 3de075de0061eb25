"""``/readyz``'s knowledge counts on both engines: a probe of a knowledge base nobody
changed reads no row of ``kb_documents`` (each probe summed every row: ~1 s of a reader
thread or a pooled connection at 1M chunks, every few seconds on every replica),
and the counts still move with every write - this process's ingest and delete, and
another process's write on the same database - once the background count the next
probe starts has ended (``tests/storage/test_readyz_counts_background.py``: a probe
never waits for it), while the readiness decision (``ok``) follows the sample's state
at once.

What a probe reads is recorded at the storage boundary: every statement the database
object is handed (``fetchone`` / ``fetchall``, which the knowledge base's stores call).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from app.knowledge_component import KnowledgeComponent
from knowledge import KnowledgeBase
from knowledge.types import DocumentIn
from tests.support.readyz_counts import current_readiness
from toolindex.hashing import HashingEmbedder

COUNTED = ("documents", "chunks", "vectors", "documents_without_current_vectors", "pending_vectors")


class Statements:
    """Every statement handed to a database object's reads, from ``start`` on."""

    def __init__(self, db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        for name in ("fetchone", "fetchall"):
            read = getattr(db, name)

            def recorded(sql: str, params: Sequence[Any] = (), *a: Any, _read: Any = read, **kw: Any) -> Any:
                self.seen.append(sql)
                return _read(sql, params, *a, **kw)

            monkeypatch.setattr(db, name, recorded)

    def start(self) -> None:
        self.seen.clear()

    def over_documents(self) -> list[str]:
        """The reads of ``kb_documents`` but the dense side's ``EXISTS`` (after the
        generation moved, ``DenseSide.reload`` asks again whether vectors exist: one row
        found ends it - a look, not a sum; when a probe's freshness check lands on it
        depends on the machine's pace)."""
        return [s for s in self.seen if "FROM kb_documents" in s and not s.startswith("SELECT EXISTS")]


def docs(*ids: str) -> list[DocumentIn]:
    return [DocumentIn(id=i, title=f"note {i}", text=f"The {i} glacier retreated by the moraine.") for i in ids]


async def counted(component: KnowledgeComponent) -> dict[str, Any]:
    """The probe's counts once they are current (counted in the background after a write)."""
    out = await current_readiness(component)
    return {k: out[k] for k in ("ok", *COUNTED)}


async def test_an_unchanged_knowledge_base_is_probed_without_reading_its_documents(
    two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = two_bundles
    kb = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64))
    elsewhere = await KnowledgeBase.create(there.kb_index, HashingEmbedder(dim=32))  # another embedder
    try:
        if here.engine == "postgres":
            # As a probe more than 30 s after the last count: the engine's own counts of
            # the vectors (kept for the searches' plans) have expired.
            from storage.postgres import kb_vectors

            monkeypatch.setattr(kb_vectors, "STATS_TTL_S", 0.0)
        component = KnowledgeComponent(kb, sample="ingested 2 chunks")
        await kb.ingest_documents(docs("a", "b"))
        statements = Statements(here.db, monkeypatch)
        first = await counted(component)
        assert first == {"ok": True, "documents": 2, "chunks": 2, "vectors": 2,
                         "documents_without_current_vectors": 0, "pending_vectors": 0}  # fmt: skip

        # A search meanwhile (PostgreSQL: past their TTL, the engine's counts are read again
        # for its plan): what it read serves the next probe too.
        assert (await kb.search("glacier moraine", mode="semantic")).hits
        statements.start()
        assert await counted(component) == first
        assert statements.over_documents() == [], "a probe of an unchanged knowledge base summed its documents"
        assert statements.seen, "the probe read nothing: the statements are not recorded where they run"

        # This process's ingest and delete: the next probe counts again.
        await kb.ingest_documents(docs("c"))
        assert (await counted(component))["documents"] == 3
        assert await kb.delete_documents(["a"]) == 1
        after_delete = await counted(component)
        assert after_delete["documents"] == after_delete["chunks"] == after_delete["vectors"] == 2, after_delete

        # Another process's write (by another embedder: one more document without
        # today's vectors): at the very next probe, nothing kept from before it.
        await elsewhere.ingest_documents(docs("d"))
        moved = await counted(component)
        assert (moved["documents"], moved["documents_without_current_vectors"], moved["pending_vectors"]) == (3, 1, 1)

        # The counts kept again, the decision is not: a failed sample ingest shows at once.
        statements.start()
        component.sample = "failed (attempt 1, trying again in 2 s): OSError: disk full"
        failed = await component.readiness()
        assert failed["ok"] is False and "could not be ingested" in failed["detail"]
        assert statements.over_documents() == []
    finally:
        await elsewhere.aclose()
        await kb.aclose()


async def test_counts_follow_a_knowledge_base_restored_to_an_older_generation(two_bundles: tuple[Any, Any]) -> None:
    """A database brought back to an earlier state under a running server (PostgreSQL
    restored from a dump, or a failover to a standby that had not received the last
    commits) brings its generation back too; the writes after it count it up through
    the same numbers again, over other rows. The counts kept for the lost timeline's
    generation must not be served when the new one reaches it."""
    here, there = two_bundles
    kb = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64))
    elsewhere = await KnowledgeBase.create(there.kb_index, HashingEmbedder(dim=64))
    try:
        component = KnowledgeComponent(kb, sample="ingested 1 chunk")
        await kb.ingest_documents(docs("a"))
        backup = await here.kb_index.kb_generation()  # the dump: document a, at this generation
        assert (await counted(component))["documents"] == 1
        await kb.ingest_documents(docs("b", "c"))
        assert await here.kb_index.kb_generation() == backup + 1
        assert (await counted(component))["documents"] == 3

        async def restore(tx: Any) -> None:  # what a restore of the dump leaves in these tables
            await tx.execute("DELETE FROM kb_documents WHERE id <> ?", ("a",))
            await tx.execute("UPDATE kb_generation SET generation = ? WHERE id = 1", (backup,))

        await there.kb_index._sql.transact_whole(restore)
        assert (await counted(component))["documents"] == 1

        # Another replica ingests one document: the generation is the lost timeline's again.
        await elsewhere.ingest_documents(docs("d"))
        assert await here.kb_index.kb_generation() == backup + 1
        assert (await counted(component))["documents"] == 2, "the counts of the lost timeline were served"
    finally:
        await elsewhere.aclose()
        await kb.aclose()


async def test_a_caller_waiting_for_a_count_of_its_generation_takes_that_count(
    two_bundles: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two callers at once that want counts holding every write before them
    (``KBStatus.stats()``, which waits; ``/readyz`` never does) after a write: the
    second waits for the first's count and takes it - it holds every write committed
    before the second arrived - even when another write commits meanwhile (an ingest
    under way writes batch after batch). It counted again after it: one count waited
    for and one more made, each ~1 s at 1M chunks (``bench/readyz_cost.py``)."""
    here, there = two_bundles
    kb = await KnowledgeBase.create(here.kb_index, HashingEmbedder(dim=64))
    elsewhere = await KnowledgeBase.create(there.kb_index, HashingEmbedder(dim=64))
    try:
        await kb.ingest_documents(docs("a"))
        assert (await kb.status.stats())["documents"] == 1
        await elsewhere.ingest_documents(docs("b"))

        count, entered, release = here.kb_index.counts, asyncio.Event(), asyncio.Event()

        async def held_count(*args: Any, **kwargs: Any) -> Any:
            if not entered.is_set():  # the first probe's count waits until the test lets it go
                entered.set()
                await release.wait()
            return await count(*args, **kwargs)

        memo = kb.status._counted
        arrived = asyncio.Event()

        class Arrivals:
            """The memo's reads of the generation: the one after the held count's is the
            second caller's, which then waits for the count (no await in between)."""

            async def kb_generation(self) -> int:
                out = await here.kb_index.kb_generation()
                if entered.is_set():
                    arrived.set()
                return out

        monkeypatch.setattr(here.kb_index, "counts", held_count)
        monkeypatch.setattr(memo, "_gens", Arrivals())
        counts_before = memo.reads
        first = asyncio.create_task(kb.status.stats())
        await entered.wait()
        second = asyncio.create_task(kb.status.stats())
        await arrived.wait()
        await elsewhere.ingest_documents(docs("c"))  # committed while both callers wait
        release.set()
        one, two = await first, await second
        # The held count read the rows after c's commit: newer than the generation it is
        # kept with (read before it), so the next call counts again.
        assert one["documents"] == two["documents"] == 3
        assert memo.reads == counts_before + 1, "the second caller counted again"
        assert (await kb.status.stats())["documents"] == 3
        assert memo.reads == counts_before + 2
    finally:
        await elsewhere.aclose()
        await kb.aclose()
