"""Stored documents cut by other chunking rules than today's (``knowledge.chunking.
CHUNK_RULES``) are re-made, on both engines: the next ingest of their folder re-chunks
them though no file changed (before: skipped by stamp, then by content hash), a posted
one posted again likewise; the counts say how many wait; a database from before
migration 32 has no rules recorded, so its documents count as older and the sample is
re-made; and a re-chunk that fails part-way leaves each document wholly old or wholly
new, the old ones still counted and re-made by the next ingest.

"Older" is what an older release with another chunker stored (``tests.support.
older_chunks``: the real ingest at another cut, the same hashes and stamps, no rules)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from app.cli.kb_file import open_kb_file
from app.knowledge_component import KnowledgeComponent
from knowledge import SAMPLE_KB_DIR, IngestReport, SampleLeft, ensure_sample_kb
from knowledge.attachments import attachment_bucket
from knowledge.kb import KnowledgeBase
from storage.kb_records import KBDocumentWrite
from storage.open import open_storage
from tests.support.older_chunks import cut_by_older_rules, stored_chunks, todays_chunks
from tests.support.opened_files import record_opened_files
from tests.support.readyz_counts import current_readiness
from toolindex.hashing import HashingEmbedder


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    return record_opened_files(monkeypatch)


def folder(root: Path) -> Path:
    d = root / "handbook"
    d.mkdir()
    for name in ("enclosure", "feeding", "cleaning", "records"):
        sentences = [f"Step {i} of the ocelot {name} round is written down in the log book." for i in range(30)]
        paragraphs = [" ".join(sentences[i : i + 3]) for i in range(0, 30, 3)]
        (d / f"{name}.md").write_text(f"# {name.title()}\n\n" + "\n\n".join(paragraphs))
    return d


async def older_count(kb: KnowledgeBase) -> int:
    return int((await kb.status.stats())["documents_older_chunking"])


async def test_a_folder_cut_by_older_rules_is_re_chunked_by_its_next_ingest(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = folder(tmp_path)
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert (await kb.ingest_paths([d])).added == 4
        note = {"id": "zebra-note", "title": "Zebra rotation", "text": " ".join(
            f"The zebra rotation moves the pager on day {i} of the month at noon." for i in range(30))}
        assert (await kb.ingest_documents([note])).added == 1
        assert await older_count(kb) == 0
    finally:
        await kb.aclose()
    await cut_by_older_rules(target, [(d, "default")], HashingEmbedder(dim=64))
    older = await stored_chunks(target, "default")
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert await older_count(kb) == 5  # the posted note too: no rules recorded

        opened.clear()
        report = await kb.ingest_paths([d])  # no file changed: before, all four were skipped unopened
        assert sorted(opened) == sorted(d.iterdir())
        assert (report.updated, report.rechunked, report.skipped, report.unread_files) == (4, 4, 0, 0), report
        now = await stored_chunks(target, "default")
        todays = todays_chunks(d, "default")
        assert {i: now[i] for i in todays} == todays and all(older[i] != todays[i] for i in todays)
        assert await older_count(kb) == 1

        posted = await kb.ingest_documents([note])  # the same note posted again: re-chunked
        assert (posted.updated, posted.rechunked, posted.skipped) == (1, 1, 0), posted
        assert await older_count(kb) == 0
        assert (await kb.ingest_documents([note])).skipped == 1

        opened.clear()
        again = await kb.ingest_paths([d])
        assert opened == [] and (again.unread_files, again.rechunked, again.updated) == (4, 0, 0), again
    finally:
        await kb.aclose()


async def test_a_database_from_before_migration_32_re_makes_the_sample(target: str) -> None:
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        first = await ensure_sample_kb(kb)
        assert isinstance(first, IngestReport) and first.added > 0
        assert await ensure_sample_kb(kb) is SampleLeft.CURRENT
        # A conversation's attachment: never in ``/readyz``'s counts, which answer anyone.
        note = {"id": "bob-notes", "title": "Notes", "text": "Zeppelin mooring notes for the attic."}
        attached = await kb.ingest_documents([note], bucket=attachment_bucket("bob", "c-1"), private=True)
        assert attached.added == 1
    finally:
        await kb.aclose()
    # The database as release 31 left it: no rules column, version 32 not applied.
    storage = await open_storage(target)
    try:
        await storage.runs.sql.execute(
            [
                ("ALTER TABLE kb_documents DROP COLUMN chunk_rules", ()),
                ("DELETE FROM schema_version WHERE version = 32", ()),
            ]
        )
    finally:
        await storage.close()
    kb = await open_kb_file(target, HashingEmbedder(dim=64))  # migrates: the column is back, empty
    try:
        assert await older_count(kb) == first.added  # the sample's, not the attachment
        report = await ensure_sample_kb(kb)
        assert isinstance(report, IngestReport), report
        assert (report.updated, report.rechunked, report.added) == (first.added, first.added, 0), report
        assert await older_count(kb) == 0
        assert await ensure_sample_kb(kb) is SampleLeft.CURRENT
    finally:
        await kb.aclose()


class WriteFails(Exception):
    pass


async def test_a_re_chunk_cut_short_leaves_each_document_whole(target: str, tmp_path: Path) -> None:
    d = folder(tmp_path)
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert (await kb.ingest_paths([d])).added == 4
    finally:
        await kb.aclose()
    await cut_by_older_rules(target, [(d, "default")], HashingEmbedder(dim=64))
    older, todays = await stored_chunks(target, "default"), todays_chunks(d, "default")

    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        index: Any = kb.index
        index.chunks_per_write = 1  # one document a write
        real = index.write_documents
        writes = 0

        async def second_write_fails(bucket: str, fields: Any, docs: Sequence[KBDocumentWrite]) -> list[list[int]]:
            nonlocal writes
            writes += 1
            if writes == 2:
                raise WriteFails("the database went away")
            result: list[list[int]] = await real(bucket, fields, docs)
            return result

        index.write_documents = second_write_fails
        with pytest.raises(WriteFails):
            await kb.ingest_paths([d])
        index.write_documents = real
        now = await stored_chunks(target, "default")
        assert set(now) == set(todays)
        remade = [i for i in todays if now[i] == todays[i]]
        kept = [i for i in todays if now[i] == older[i]]
        assert sorted(remade + kept) == sorted(todays) and kept, (remade, kept)  # never a mix
        assert await older_count(kb) == len(kept)

        report = await kb.ingest_paths([d])
        assert report.rechunked == len(kept) and await stored_chunks(target, "default") == todays, report
        assert await older_count(kb) == 0
    finally:
        await kb.aclose()


async def test_the_sample_beside_others_documents_is_named_with_its_folder(target: str, tmp_path: Path) -> None:
    """A bucket holding the sample and someone's documents (``agentchat ingest`` puts them
    into ``default``, the sample's bucket, unless told otherwise) is never touched by the
    start, so the sample's documents there keep their older chunks. ``/readyz`` counted
    them for ever and said only "run agentchat ingest on their folder": the user's own
    ingest left the count at the sample's documents. It now says how many are the
    sample's and the command that re-chunks them, which brings the count to 0."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "ocelots.md").write_text("# Ocelots\n\nThe ocelot feeding round starts at noon and is logged.")
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        first = await ensure_sample_kb(kb)
        assert isinstance(first, IngestReport) and first.added > 0
        assert (await kb.ingest_paths([mine])).added == 1  # into ``default``, beside the sample
    finally:
        await kb.aclose()
    storage = await open_storage(target)
    try:  # as migration 32 leaves a database from before it
        await storage.runs.sql.execute([("UPDATE kb_documents SET chunk_rules = NULL", ())])
    finally:
        await storage.close()

    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        component = KnowledgeComponent(kb=kb)
        await component.ingest_sample()
        assert component.sample.startswith("kept as stored"), component.sample
        assert (await kb.ingest_paths([mine])).rechunked == 1  # the user's own: re-chunked
        older = (await current_readiness(component))["older_chunking"]
        assert older["documents"] == older["sample_documents"] == first.added, older
        command = f"`agentchat ingest {SAMPLE_KB_DIR} --bucket default`"
        assert command in older["detail"], older

        report = await kb.ingest_paths([SAMPLE_KB_DIR])  # what the detail says
        assert (report.rechunked, report.added, report.deleted) == (first.added, 0, 0), report
        assert (await current_readiness(component))["older_chunking"] == {"documents": 0}
    finally:
        await kb.aclose()
