"""Documents cut by *newer* chunking rules than this release's (``knowledge.chunking.
CHUNK_RULES``) are left alone, on both engines: what a release N process finds on a
database shared with release N+1 replicas during a rolling upgrade, or after a rollback.

Before, every comparison was ``!=``: release N took N+1's documents for older ones, so
its start re-made the sample down to its own cut, its ingest of an unchanged folder (or
a document posted again) re-chunked them, and ``/readyz`` counted them as "older
chunking" and told the operator to ingest them again - then N+1 re-made them up again,
at every start. Now only lower rules (or none: a document stored before migration 32)
are older; newer ones are searched as they are (the chunk rows' shape is the same), and
``/readyz`` says the store holds them (``newer_chunking``: not an error, nothing to do).

"Newer" is made the way ``tests.support.older_chunks`` makes "older": the real ingest at
another cut, the hashes and stamps put back, and the documents recorded as cut by rules
``CHUNK_RULES + 1`` - what a process of this release reads from a newer release's rows,
every reader of the constant running as shipped.
"""

from __future__ import annotations

from pathlib import Path

from app.cli.kb_file import open_kb_file
from app.knowledge_component import KnowledgeComponent
from knowledge import SAMPLE_KB_DIR, IngestReport, SampleLeft, ensure_sample_kb
from knowledge.chunking import CHUNK_RULES
from knowledge.kb import KnowledgeBase
from knowledge.sample import older_sample_documents
from storage.open import open_storage
from tests.support.older_chunks import cut_by_other_rules, stored_chunks, todays_chunks
from toolindex.hashing import HashingEmbedder

NEWER = CHUNK_RULES + 1


def folder(root: Path) -> Path:
    d = root / "handbook"
    d.mkdir()
    for name in ("enclosure", "feeding", "cleaning"):
        sentences = [f"Step {i} of the ocelot {name} round is written down in the log book." for i in range(30)]
        paragraphs = [" ".join(sentences[i : i + 3]) for i in range(0, 30, 3)]
        (d / f"{name}.md").write_text(f"# {name.title()}\n\n" + "\n\n".join(paragraphs))
    return d


async def chunking_counts(kb: KnowledgeBase) -> tuple[int, int]:
    stats = await kb.status.stats()
    return int(stats["documents_older_chunking"]), int(stats["documents_newer_chunking"])


async def test_documents_cut_by_newer_rules_are_left_alone_and_not_counted_older(target: str, tmp_path: Path) -> None:
    d = folder(tmp_path)
    note = {
        "id": "zebra-note",
        "title": "Zebra rotation",
        "text": " ".join(f"The zebra rotation moves the pager on day {i} of the month at noon." for i in range(30)),
    }
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert (await kb.ingest_paths([d])).added == 3
        assert (await kb.ingest_documents([note])).added == 1
    finally:
        await kb.aclose()
    await cut_by_other_rules(target, [(d, "default")], HashingEmbedder(dim=64), rules=NEWER)
    newer = await stored_chunks(target, "default")
    todays = todays_chunks(d, "default")
    assert all(newer[i] != todays[i] for i in todays)  # another cut than this release's
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert await chunking_counts(kb) == (0, 4)  # before: (4, ...) - "ingest them again"

        report = await kb.ingest_paths([d])  # no file changed: skipped by their stamps
        assert (report.rechunked, report.updated, report.unread_files) == (0, 0, 3), report
        posted = await kb.ingest_documents([note])  # the same note posted again: skipped
        assert (posted.rechunked, posted.updated, posted.skipped) == (0, 0, 1), posted
        assert await stored_chunks(target, "default") == newer  # the newer cut kept, not cut down
        assert await chunking_counts(kb) == (0, 4)

        knowledge = await KnowledgeComponent(kb=kb).readiness()
        assert knowledge["older_chunking"] == {"documents": 0}, knowledge
        newer_check = knowledge["newer_chunking"]
        assert newer_check["documents"] == 4 and "rolling upgrade" in newer_check["detail"], newer_check

        edited = {**note, "text": note["text"] + " Twice on Sundays."}
        changed = await kb.ingest_documents([edited])  # a change is cut by this release's rules
        assert (changed.updated, changed.rechunked) == (1, 0), changed
        assert await chunking_counts(kb) == (0, 3)
    finally:
        await kb.aclose()


async def test_a_document_stored_before_migration_32_stays_older_beside_newer_ones(target: str, tmp_path: Path) -> None:
    d = folder(tmp_path)
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert (await kb.ingest_paths([d])).added == 3
    finally:
        await kb.aclose()
    await cut_by_other_rules(target, [(d, "default")], HashingEmbedder(dim=64), rules=NEWER)
    storage = await open_storage(target)
    try:  # one of them as migration 32 leaves a document stored before it: rules unknown
        await storage.runs.sql.execute(
            [("UPDATE kb_documents SET chunk_rules = NULL WHERE source = ?", ("handbook/feeding.md",))]
        )
    finally:
        await storage.close()
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert await chunking_counts(kb) == (1, 2)
        report = await kb.ingest_paths([d])
        assert (report.rechunked, report.unread_files) == (1, 2), report
        feeding = [i for i in todays_chunks(d, "default") if i.startswith("feeding-")]
        now, todays = await stored_chunks(target, "default"), todays_chunks(d, "default")
        assert len(feeding) == 1 and now[feeding[0]] == todays[feeding[0]]
        assert await chunking_counts(kb) == (0, 2)
    finally:
        await kb.aclose()


async def test_a_start_leaves_a_sample_cut_by_newer_rules_alone(target: str, tmp_path: Path) -> None:
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        first = await ensure_sample_kb(kb)
        assert isinstance(first, IngestReport) and first.added > 0
    finally:
        await kb.aclose()
    await cut_by_other_rules(target, [(SAMPLE_KB_DIR, "default")], HashingEmbedder(dim=64), rules=NEWER)
    newer = await stored_chunks(target, "default")
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert await ensure_sample_kb(kb) is SampleLeft.CURRENT  # before: re-made down to this release's cut
        assert await stored_chunks(target, "default") == newer
        assert await older_sample_documents(kb) == 0
        assert await chunking_counts(kb) == (0, first.added)

        mine = tmp_path / "mine"  # beside the sample: the start leaves the bucket alone, /readyz counts
        mine.mkdir()
        (mine / "ocelots.md").write_text("# Ocelots\n\nThe ocelot feeding round starts at noon and is logged.")
        assert (await kb.ingest_paths([mine])).added == 1
        component = KnowledgeComponent(kb=kb)
        await component.ingest_sample()
        assert component.sample.startswith("kept as stored"), component.sample
        knowledge = await component.readiness()
        assert knowledge["older_chunking"] == {"documents": 0}, knowledge
        assert knowledge["newer_chunking"]["documents"] == first.added, knowledge
    finally:
        await kb.aclose()
