"""An ingest counts its stages as the work goes, and compares HTML with Markdown once.

- The same-page check (``knowledge.samepage``) ran trafilatura over every candidate HTML
  page before any file was read, and the progress said only "looking for files (40s so
  far)": now it reports each page compared (``STAGE_COMPARE``), and the files it loaded
  to compare are not loaded again by the ingest.
- The chunk counter moved only when a batch's write committed: ``0 chunks, 0 chunks/s``
  through the whole embedding of a large batch. Now the chunks embedded are counted over
  all batches (``STAGE_EMBED``) and the display shows them beside the stored ones.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest

from app.cli import ingest_progress
from app.cli.ingest_progress import IngestProgress
from app.cli.kb_file import open_kb_file
from knowledge import ingest_stages, samepage
from knowledge.types import KBConfig
from tests.support.opened_files import record_opened_files
from toolindex.hashing import HashingEmbedder

PAGE = ("Configuring the registry. Set the registry URL with npm config set registry, then every install "
        "and publish uses it. Scoped packages can use their own registry. ") * 3


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file the ingest and its same-page check load, in order."""
    return record_opened_files(monkeypatch)


def docs_folder(root: Path) -> Path:
    d = root / "guide"
    d.mkdir()
    (d / "registry.md").write_text(f"# Registry\n\n{PAGE}\n")
    (d / "registry.html").write_text(
        f"<html><body><nav>docs</nav><main><h1>Registry</h1><p>{PAGE}</p></main></body></html>"
    )
    (d / "scope.md").write_text("# Scope\n\nScoped package names start with an at sign.\n")
    (d / "scope.html").write_text("<h1>Scope</h1><p>Something else entirely: the release notes of 2019.</p>")
    (d / "alone.md").write_text("# Alone\n\nA page with no HTML rendering.\n")
    return d


async def test_the_comparison_is_counted(tmp_path: Path) -> None:
    d = docs_folder(tmp_path)
    stages: list[tuple[str, int, int]] = []
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=32))
    try:
        report = await kb.ingest_paths([d], bucket="docs", on_stage=lambda *s: stages.append(s))
    finally:
        await kb.aclose()
    assert (report.added, report.skipped_files.get(samepage.SKIP_SAME_PAGE)) == (4, 1)
    # Two HTML pages have a Markdown file of their name: each compared, counted as it is.
    assert [s for s in stages if s[0] == "compare"] == [("compare", 0, 2), ("compare", 1, 2), ("compare", 2, 2)]


async def test_no_file_is_loaded_twice(tmp_path: Path, opened: list[Path]) -> None:
    d = docs_folder(tmp_path)
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=32))
    try:
        report = await kb.ingest_paths([d], bucket="docs")
        assert (report.added, report.skipped_files.get(samepage.SKIP_SAME_PAGE)) == (4, 1)
        # Each file loaded once: the Markdown files and the HTML page that is not a repeat
        # were loaded by the comparison and used by the ingest (they were loaded twice).
        # Each HTML page is read once for the cheap check; the repeat is settled by it, the
        # other page is then loaded (its main content extracted) once, for both uses.
        assert Counter(opened) == {d / "registry.md": 1, d / "registry.html": 1, d / "scope.md": 1,
                                   d / "scope.html": 2, d / "alone.md": 1}
        # What the comparison loaded is what a load of its own gives: read again and
        # hashed (--rehash), every document is unchanged, and each is shown by its path.
        again = await kb.ingest_paths([d], bucket="docs", rehash=True)
        assert (again.added, again.updated, again.skipped) == (0, 0, 4)
        sources = sorted(doc["source"] for doc in await kb.list_documents(bucket="docs", limit=10))
        assert sources == ["guide/alone.md", "guide/registry.md", "guide/scope.html", "guide/scope.md"]
    finally:
        await kb.aclose()


async def test_the_chunks_embedded_are_counted_over_all_batches(tmp_path: Path) -> None:
    d = tmp_path / "notes"
    d.mkdir()
    for i in range(5):
        (d / f"{i}.md").write_text(f"# Note {i}\n\nThe note about item {i}.\n")
    timeline: list[tuple[str, int, int]] = []
    config = KBConfig(batch_documents=2, embed_batch=1)  # three batches, a request a chunk
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=32), config=config)
    try:
        report = await kb.ingest_paths(
            [d], on_stage=lambda *s: timeline.append(s),
            on_batch=lambda r: timeline.append(("stored", r.chunks, r.chunks)),
        )  # fmt: skip
    finally:
        await kb.aclose()
    assert report.chunks == 5
    embedded = [(done, total) for stage, done, total in timeline if stage == "embed"]
    assert embedded[-1] == (5, 5)
    assert [done for done, _ in embedded] == sorted(done for done, _ in embedded)  # never back to 0 per batch
    assert len(embedded) == 5  # one report a request
    # The embedded count moves ahead of the stored one: the first chunk is counted
    # before the first write has committed.
    assert timeline.index(next(s for s in timeline if s[0] == "embed")) < timeline.index(
        next(s for s in timeline if s[0] == "stored")
    )


