"""Ingestion: every format, skip by hash, updates, deletions, typed buckets, failures."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge import DocumentIn, IngestReport, KnowledgeBase, SampleLeft, ensure_sample_kb
from storage.sqlite.migrations import MIGRATIONS
from toolindex.embedder import EmbeddingError
from toolindex.hashing import HashingEmbedder


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    base = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=128))
    try:
        yield base
    finally:
        await base.aclose()


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


async def test_every_text_format_is_ingested_with_titles(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "docs"
    write(d / "guide.md", "---\nid: guide-md\nauthor: Ada\n---\n# Setup Guide\n\n## Install\n\nRun the installer twice.\n")
    write(d / "notes.txt", "Plain notes about zebra migration.\n")
    write(
        d / "page.html",
        "<html><head><title>Router Page</title><script>var secretToken = 1;</script>"
        "<style>.x{}</style></head><body><h1>Routing</h1><p>Packets go through the quokka gateway.</p>"
        "<ul><li>first</li></ul></body></html>",
    )
    write(d / "records.json", '[{"id": "rec-1", "title": "Record one", "text": "Okapi facts.", "color": "blue"}]')
    write(d / "lines.jsonl", '{"id": "line-1", "content": "Narwhal tusk notes."}\n\n{"body": "Axolotl gills."}\n')
    write(d / ".hidden.md", "# Hidden\n\nnever read")
    write(d / "image.bin", "not supported")
    seen: list[tuple[int, int, str]] = []
    report = await kb.ingest_paths([d], progress=lambda done, total, p: seen.append((done, total, p)))
    assert report.rejected == []
    assert (report.added, report.files) == (6, 5)
    assert seen[-1][0] == seen[-1][1] == 5

    guide = await kb.get_document("guide-md")
    assert guide is not None and guide["title"] == "Setup Guide"
    assert guide["metadata"]["author"] == "Ada" and guide["metadata"]["format"] == "markdown"

    html_hit = (await kb.search("quokka gateway", mode="text")).hits[0]
    assert html_hit.title == "Router Page" and "quokka" in html_hit.text
    assert (await kb.search("secretToken", mode="text")).hits == []  # scripts are stripped
    assert html_hit.heading == "Routing"

    rec = await kb.get_document("rec-1")
    assert rec is not None and rec["metadata"] == {"color": "blue"}
    assert (await kb.search("narwhal", mode="text")).hits[0].doc_id == "line-1"
    axolotl = (await kb.search("axolotl", mode="text")).hits[0]
    assert axolotl.doc_id.startswith("lines-") and axolotl.doc_id.endswith("-3")
    assert (await kb.search("zebra migration", mode="text")).hits[0].title == "Notes"


async def test_unchanged_documents_are_skipped_and_changes_update(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "docs"
    a = write(d / "a.md", "# Alpha\n\nThe original wording about pelicans.\n")
    write(d / "b.md", "# Beta\n\nSomething about herons.\n")
    first = await kb.ingest_paths([d])
    assert (first.added, first.skipped) == (2, 0)
    again = await kb.ingest_paths([d])
    assert (again.added, again.updated, again.skipped, again.chunks) == (0, 0, 2, 0)

    write(a, "# Alpha\n\nNew wording about flamingos.\n")
    changed = await kb.ingest_paths([d])
    assert (changed.updated, changed.skipped) == (1, 1)
    assert (await kb.search("pelicans", mode="text")).hits == []
    assert (await kb.search("flamingos")).hits[0].title == "Alpha"
    stats = await kb.status.stats()
    assert stats["documents"] == 2 and stats["chunks"] == stats["vectors"] == 2


async def test_removed_files_are_deleted_everywhere(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "docs"
    write(d / "keep.md", "# Keep\n\nwalrus content\n")
    gone = write(d / "sub" / "gone.md", "# Gone\n\nmanatee content\n")
    other = write(tmp_path / "docs-other" / "x.md", "# Other\n\nmanatee elsewhere\n")
    await kb.ingest_paths([d, other])
    gone.unlink()
    report = await kb.ingest_paths([d])
    assert report.deleted == 1 and report.skipped == 1
    hits = (await kb.search("manatee", mode="text")).hits
    assert [h.title for h in hits] == ["Other"]  # the sibling directory is not in scope
    stats = await kb.status.stats()
    assert stats["documents"] == 2 and stats["vectors"] == 2
    with sqlite3.connect(kb.index.location) as db:  # FTS rows went with the chunks
        n = db.execute("SELECT count(*) FROM kb_chunks_fts WHERE kb_chunks_fts MATCH 'manatee'").fetchone()[0]
    assert n == 1


async def test_jsonl_record_removed_from_file_is_deleted(kb: KnowledgeBase, tmp_path: Path) -> None:
    f = write(tmp_path / "r.jsonl", '{"id": "r1", "text": "one"}\n{"id": "r2", "text": "two"}\n')
    await kb.ingest_paths([f])
    write(f, '{"id": "r1", "text": "one"}\n')
    report = await kb.ingest_paths([f])
    assert report.deleted == 1 and await kb.get_document("r2") is None


async def test_a_file_with_rejections_keeps_its_old_documents(kb: KnowledgeBase, tmp_path: Path) -> None:
    f = write(tmp_path / "r.jsonl", '{"id": "r1", "text": "one"}\n{"id": "r2", "text": "two"}\n')
    await kb.ingest_paths([f])
    write(f, '{"id": "r1", "text": "one"}\n{"id": "r2", "text": \n')
    report = await kb.ingest_paths([f])
    assert [r.line for r in report.rejected] == [2]
    assert report.deleted == 0 and await kb.get_document("r2") is not None


async def test_typed_bucket_rejects_records_with_line_numbers(kb: KnowledgeBase, tmp_path: Path) -> None:
    info = await kb.create_bucket("invoices", {"vendor": "TEXT", "amount": "REAL", "issued": "DATE", "paid": "BOOLEAN"})
    assert info.fields["amount"] == "REAL" and info.documents == 0
    f = write(
        tmp_path / "inv.jsonl",
        "\n".join(
            [
                '{"id": "i1", "text": "bolts", "vendor": "ACME", "amount": 10.5, "issued": "2023-01-02", "paid": true}',
                '{"id": "i2", "text": "nuts", "amount": "a lot"}',
                '{"id": "i3", "text": "gears", "issued": "2023-02-30"}',
                '{"id": "i4", "text": "cogs", "paid": "maybe"}',
                "{broken",
                '{"id": "bad id!", "text": "x"}',
                '{"id": "i5", "text": "springs", "amount": "12", "extra": [1, 2]}',
                '{"id": "i1", "text": "duplicate"}',
            ]
        ),
    )
    report = await kb.ingest_paths([f], bucket="invoices")
    assert report.added == 2
    lines = {r.line: r.reason for r in report.rejected}
    assert sorted(lines) == [2, 3, 4, 5, 6, 8]
    assert "amount" in lines[2] and "REAL" in lines[2]
    assert "issued" in lines[3] and "DATE" in lines[3]
    assert "paid" in lines[4]
    assert "invalid JSON" in lines[5]
    assert "invalid id" in lines[6]
    assert "duplicate" in lines[8]
    doc = await kb.get_document("i5")
    assert doc is not None and doc["fields"]["amount"] == 12.0 and doc["metadata"]["extra"] == [1, 2]
    doc1 = await kb.get_document("i1")
    assert doc1 is not None and doc1["fields"] == {"vendor": "ACME", "amount": 10.5, "issued": "2023-01-02", "paid": True}
    buckets = {b.name: b for b in await kb.list_buckets()}
    assert buckets["invoices"].documents == 2 and "default" not in buckets  # never created empty


async def test_bucket_schema_can_grow_and_backfills(kb: KnowledgeBase) -> None:
    await kb.create_bucket("parts", {"part": "TEXT"})
    await kb.ingest_documents([{"id": "p1", "text": "npn transistor", "part": "BC547", "volts": 45}], bucket="parts")
    await kb.create_bucket("parts", {"volts": "INTEGER"})
    doc = await kb.get_document("p1")
    assert doc is not None and doc["fields"] == {"part": "BC547", "volts": 45}
    with pytest.raises(ValueError, match="cannot change"):
        await kb.create_bucket("parts", {"volts": "TEXT"})
    for bad in ("Parts", "1x", "a-b", 'x"; DROP TABLE kb_chunks; --', "a" * 50):
        with pytest.raises(ValueError):
            await kb.create_bucket(bad, {})
    for bad_field in ({"title": "TEXT"}, {"Bad": "TEXT"}, {"ok": "VARCHAR"}, {'x"y': "TEXT"}):
        with pytest.raises(ValueError):
            await kb.create_bucket("parts2", bad_field)


async def test_ingest_documents_validates_and_derives_stable_ids(kb: KnowledgeBase) -> None:
    docs = [
        {"title": "Posted", "text": "posted over http about ibis"},
        {"title": "no text"},
        "not an object",
        DocumentIn(text="direct object about egrets", title="Direct", id="direct-1", url="https://example.test/d"),
    ]
    report = await kb.ingest_documents(docs)  # type: ignore[arg-type]
    assert report.added == 2
    assert [(r.line, "text" in r.reason or "object" in r.reason) for r in report.rejected] == [(2, True), (3, True)]
    again = await kb.ingest_documents([{"title": "Posted", "text": "posted over http about ibis"}])
    assert again.skipped == 1 and again.added == 0
    hit = (await kb.search("egrets")).hits[0]
    assert hit.doc_id == "direct-1" and hit.url == "https://example.test/d" and hit.source == "api"


async def test_pdf_without_pypdf_is_rejected_with_a_reason(
    kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pypdf", None)  # as if the pdf extra were not installed
    f = write(tmp_path / "doc.pdf", "%PDF-1.4 fake")
    report = await kb.ingest_paths([f])
    assert report.added == 0 and "pypdf" in report.rejected[0].reason


async def test_missing_path_is_reported(kb: KnowledgeBase, tmp_path: Path) -> None:
    report = await kb.ingest_paths([tmp_path / "nope"])
    assert report.rejected[0].reason == "path does not exist"


class FlakyEmbedder(HashingEmbedder):
    """The real hashing embedder, except that batch embedding fails while ``broken``."""

    def __init__(self) -> None:
        super().__init__(dim=128)
        self.broken = True

    async def embed_batch(self, texts: list[str], *, task: str = "document") -> np.ndarray:  # type: ignore[override]
        if self.broken:
            raise EmbeddingError("upstream 503")
        return await super().embed_batch(texts, task="document")


async def test_embedding_failure_keeps_text_search_and_heals_on_reingest(tmp_path: Path) -> None:
    emb = FlakyEmbedder()
    kb = await open_kb_file(tmp_path / "kb.db", emb)
    try:
        d = tmp_path / "docs"
        write(d / "a.md", "# Kiwi\n\nkiwi birds cannot fly\n")
        report = await kb.ingest_paths([d])
        assert report.added == 1 and not report.rejected
        assert report.queued_for_embedding == 1 and "upstream 503" in str(report.embedding_error)
        assert (await kb.search("kiwi", mode="text")).hits[0].title == "Kiwi"
        assert (await kb.status.stats())["documents_without_current_vectors"] == 1
        emb.broken = False
        healed = await kb.ingest_paths([d])
        assert healed.updated == 1 and (await kb.status.stats())["vectors"] == 1
    finally:
        await kb.aclose()


async def test_reopen_loads_vectors_and_migrations_once(tmp_path: Path) -> None:
    path = tmp_path / "kb.db"
    kb = await open_kb_file(path, HashingEmbedder(dim=128))
    await kb.ingest_documents([{"id": "d1", "text": "capybara grooming habits"}])
    await kb.aclose()
    kb = await open_kb_file(path, HashingEmbedder(dim=128))
    try:
        assert (await kb.status.stats())["vectors"] == 1
        res = await kb.search("capybara grooming", mode="semantic")
        assert res.mode == "semantic" and res.hits[0].doc_id == "d1"
    finally:
        await kb.aclose()
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT version FROM schema_version").fetchall() == [(m.version,) for m in MIGRATIONS]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # A different embedder space: vectors are not mixed in; the document needs re-embedding.
    kb = await open_kb_file(path, HashingEmbedder(dim=64))
    try:
        stats = await kb.status.stats()
        assert stats["vectors"] == 0 and stats["documents_without_current_vectors"] == 1
        assert (await kb.search("capybara")).hits[0].doc_id == "d1"
    finally:
        await kb.aclose()


async def test_sample_kb_is_ingested_once_and_answers(kb: KnowledgeBase) -> None:
    report = await ensure_sample_kb(kb)
    assert isinstance(report, IngestReport) and report.added >= 8 and report.rejected == []
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT
    res = await kb.search("which SSE events does a run stream and in what order")
    assert res.hits and any("message_complete" in h.text for h in res.hits)
    res = await kb.search("how do I run the tests")
    assert any("make test" in h.text for h in res.hits)


async def test_progress_is_told_while_a_batch_is_embedded(tmp_path: Path) -> None:
    """All files of a small folder fit one batch, so the embedding happens after the last
    file was read: the progress callback hears about it, chunk batch by chunk batch."""
    from knowledge.types import KBConfig

    for i in range(3):
        write(tmp_path / "docs" / f"{i}.md", f"# Page {i}\n\nSome words about page {i}.\n")
    calls: list[tuple[int, int, str]] = []
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=32), config=KBConfig(embed_batch=2))
    try:
        report = await kb.ingest_paths([tmp_path / "docs"], progress=lambda d, t, label: calls.append((d, t, label)))
    finally:
        await kb.aclose()
    assert report.added == 3 and report.chunks == 3
    assert [c for c in calls if c[2].startswith("embedding")] == [(3, 3, "embedding 2/3 chunks"),
                                                                  (3, 3, "embedding 3/3 chunks")]


async def test_the_same_file_in_two_buckets_is_two_documents(kb: KnowledgeBase, tmp_path: Path) -> None:
    f = write(tmp_path / "docs" / "guide.md", "# Guide\n\nPuffins nest in burrows.\n")
    first = await kb.ingest_paths([f])
    second = await kb.ingest_paths([f], bucket="birds")
    posted = await kb.ingest_documents([{"title": "Note", "text": "A posted note."}], bucket="birds")
    again = await kb.ingest_documents([{"title": "Note", "text": "A posted note."}])
    assert (first.added, second.added, second.updated, posted.added, again.added) == (1, 1, 0, 1, 1)
    assert {b.name: b.documents for b in await kb.list_buckets()} == {"default": 2, "birds": 2}
    assert await kb.delete_bucket("birds") == 2
    assert {b.name: b.documents for b in await kb.list_buckets()} == {"default": 2}
    moved = await kb.ingest_documents([{"id": "fixed", "text": "one"}])
    clash = await kb.ingest_documents([{"id": "fixed", "text": "one"}], bucket="birds")
    assert moved.added == 1 and clash.added == 0 and clash.rejected[0].kind == "id of another bucket"


async def test_a_page_summary_heads_its_first_chunk_and_is_searched(kb: KnowledgeBase, tmp_path: Path) -> None:
    # npm's command pages: front matter with a one-line description, a synopsis, then
    # option sections; the description is the only place the page says what it does in
    # the words a question uses ("create a tarball").
    d = tmp_path / "docs"
    write(d / "npm-pack.md", "---\ntitle: npm-pack\ndescription: Create a tarball from a package\n---\n\n"
          "### Synopsis\n\n```bash\nnpm pack <package-spec>\n```\n\n### Configuration\n\n#### `dry-run`\n\n"
          "Indicates that you don't want npm to make any changes.\n")
    write(d / "npm-link.md", "---\ntitle: npm-link\n---\n\n### Description\n\nWhen creating tarballs for "
          "`npm publish`, linked packages are snapshotted.\n")
    write(d / "records.json", '[{"id": "inv-1", "text": "Invoice for the tarball crate.", '
          '"description": "Create a tarball from a package"}]')
    assert (await kb.ingest_paths([d])).rejected == []
    hit = (await kb.search("How do I create a tarball of my package?", mode="text")).hits[0]
    assert (hit.title, hit.position) == ("npm-pack", 0), hit
    assert hit.heading == "Create a tarball from a package — Synopsis"
    assert hit.text.startswith("### Synopsis")  # the text is the page's own
    # A record's "description" is one of its fields, not a page summary.
    record = (await kb.search("Invoice tarball crate", mode="text")).hits[0]
    assert record.doc_id == "inv-1" and "Create a tarball" not in record.heading
