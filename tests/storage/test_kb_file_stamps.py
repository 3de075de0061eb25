"""Re-ingest skips an unchanged file by its stamp (size, modification time) before reading
it, on both engines (issue 24 item 4): an unchanged folder opens none of its files and
embeds nothing; a touched identical file is read and re-stamped, never re-embedded; a
changed file is ingested again; the stamp is per bucket; a database from before
migration 21 has no stamps, and its first re-ingest reads every file and stamps it.

"Not opened" is shown two ways that need no timing: in-process, by counting the loader's
calls; through the CLI, by changing a file's bytes while keeping its size and time — the
second ingest still reports it unchanged (and the old text is what is searched), and
``--rehash`` reads it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge.kb import KnowledgeBase
from storage.open import open_storage
from tests.support.opened_files import record_opened_files
from tests.support.procs import agentchat, child_env
from toolindex.hashing import HashingEmbedder


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.texts = 0

    async def embed_batch(self, texts: list[str], *, task: Any = "document") -> np.ndarray:
        self.texts += len(texts)
        return await super().embed_batch(texts, task=task)


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the ingest (and its same-page check) loads, in order."""
    return record_opened_files(monkeypatch)


def folder(root: Path) -> Path:
    d = root / "manual"
    (d / "sub").mkdir(parents=True)
    (d / "install.md").write_text("# Install\n\nRun the installer, then restart the shell.\n")
    (d / "sub" / "upgrade.md").write_text("# Upgrade\n\nUpgrades keep your settings in place.\n")
    (d / "notes.txt").write_text("Notes about the ocelot feeding schedule.\n")
    return d


def keep_time(path: Path, text: str) -> None:
    """Write ``text`` (same length as before) and give the file its old times back."""
    st = path.stat()
    assert len(text.encode()) == st.st_size
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))


async def reopened(target: str, embedder: CountingEmbedder) -> KnowledgeBase:
    return await open_kb_file(target, embedder)