def test_the_display_names_the_stage_and_counts_it() -> None:
    """Plain lines (a log file) through the comparison, the reading and the embedding."""
    now = [0.0]
    log = io.StringIO()
    progress = IngestProgress(log, interval_s=0, tty=False, clock=lambda: now[0])
    progress.tick()
    for t, done in ((1.0, 0), (6.0, 20)):
        now[0] = t
        progress.on_stage("compare", done, 64)
        progress.tick()
    now[0] = 11.0
    progress.on_stage("compare", 64, 64)
    for i in range(1, 5):  # four files in 2 s
        now[0] = 11.0 + i / 2
        progress(i, 4, f"docs/{i}.md")
    for t, done in ((14.0, 64), (24.0, 1064)):  # 1,000 chunks in 10 s
        now[0] = t
        progress.on_stage("embed", done, 2064)
        progress(4, 4, f"embedding {done}/2064 chunks")
    now[0] = 30.0
    progress.on_batch(type("Report", (), {"chunks": 2064})())
    progress.on_stage("embed", 2064, 2064)
    progress.close()
    lines = log.getvalue().splitlines()
    assert lines[:3] == [
        "ingest: looking for files (0s so far)",
        "ingest: comparing 64 HTML pages with their Markdown copies: 0/64 (1s so far)",
        # 20 pages in the 5 s since the first report: 4 pages/s, 44 left.
        "ingest: comparing 64 HTML pages with their Markdown copies: 20/64, ETA 11s",
    ]
    # Files per second over the reading alone (from the comparison's end), not since the start.
    assert lines[3] == "ingest: 1/4 files (25%), 2.0 files/s; chunks: 0 stored, ETA 2s"
    assert lines[6] == "ingest: 4/4 files (100%), 2.0 files/s; chunks: 0 stored"
    assert lines[7] == "ingest: 4/4 files (100%), 2.0 files/s; chunks: 64/2064 embedded, 0 stored"
    assert lines[8] == "ingest: 4/4 files (100%), 2.0 files/s; chunks: 1064/2064 embedded (100/s), 0 stored, ETA 10s"
    assert lines[-1] == "ingest: 4/4 files (100%), 2.0 files/s; chunks: 2064/2064 embedded (125/s), 2064 stored"


def test_the_display_knows_the_stages_by_the_ingests_names() -> None:
    """The display names the stages itself (importing ``knowledge`` loads numpy into every
    ``agentchat`` command); the names must stay the ingest's."""
    assert (ingest_progress.STAGE_COMPARE, ingest_progress.STAGE_EMBED) == (
        ingest_stages.STAGE_COMPARE, ingest_stages.STAGE_EMBED,
    )  # fmt: skip


def test_a_page_is_settled_on_its_main_region_and_only_on_it(tmp_path: Path, opened: list[Path]) -> None:
    """A page that marks its main region is compared on that region: the Markdown's text in
    an aside beside another main content is not a repeat (a review: the whole stripped
    text made it one, and the page's own content was never indexed); a page that marks
    no region is extracted and compared as before."""
    notes = " ".join(f"Release note {i}: the registry cache was rebuilt for mirror {i}." for i in range(40))
    guide = " ".join(f"Install step {i}: download the archive and run setup number {i}." for i in range(20))
    d = tmp_path / "site"
    d.mkdir()
    (d / "notes.md").write_text(f"# Notes\n\n{notes}\n")
    (d / "notes.html").write_text(
        f"<html><body><aside>{notes}</aside>"
        f"<main><article><h1>Install guide</h1><p>{guide}</p></article></main></body></html>"
    )
    (d / "plain.md").write_text(f"# Plain\n\n{PAGE}\n")
    (d / "plain.html").write_text(f"<html><body><h1>Plain</h1><p>{PAGE}</p></body></html>")
    found = samepage.find_same_pages([(p, p.name) for p in sorted(d.iterdir())])
    assert [(f.html.name, f.markdown.name) for f in found.found] == [("plain.html", "plain.md")]
    assert opened.count(d / "notes.html") == 2  # its region read, then extracted: kept
    assert opened.count(d / "plain.html") == 2  # no region: extracted, found a repeat
