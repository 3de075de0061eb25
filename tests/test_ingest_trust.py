"""Ingestion a librarian would trust (issue 14, item 4), at the knowledge-base level:
binary and non-UTF-8 files rejected with a reason, symbolic links followed only when
asked (never in a loop, never twice), a size limit, every skipped file counted by
reason, no empty buckets, HTML reduced to its main content, sources that never show a
server path, and search scoped to the default buckets."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.cli.kb_file import open_kb_file
from knowledge import IngestReport, KnowledgeBase, ensure_sample_kb
from knowledge.filecheck import SKIP_HIDDEN, SKIP_SYMLINK, SKIP_TOO_LARGE, decode_text
from knowledge.html_text import extract_html, extractor_available
from toolindex.hashing import HashingEmbedder

NAV_PAGE = """<html><head><title>Gateway guide</title></head><body>
<nav class="sidebar"><ul><li><a href="/a">Home</a></li><li><a href="/b">Installation overview</a></li>
<li><a href="/c">Configuration reference</a></li><li><a href="/d">Sidebar zebracorn link</a></li></ul></nav>
<header><div class="menu"><a href="/">Menu</a> | <a href="/x">Search</a></div></header>
<main><article><h1>Configuring the gateway</h1><p>The quokka gateway routes packets between the two
networks. It needs a configuration file that names both interfaces and the routing table.</p>
<h2>Timeouts</h2><p>Set the idle timeout to thirty seconds so that stalled connections are closed
before the pool runs dry. Longer values keep more sockets open.</p></article></main>
<footer>Copyright 2024 Example Corp. All rights reserved. Footer walrusfoot.</footer></body></html>"""


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    base = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        yield base
    finally:
        await base.aclose()


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


def elf_binary() -> bytes:
    for candidate in ("/bin/true", "/usr/bin/true", "/bin/ls"):
        if Path(candidate).is_file():
            return Path(candidate).read_bytes()[:20000]
    return b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 40


async def test_binary_and_non_utf8_files_are_rejected_with_a_reason(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "docs"
    write(d / "good.md", "# Good\n\nReal prose about herons.\n")
    write(d / "random.md", os.urandom(20000))
    write(d / "program.txt", elf_binary())
    write(d / "latin1.txt", "Café crème, déjà vu, naïve façade.\n".encode("latin-1"))
    write(d / "utf16.txt", "Unicode in UTF-16 about ibises.".encode("utf-16"))
    # An HTML page that declares its charset is decoded with it (that is not a guess).
    write(d / "old.html", '<html><head><meta charset="ISO-8859-1"><title>Vieille page</title></head>'
          "<body><p>Les spatules blanches nichent près de l'étang.</p></body></html>".encode("latin-1"))
    report = await kb.ingest_paths([d])
    reasons = {Path(r.source).name: (r.kind, r.reason) for r in report.rejected}
    assert reasons["random.md"][0] == "binary"
    assert reasons["program.txt"] == ("binary", "binary content: an ELF executable")
    assert reasons["latin1.txt"][0] == "not UTF-8" and "0xe9" in reasons["latin1.txt"][1]
    assert report.rejected_by_kind() == {"binary": 2, "not UTF-8": 1}
    assert report.added == 3 and report.chunks == 3  # good.md, the UTF-16 file (it has a BOM), old.html
    assert (await kb.search("ibises", mode="text")).hits
    assert "près de l'étang" in (await kb.search("spatules", mode="text")).hits[0].text


def test_decode_text_tells_text_from_binary() -> None:
    assert decode_text("plain ✓ text\n".encode()).text == "plain ✓ text\n"
    assert decode_text(b"\xef\xbb\xbfbom").text == "bom"
    assert decode_text(b"\x89PNG\r\n\x1a\n....").kind == "binary"
    assert decode_text(b"abc\x00def").reason == "binary content: NUL byte at offset 3"
    assert decode_text(b"MZ is a man's initials\n").text is not None


async def test_symlinks_are_skipped_unless_followed_and_never_loop(kb: KnowledgeBase, tmp_path: Path) -> None:
    secret = write(tmp_path / "outside" / "secret.txt", "root:x:0:0 outside the tree\n")
    d = tmp_path / "docs"
    write(d / "a.md", "# A\n\nalpha pelican\n")
    (d / "passwd.txt").symlink_to(secret)
    (d / "loop").symlink_to(d)  # a directory link back up: followed, it must not loop
    (d / "again.md").symlink_to(d / "a.md")  # a second name for a file already read
    report = await kb.ingest_paths([d], bucket="plain")
    assert report.skipped_files == {SKIP_SYMLINK: 3}
    assert report.added == 1 and not (await kb.search("outside the tree", mode="text", bucket="plain")).hits
    assert "secret.txt" in next(r.reason for r in report.skipped_examples if "passwd" in r.source)

    followed = await kb.ingest_paths([d], bucket="followed", follow_links=True)
    assert (followed.added, followed.updated) == (2, 0)  # the linked secret and a copy of a.md, read once
    assert sum(followed.skipped_files.values()) == 2  # the loop and the second name of a.md
    hit = (await kb.search("outside the tree", mode="text", bucket="followed")).hits[0]
    assert hit.source == "docs/passwd.txt"  # where the link sits in the tree, not its target


async def test_size_limit_hidden_and_unsupported_files_are_counted(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "docs"
    write(d / "small.md", "# Small\n\nfits\n")
    big = write(d / "big.md", "word " * 300_000)  # 1.5 MB
    write(d / ".hidden.md", "# Hidden\n")
    write(d / ".git" / "config", "[core]\n")
    write(d / "image.png", b"\x89PNG\r\n\x1a\n")
    write(d / "notes", "no extension")
    report = await kb.ingest_paths([d], max_file_bytes=1_000_000)
    assert report.skipped_files == {
        SKIP_TOO_LARGE: 1, SKIP_HIDDEN: 2, "unsupported file type .png": 1, "unsupported file type (no extension)": 1,
    }
    assert report.files == 1 and report.added == 1 and report.rejected == []
    large = next(r for r in report.skipped_examples if r.kind == SKIP_TOO_LARGE)
    assert large.source == str(big) and "over the 0.953674 MB limit" in large.reason

    # A file that grew over the limit keeps its old documents (it is still there).
    write(big, "# Big\n\nnow small\n")
    assert (await kb.ingest_paths([d], max_file_bytes=1_000_000)).added == 1
    write(big, "word " * 300_000)
    again = await kb.ingest_paths([d], max_file_bytes=1_000_000)
    assert again.deleted == 0 and (await kb.search("now small", mode="text")).hits


async def test_no_bucket_is_created_when_nothing_is_stored(kb: KnowledgeBase, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    write(tmp_path / "junk" / "x.md", os.urandom(4000))
    assert (await kb.ingest_paths([empty], bucket="nothing")).added == 0
    assert (await kb.ingest_paths([tmp_path / "junk"], bucket="junk")).rejected
    assert (await kb.ingest_documents([{"title": "no text"}], bucket="api_only")).added == 0
    assert await kb.list_buckets() == []
    await kb.ingest_documents([{"id": "d1", "text": "something"}], bucket="api_only")
    assert [b.name for b in await kb.list_buckets()] == ["api_only"]


async def test_sources_are_relative_and_the_origin_is_internal(kb: KnowledgeBase, tmp_path: Path) -> None:
    d = tmp_path / "library" / "handbook"
    write(d / "intro.md", "# Intro\n\ncormorant facts\n")
    write(d / "records.jsonl", '{"id": "r1", "text": "gannet facts"}\n')
    single = write(tmp_path / "elsewhere" / "single.txt", "shag facts\n")
    await kb.ingest_paths([d, single])
    sources = {h.doc_id: h.source for q in ("cormorant", "gannet", "shag")
               for h in (await kb.search(q, mode="text")).hits}
    assert sorted(sources.values()) == ["handbook/intro.md", "handbook/records.jsonl", "single.txt"]
    assert all(str(tmp_path) not in (doc["source"] or "") for doc in await kb.list_documents())
    with sqlite3.connect(kb.index.location) as db:  # the absolute path is kept, for deletions only
        origins = {o for (o,) in db.execute("SELECT origin FROM kb_documents")}
    assert str(d / "intro.md") in origins
    (d / "intro.md").unlink()
    assert (await kb.ingest_paths([d])).deleted == 1


@pytest.mark.skipif(not extractor_available(), reason="trafilatura is not installed")
async def test_html_is_reduced_to_its_main_content(kb: KnowledgeBase, tmp_path: Path) -> None:
    title, text, extractor = extract_html(NAV_PAGE)
    assert extractor == "trafilatura" and title == "Gateway guide"
    assert "quokka gateway" in text and "## Timeouts" in text
    assert "zebracorn" not in text and "walrusfoot" not in text
    write(tmp_path / "site" / "guide.html", NAV_PAGE)
    await kb.ingest_paths([tmp_path / "site"])
    assert (await kb.search("quokka gateway", mode="text")).hits[0].title == "Gateway guide"
    assert (await kb.search("zebracorn", mode="text")).hits == []
    assert (await kb.search("walrusfoot", mode="text")).hits == []


async def test_search_over_default_buckets_ignores_other_corpora(kb: KnowledgeBase, tmp_path: Path) -> None:
    await ensure_sample_kb(kb)
    question = "which SSE events does a run stream and in what order"
    before = await kb.search(question, buckets=["default"])
    for i in range(30):  # an unrelated corpus in its own bucket: the answer does not move
        write(tmp_path / "corpus" / f"recipe{i}.md", f"# Recipe {i}\n\nWhisk {i} eggs with flour and butter; bake.\n")
    await kb.ingest_paths([tmp_path / "corpus"], bucket="other")
    after = await kb.search(question, buckets=["default"])
    # Only the sample's passages answer, and the one that answers is still first.
    # (Scores move a little: BM25's collection statistics are the whole index's.)
    assert {h.bucket for h in after.hits} == {"default"}
    assert after.hits[0].doc_id == before.hits[0].doc_id == "agentchat-sse-events"
    assert any("message_complete" in h.text for h in after.hits)
    # A page on the very same subject elsewhere still stays out of the default scope.
    write(tmp_path / "corpus" / "events.md", "# Run events\n\n" + "A run streams SSE events in order. " * 30)
    await kb.ingest_paths([tmp_path / "corpus"], bucket="other")
    scoped = await kb.search(question, buckets=["default"])
    assert {h.bucket for h in scoped.hits} == {"default"}
    assert scoped.hits[0].doc_id == "agentchat-sse-events"
    assert "other" in {h.bucket for h in (await kb.search(question, buckets=["*"])).hits}
    both = await kb.search("run streams events", buckets=["other", "default", "missing"], mode="text")
    assert {h.bucket for h in both.hits} == {"default", "other"}
    assert (await kb.search(question, buckets=["missing"])).hits == []
    # The sample KB goes into an empty default bucket even when other buckets have documents.
    assert await kb.delete_bucket("default") is not None
    assert isinstance(await ensure_sample_kb(kb), IngestReport)