async def test_an_unchanged_folder_is_not_opened_and_a_touched_file_is_not_re_embedded(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = folder(tmp_path)
    emb = CountingEmbedder()
    kb = await reopened(target, emb)
    try:
        first = await kb.ingest_paths([d])
        assert (first.added, first.unread_files, len(opened)) == (3, 0, 3) and emb.texts > 0

        opened.clear()
        emb.texts = 0
        again = await kb.ingest_paths([d])
        assert opened == [] and emb.texts == 0
        assert (again.files, again.unread_files, again.skipped) == (3, 3, 3)
        assert (again.added, again.updated, again.deleted) == (0, 0, 0)

        touch(d / "install.md")  # same bytes, a new time: read and hashed, not re-embedded
        touched = await kb.ingest_paths([d])
        assert opened == [d / "install.md"] and emb.texts == 0
        assert (touched.unread_files, touched.skipped, touched.updated) == (2, 3, 0)
        opened.clear()
        assert (await kb.ingest_paths([d])).unread_files == 3 and opened == []  # the new stamp was kept

        (d / "notes.txt").write_text("Notes about the ocelot feeding schedule, now twice a day.\n")
        changed = await kb.ingest_paths([d])
        assert opened == [d / "notes.txt"] and emb.texts > 0
        assert (changed.updated, changed.skipped, changed.unread_files) == (1, 2, 2)
        assert "twice a day" in (await kb.search("ocelot feeding", mode="text")).hits[0].text

        (d / "sub" / "upgrade.md").unlink()  # a gone file is still deleted
        opened.clear()
        gone = await kb.ingest_paths([d])
        assert opened == [] and (gone.deleted, gone.unread_files) == (1, 2)

        opened.clear()
        rehashed = await kb.ingest_paths([d], rehash=True)  # reads every file, changes nothing
        assert sorted(opened) == sorted([d / "install.md", d / "notes.txt"])
        assert (rehashed.skipped, rehashed.updated, rehashed.unread_files) == (2, 0, 0)
    finally:
        await kb.aclose()


async def test_the_stamp_is_per_bucket_and_another_embedder_leaves_the_files_unread(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = folder(tmp_path)
    kb = await reopened(target, CountingEmbedder())
    try:
        assert (await kb.ingest_paths([d])).added == 3
        opened.clear()
        other = await kb.ingest_paths([d], bucket="other")  # same files, same stamps: its own documents
        assert (other.added, other.unread_files) == (3, 0) and len(opened) == 3
        opened.clear()
        for bucket in ("default", "other"):
            report = await kb.ingest_paths([d], bucket=bucket)
            assert (report.unread_files, report.skipped) == (3, 3)
        assert opened == []
    finally:
        await kb.aclose()
    # Another embedder: the stamps match and the documents keep the vectors they have
    # (``keeps_vectors``: the service's re-embedding replaces them if its embedder changed).
    kb = await open_kb_file(target, HashingEmbedder(dim=32))
    try:
        report = await kb.ingest_paths([d])
        assert (report.unread_files, report.updated, report.skipped) == (3, 0, 3) and opened == []
    finally:
        await kb.aclose()
    kb = await open_kb_file(target, None)  # none at all: the same
    try:
        report = await kb.ingest_paths([d])
        assert (report.unread_files, report.updated, report.skipped) == (3, 0, 3) and opened == []
    finally:
        await kb.aclose()


async def test_documents_from_before_migration_21_are_read_once_and_stamped(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = folder(tmp_path)
    emb = CountingEmbedder()
    kb = await reopened(target, emb)
    try:
        assert (await kb.ingest_paths([d])).added == 3
    finally:
        await kb.aclose()
    # The database as release 20 left it: no stamp column, version 21 not applied.
    storage = await open_storage(target)
    try:
        await storage.runs.sql.execute(
            [
                ("ALTER TABLE kb_documents DROP COLUMN file_stamp", ()),
                ("DELETE FROM schema_version WHERE version = 21", ()),
            ]
        )
    finally:
        await storage.close()

    opened.clear()
    emb.texts = 0
    kb = await reopened(target, emb)  # migrates: the column is back, empty
    try:
        first = await kb.ingest_paths([d])
        assert len(opened) == 3 and emb.texts == 0
        assert (first.skipped, first.updated, first.unread_files) == (3, 0, 0)
        opened.clear()
        second = await kb.ingest_paths([d])
        assert opened == [] and second.unread_files == 3
    finally:
        await kb.aclose()


PAGE = (
    "Configuring the registry. Set the registry URL with npm config set registry, "
    "then every install and publish uses it. Scoped packages can use their own registry. "
)


def twin_docs(root: Path) -> Path:
    """Markdown beside its HTML rendering (skipped as a repeat), and an HTML page of the
    same name as a Markdown file but other text (kept)."""
    d = root / "docs"
    (d / "content").mkdir(parents=True)
    (d / "output").mkdir()
    (d / "content" / "registry.md").write_text(f"# Registry\n\n{PAGE * 3}\n")
    (d / "output" / "registry.html").write_text(
        f"<html><head><title>registry</title></head><body><nav>npm docs</nav><h1>Registry</h1><p>{PAGE * 3}</p>"
        "</body></html>"
    )
    (d / "content" / "scope.md").write_text("# Scope\n\nScoped package names start with an at sign.\n")
    (d / "output" / "scope.html").write_text("<h1>Scope</h1><p>Something else entirely: release notes of 2019.</p>")
    return d


async def test_an_unchanged_markdown_and_its_html_repeat_are_not_compared_again(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = twin_docs(tmp_path)
    html = d / "output" / "registry.html"
    kb = await reopened(target, CountingEmbedder())
    try:
        first = await kb.ingest_paths([d])
        assert first.added == 3 and sum(first.skipped_files.values()) == 1 and html in opened

        opened.clear()
        again = await kb.ingest_paths([d])
        assert opened == [] and (again.unread_files, again.skipped, again.deleted) == (3, 3, 0)
        assert sum(again.skipped_files.values()) == 1  # still counted as the repeat it is

        html.write_text(f"<html><body><h1>Registry</h1><p>{PAGE * 3}</p><p>Edited.</p></body></html>")
        opened.clear()
        edited = await kb.ingest_paths([d])  # the pair is compared again, still a repeat
        assert html in opened and d / "content" / "registry.md" in opened
        assert (edited.added, edited.updated, edited.deleted, edited.skipped) == (0, 0, 0, 3)
        opened.clear()
        assert (await kb.ingest_paths([d])).unread_files == 3 and opened == []  # the new pair stamp was kept

        html.write_text("<h1>Registry</h1><p>Release notes of the registry service, nothing like the guide.</p>")
        opened.clear()
        split = await kb.ingest_paths([d])  # no longer a repeat: a document of its own
        assert html in opened and split.added == 1 and sum(split.skipped_files.values()) == 0
    finally:
        await kb.aclose()


async def test_a_file_with_a_rejected_record_is_read_and_reported_every_time(
    target: str, tmp_path: Path, opened: list[Path]
) -> None:
    d = tmp_path / "records"
    d.mkdir()
    (d / "ok.md").write_text("# Fine\n\nA page with nothing wrong in it.\n")
    # Rejected while stored, not while read: the second record repeats the first's id.
    (d / "rows.jsonl").write_text('{"id": "r1", "text": "first record"}\n{"id": "r1", "text": "second record"}\n')
    kb = await reopened(target, CountingEmbedder())
    try:
        first = await kb.ingest_paths([d])
        assert first.added == 2 and len(first.rejected) == 1 and "duplicate" in first.rejected[0].reason
        opened.clear()
        again = await kb.ingest_paths([d])
        assert opened == [d / "rows.jsonl"] and len(again.rejected) == 1 and "duplicate" in again.rejected[0].reason
        assert (again.unread_files, again.skipped) == (1, 2)
    finally:
        await kb.aclose()


async def test_documents_posted_through_the_api_have_no_stamp(target: str, tmp_path: Path) -> None:
    kb = await reopened(target, CountingEmbedder())
    try:
        await kb.ingest_documents([{"id": "posted", "text": "a posted page about herons"}])
        again = await kb.ingest_documents([{"id": "posted", "text": "a posted page about herons"}])
        assert (again.skipped, again.unread_files) == (1, 0)
    finally:
        await kb.aclose()
    storage = await open_storage(target)
    try:
        rows = await storage.runs.sql.fetchall("SELECT file_stamp FROM kb_documents WHERE id = ?", ("posted",))
        assert rows == [(None,)]
    finally:
        await storage.close()


@pytest.mark.slow  # `agentchat` CLI subprocesses
async def test_the_cli_skips_an_unchanged_file_unread_and_rehash_reads_it(
    shared_db: dict[str, str], tmp_path: Path
) -> None:
    env = child_env(shared_db)
    d = folder(tmp_path)
    code, out, err = await agentchat(env, "ingest", str(d), "--quiet")
    assert code == 0 and "3 files read, 3 documents added" in out, out + err

    # Other bytes, same size and time: a file opened would be updated; it is not.
    keep_time(d / "notes.txt", "Notes about the jaguar feeding schedule.\n")
    code, out, err = await agentchat(env, "ingest", str(d), "--quiet")
    assert code == 0, out + err
    assert "0 files read (3 more unchanged, not opened), 0 documents added, 0 updated, 3 unchanged" in out

    code, out, err = await agentchat(env, "ingest", str(d), "--quiet", "--rehash")
    assert code == 0, out + err
    assert "3 files read, 0 documents added, 1 updated, 2 unchanged" in out


@pytest.mark.slow  # an `agentchat` CLI subprocess
async def test_the_cli_help_names_rehash() -> None:
    """Once, not per engine: the help opens no database."""
    code, out, _ = await agentchat(child_env({}), "ingest", "--help")
    assert code == 0 and "--rehash" in out and "modification" in out
