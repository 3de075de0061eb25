"""A tree of files ingested again from another path, on both engines: its unchanged
documents are re-homed to where the tree is now, so a file gone from it has its
documents removed, and the next re-ingest finds the rest unchanged by their stamps.

The case that found it: the sample knowledge base ships inside the package, and a
document's ``origin`` is its file's path. A new release in a new virtualenv (or a Python
upgrade: ``.../python3.11/site-packages`` → ``.../python3.12/...``) moves that path;
the ingest skipped each unchanged document by its content hash and kept its old origin,
so the start read the sample again at every start ("sample updated ... unchanged"), and
a file the new release dropped was never removed. Documents are told apart by their
id (the file's ``id:`` front matter, else a hash of its path and bucket), never by their
content: two folders holding the same text are two documents, each with its own path.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import knowledge.sample
from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge import DocumentIn, IngestReport, KnowledgeBase, SampleLeft, ensure_sample_kb
from knowledge.sample import older_sample_documents, sample_documents
from llm.scripted import ScriptedProvider
from tests.conftest import running_app
from tests.support.older_chunks import cut_by_older_rules
from toolindex.hashing import HashingEmbedder

READY_DEADLINE_S = 120.0
SHIPPED = knowledge.sample.SAMPLE_KB_DIR


def installed_sample(root: Path, *, drop: int = 0) -> Path:
    """The shipped sample as an install at ``root`` holds it (``.../knowledge/sample_kb``),
    its last ``drop`` files left out (a release that no longer ships them)."""
    d = root / "site-packages" / SHIPPED.parent.name / SHIPPED.name
    shutil.copytree(SHIPPED, d)  # the files' times too: a wheel's files keep theirs
    for p in sorted(d.glob("*.md"))[len(list(d.glob("*.md"))) - drop :]:
        p.unlink()
    return d


async def origins(kb: KnowledgeBase, bucket: str = "default") -> dict[str, str]:
    """doc id → origin of every document of ``bucket`` ("" for none)."""
    ids = [d["doc_id"] for d in await kb.list_documents(bucket=bucket, limit=1000)]
    return {i: s.origin or "" for i, s in (await kb.index.document_states(ids)).items()}


@pytest.fixture
async def kb(target: str) -> AsyncIterator[KnowledgeBase]:
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        yield kb
    finally:
        await kb.aclose()


async def test_a_moved_sample_is_re_homed_and_the_file_it_dropped_removed(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = installed_sample(tmp_path / "python3.11"), installed_sample(tmp_path / "python3.12", drop=1)
    shipped = sorted(p.name for p in new.glob("*.md"))
    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", old)
    first = await ensure_sample_kb(kb)
    assert isinstance(first, IngestReport) and first.added == len(shipped) + 1, first

    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", new)
    moved = await ensure_sample_kb(kb)
    assert isinstance(moved, IngestReport) and moved.rejected == [], moved
    assert (moved.added, moved.updated, moved.skipped, moved.deleted) == (0, 0, len(shipped), 1), moved
    homes = await origins(kb)
    assert sorted(Path(o).name for o in homes.values()) == shipped, homes
    assert all(Path(o).parent == new for o in homes.values()), homes
    # Stamped where they are now: the next start reads nothing and says so.
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT
    again = await kb.ingest_paths([new])
    assert (again.unread_files, again.skipped, again.deleted) == (len(shipped), len(shipped), 0), again


async def test_own_documents_in_a_folder_named_like_the_samples_are_kept(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder of one's own whose path ends in ``knowledge/sample_kb`` (a clone of the
    project, or the package's folder copied out, with notes added beside the sample's
    files) ingested into the sample's bucket: its own files are no sample file, whatever
    the folder is called - the start re-homes the shipped ones and removes nothing."""
    clone = installed_sample(tmp_path / "clone")
    (clone / "my-notes.md").write_text("---\nid: my-notes\n---\n# My notes\n\nThe ocelot is fed at noon.\n")
    (clone / "runbook.md").write_text("# Runbook\n\nRestart the ocelot feeder on Mondays.\n")  # id from its path
    assert (await kb.ingest_paths([clone])).added == len(list(clone.glob("*.md")))
    mine = {i for i, o in (await origins(kb)).items() if Path(o).name in ("my-notes.md", "runbook.md")}
    assert len(mine) == 2

    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", installed_sample(tmp_path / "venv"))
    started = await ensure_sample_kb(kb)
    assert isinstance(started, IngestReport) and started.deleted == 0, started  # before: 2 deleted
    homes = await origins(kb)
    assert mine <= homes.keys(), homes
    # What tells them apart: the ids the sample ships.
    assert homes.keys() - mine <= knowledge.sample.SAMPLE_IDS, homes
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT


