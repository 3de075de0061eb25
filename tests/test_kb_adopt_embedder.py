"""``KnowledgeBase.adopt_embedder`` while an ingest runs on the text-only parts, and while
another process stores vectors in the same SQLite file (the last test).

An ingest that began before the embedder was adopted keeps the parts it began with and
stores its documents without vectors; if it commits after the re-embedding's first pass
(which found nothing to do), nothing used to call the re-embedding back: the text-only
ingest queues nothing (there was no embedder to fail), so its documents waited for the
slow timer (``reembed_interval_s``, 5 minutes by default), unseen by searches by meaning,
while ``/readyz`` said they were being re-embedded. On a real SQLite and PostgreSQL
knowledge base, the ingest held at its write until the pass is over.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.cli.kb_file import open_kb_file
from tests.support.deadline import until
from tests.support.postgres import TestPostgres
from toolindex.hashing import HashingEmbedder

NOTE = {"id": "zebra-note", "title": "Zebra rotation",
        "text": "The zebra rotation schedule moves the on-call pager every Tuesday at noon."}


async def ingest_across_adoption(where: str) -> None:
    kb = await open_kb_file(where, None)
    try:
        index: Any = kb.index
        write_documents = index.write_documents
        arrived, release = asyncio.Event(), asyncio.Event()

        async def held_write(*args: Any, **kwargs: Any) -> Any:
            arrived.set()
            await release.wait()
            return await write_documents(*args, **kwargs)

        index.write_documents = held_write  # the real write, once released
        ingest = asyncio.create_task(kb.ingest_documents([NOTE]))
        await until(arrived.is_set, "the text-only ingest at its write")

        await kb.adopt_embedder(HashingEmbedder(dim=128))
        kb.backfill.start()
        await until(lambda: kb.backfill.state == "idle", "the re-embedding's first pass over")
        release.set()
        report = await ingest
        assert report.added == 1 and not report.rejected, report

        await until(lambda: kb.backfill.reembedded == 1, "the document ingested meanwhile re-embedded", timeout=15)
        found = await kb.search("which day does the on-call pager move", mode="semantic")
        assert found.mode == "semantic" and [h.doc_id for h in found.hits][:1] == [NOTE["id"]], found
    finally:
        await kb.aclose()


async def test_an_ingest_under_way_at_the_adoption_gets_its_vectors(tmp_path: Path) -> None:
    await ingest_across_adoption(str(tmp_path / "kb.db"))


@pytest.mark.postgres
async def test_an_ingest_under_way_at_the_adoption_gets_its_vectors_on_postgresql(pg_server: TestPostgres) -> None:
    with pg_server.database() as url:
        await ingest_across_adoption(url)


async def test_vectors_another_process_stored_while_the_adoption_loaded_are_searched(tmp_path: Path) -> None:
    """Two processes on one SQLite file (``serve --workers``: the leader adopted first and
    re-embeds). The other loads its new matrix; another process's vectors commit after
    that read, and a search here takes the change in before the switch - into the old,
    text-only dense side. The new matrix must be reloaded: it used to miss those vectors
    until yet another change came from elsewhere (the generation was counted as seen)."""
    path = tmp_path / "kb.db"
    leader = await open_kb_file(path, HashingEmbedder(dim=128))
    late = await open_kb_file(path, None)
    try:
        index: Any = late.index
        iter_vectors = index.iter_vectors
        read, release = asyncio.Event(), asyncio.Event()

        async def read_then_held(*args: Any, **kwargs: Any) -> Any:
            async for rows in iter_vectors(*args, **kwargs):
                yield rows
            read.set()
            await release.wait()

        index.iter_vectors = read_then_held  # the real read; the switch waits
        adopting = asyncio.create_task(late.adopt_embedder(HashingEmbedder(dim=128)))
        await until(read.is_set, "the new matrix read")
        await leader.ingest_documents([NOTE])  # its vectors, committed after that read
        await late.search("zebra rotation", mode="text")  # takes the change in, before the switch
        release.set()
        await adopting

        async def found() -> bool:
            response = await late.search("which day does the on-call pager move", mode="semantic")
            return response.mode == "semantic" and [h.doc_id for h in response.hits][:1] == [NOTE["id"]]

        await until(found, "the vectors stored elsewhere searched by meaning", timeout=10)
    finally:
        await late.aclose()
        await leader.aclose()