async def test_own_documents_named_like_the_samples_in_such_a_folder_are_kept(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same folder, with notes that follow the sample's own naming beside them: an
    ``id: agentchat-...`` copied from the neighbouring files, or a file named
    ``agentchat-....md`` (its id made from its name). Only ids the sample ever shipped
    are the sample's; these are the user's, and the start removes none of them."""
    clone = installed_sample(tmp_path / "clone")
    (clone / "deploy.md").write_text("---\nid: agentchat-deploy\n---\n# Deploy\n\nThe ocelot runs on host 7.\n")
    (clone / "agentchat-notes.md").write_text("# Notes\n\nRestart the ocelot feeder on Mondays.\n")
    assert (await kb.ingest_paths([clone])).added == len(list(clone.glob("*.md")))
    mine = {i for i, o in (await origins(kb)).items() if Path(o).name in ("deploy.md", "agentchat-notes.md")}
    assert len(mine) == 2 and all(i.startswith("agentchat-") for i in mine), mine

    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", installed_sample(tmp_path / "venv"))
    started = await ensure_sample_kb(kb)
    assert isinstance(started, IngestReport) and started.deleted == 0, started  # before: 2 deleted
    assert mine <= (await origins(kb)).keys()
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT


def test_every_id_the_sample_ships_is_one_of_its_ids() -> None:
    """A file added to the sample adds its id to ``SAMPLE_IDS``: a document of another
    install's sample folder is removed at a start only when its id is there, so a file
    a later release drops is removed from the installs that stored it."""
    shipped = set(knowledge.sample._shipped_ids("default"))
    assert shipped, "no sample files found"
    assert shipped <= knowledge.sample.SAMPLE_IDS, sorted(shipped - knowledge.sample.SAMPLE_IDS)


async def test_the_sample_kept_beside_others_is_counted_after_the_install_moved(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The start leaves a bucket holding someone's documents alone, so nothing re-homes
    the sample there: counted under today's folder alone, its documents were none after
    the install moved - "not added" with the sample right there, its older chunks
    uncounted - until the command the detail names re-homed them."""
    old, new = installed_sample(tmp_path / "v1"), installed_sample(tmp_path / "v2", drop=1)
    shipped = len(list(new.glob("*.md")))
    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", old)
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert isinstance(await ensure_sample_kb(kb), IngestReport)
        mine = DocumentIn(id="my-notes", title="My notes", text="Our own runbook.", source="notes/runbook.md")
        assert (await kb.ingest_documents([mine])).added == 1
    finally:
        await kb.aclose()
    await cut_by_older_rules(target, [(old, "default")], HashingEmbedder(dim=64))  # and an older chunker's

    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", new)
    kb = await open_kb_file(target, HashingEmbedder(dim=64))
    try:
        assert await ensure_sample_kb(kb) is SampleLeft.OTHERS
        # The shipped files' documents; not the one this release no longer ships.
        assert (await sample_documents(kb), await older_sample_documents(kb)) == (shipped, shipped)
        assert SampleLeft.OTHERS.status("default", shipped).startswith("kept as stored")
        report = await kb.ingest_paths([new])  # `agentchat ingest <sample dir> --bucket default`
        assert (report.rechunked, report.deleted) == (shipped, 0), report
        assert (await sample_documents(kb), await older_sample_documents(kb)) == (shipped, 0)
        assert await ensure_sample_kb(kb) is SampleLeft.OTHERS
    finally:
        await kb.aclose()


async def test_a_moved_folder_is_re_homed_and_a_file_removed_from_it_is_removed(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """``agentchat ingest DIR`` after DIR moved: same content, same bucket, the tree is
    the new truth (its files' own ids keep them the same documents)."""
    old = tmp_path / "before" / "manual"
    old.mkdir(parents=True)
    (old / "install.md").write_text("---\nid: install\n---\n# Install\n\nRun the installer, then restart.\n")
    (old / "upgrade.md").write_text("---\nid: upgrade\n---\n# Upgrade\n\nUpgrades keep your settings.\n")
    assert (await kb.ingest_paths([old], bucket="manuals")).added == 2
    new = tmp_path / "after" / "manual"
    new.parent.mkdir()
    old.rename(new)
    moved = await kb.ingest_paths([new], bucket="manuals")
    assert (moved.added, moved.updated, moved.skipped, moved.deleted) == (0, 0, 2, 0), moved
    assert await origins(kb, "manuals") == {"install": str(new / "install.md"), "upgrade": str(new / "upgrade.md")}

    (new / "upgrade.md").unlink()
    gone = await kb.ingest_paths([new], bucket="manuals")
    assert (gone.unread_files, gone.deleted) == (1, 1), gone
    assert await origins(kb, "manuals") == {"install": str(new / "install.md")}


async def test_two_folders_of_the_same_text_stay_two_documents_each_at_its_path(
    kb: KnowledgeBase, tmp_path: Path
) -> None:
    """Identity is the id, never the content: files without an ``id:`` are told apart by
    their path (and bucket), so the same text in two folders is two documents; a file
    giving an id names one document, which is where it was last read from."""
    first, second = tmp_path / "one" / "notes", tmp_path / "two" / "notes"  # both shown as notes/...
    for d in (first, second):
        d.mkdir(parents=True)
        (d / "faq.md").write_text("# FAQ\n\nThe ocelot is fed at noon.\n")
        (d / "shared.md").write_text("---\nid: shared-note\n---\n# Shared\n\nOne note, two folders.\n")
    assert (await kb.ingest_paths([first], bucket="team")).added == 2
    again = await kb.ingest_paths([second], bucket="team")
    assert (again.added, again.skipped) == (1, 1), again
    homes = await origins(kb, "team")
    faqs = sorted(o for i, o in homes.items() if i != "shared-note")
    assert faqs == [str(first / "faq.md"), str(second / "faq.md")], homes  # not merged into one
    assert homes["shared-note"] == str(second / "shared.md")

    # Each folder's re-ingest keeps its own documents where they are.
    for d in (first, second):
        report = await kb.ingest_paths([d], bucket="team")
        assert (report.added, report.updated, report.deleted) == (0, 0, 0), report
    homes = await origins(kb, "team")
    assert sorted(o for i, o in homes.items() if i != "shared-note") == faqs, homes

    # A file removed from one folder removes that folder's document only; the id both
    # give stays while the folder it was last read from still has it.
    (second / "faq.md").unlink()
    (first / "shared.md").unlink()
    assert (await kb.ingest_paths([second], bucket="team")).deleted == 1
    assert (await kb.ingest_paths([first], bucket="team")).deleted == 0
    homes = await origins(kb, "team")
    assert sorted(homes.values()) == [str(first / "faq.md"), str(second / "shared.md")], homes


async def started_sample_status(env: dict[str, str]) -> str:
    """Start the app on ``env``'s database and return ``/readyz``'s ``sample_kb`` once the
    sample's ingest at start-up has ended."""
    settings = Settings.from_env(env)
    async with (
        running_app(settings, provider=ScriptedProvider([]), embedder=HashingEmbedder(dim=64)) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        seen: dict[str, Any] = {}
        try:
            async with asyncio.timeout(READY_DEADLINE_S):
                while True:
                    seen = dict(((await http.get("/readyz")).json().get("checks") or {}).get("knowledge") or {})
                    status = str(seen.get("sample_kb") or "")
                    if status and not status.startswith(("ingesting", "failed")):
                        return status
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"the sample ingestion did not end within {READY_DEADLINE_S} s: {seen}") from None


@pytest.mark.slow  # three starts of the app
async def test_a_start_after_the_install_moved_updates_the_sample_once_then_finds_it_there(
    shared_db: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = installed_sample(tmp_path / "v1"), installed_sample(tmp_path / "v2", drop=1)
    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", old)
    assert (await started_sample_status(shared_db)).startswith("ingested"), "the first start ingests the sample"

    monkeypatch.setattr(knowledge.sample, "SAMPLE_KB_DIR", new)
    updated = await started_sample_status(shared_db)
    shipped = len(list(new.glob("*.md")))
    assert updated.endswith(f"(sample updated: 0 added, 0 updated, 1 removed, {shipped} unchanged)"), updated
    assert await started_sample_status(shared_db) == SampleLeft.CURRENT.status("default")

    kb = await open_kb_file(shared_db.get("AGENT_DATABASE_URL") or shared_db["AGENT_DB_PATH"], None)
    try:
        homes = await origins(kb)
    finally:
        await kb.aclose()
    assert sorted(Path(o) for o in homes.values()) == sorted(new.glob("*.md")), homes


async def test_a_moved_folder_is_cited_by_its_new_name(kb: KnowledgeBase, tmp_path: Path) -> None:
    """``mv notes notes-2024 && agentchat ingest notes-2024``: a search cites the folder
    by the name it has now. The document keeps its id (its ``id:``); the path it is shown
    as is part of its content hash (``knowledge.ingest_docs.content_hash``), so a renamed
    folder's file is updated - source and origin written together, its vectors reused -
    never skipped as unchanged with the old name (only a move that keeps the shown path,
    ``a/notes`` -> ``b/notes``, is a re-home of origin alone)."""
    old = tmp_path / "notes"
    old.mkdir()
    (old / "feeding.md").write_text("---\nid: feeding\n---\n# Feeding\n\nThe ocelot is fed at noon.\n")
    assert (await kb.ingest_paths([old], bucket="notes")).added == 1
    before = await kb.search("ocelot fed noon", bucket="notes")
    assert [h.source for h in before.hits] == ["notes/feeding.md"], before

    new = old.rename(tmp_path / "notes-2024")
    moved = await kb.ingest_paths([new], bucket="notes")
    assert (moved.added, moved.updated, moved.skipped, moved.deleted, moved.reused_vectors) == (0, 1, 0, 0, 1), moved
    after = await kb.search("ocelot fed noon", bucket="notes")
    assert [h.source for h in after.hits] == ["notes-2024/feeding.md"], after
    assert await origins(kb, "notes") == {"feeding": str(new / "feeding.md")}
    # Its document says so too, and the next re-ingest finds it unchanged, unread.
    assert (await kb.get_document("feeding") or {}).get("source") == "notes-2024/feeding.md"
    again = await kb.ingest_paths([new], bucket="notes")
    assert (again.unread_files, again.skipped) == (1, 1), again
