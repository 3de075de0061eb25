"""Every count an ``agentchat`` command prints agrees with its number: ``1 file``,
``2 files`` (``app/cli/counts.py``). The reports said ``1 files read, 1 documents added
… 1 chunks``, ``pruned 1 keywords``, ``compacted 1 runs``: each line wrote its own
plural, and most forgot."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import pytest

from agenttools.rag.keyword_rules import Candidate, check_keyword
from agenttools.rag.keywords import KeywordIndex
from app.cli.commands import main
from app.cli.counts import plural
from app.cli.ingest_progress import IngestProgress
from tests.support.storage import opened_storage


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The commands' database, as a user's environment names it."""
    path = tmp_path / "agent.db"
    monkeypatch.setenv("AGENT_DB_PATH", str(path))
    monkeypatch.setenv("AGENT_EMBEDDER", "hashing")
    return path


def test_the_helper_says_one_and_many() -> None:
    assert [plural(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert plural(1, "index", "indexes") == "1 index" and plural(3, "index", "indexes") == "3 indexes"


def test_an_ingest_of_one_file_says_it_in_the_singular(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "guide.md").write_text("# Guide\n\nOne short page.\n")
    assert main(["ingest", str(pages), "--quiet"]) == 0
    report = capsys.readouterr().out.splitlines()[0]
    assert report.startswith(
        "bucket 'default': 1 file read, 1 document added, 0 updated, 0 unchanged, 0 deleted, 1 chunk ("
    ), report
    # Two of each: the plural, from the same helper.
    (pages / "more.md").write_text("# More\n\nAnother page.\n")
    assert main(["ingest", str(pages), "--bucket", "two", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith(
        "bucket 'two': 2 files read, 2 documents added, 0 updated, 0 unchanged, 0 deleted, 2 chunks ("
    )


def test_pruning_one_keyword_says_it_in_the_singular(database: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def one_stale_keyword() -> None:
        async with opened_storage(database) as storage:
            long_ago = time.time() - 40 * 86_400
            index = KeywordIndex(storage.keywords, storage.external_results, clock=lambda: long_ago)
            stale = check_keyword("rarely used")
            assert isinstance(stale, Candidate), stale
            await index.index([stale], query_id="q1")

    asyncio.run(one_stale_keyword())
    assert main(["keywords", "prune", "--min-usage", "2", "--older-than", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pruned 1 keyword (usage < 2, unused for more than 1 day)"
    assert main(["keywords", "prune", "--min-usage", "2", "--older-than", "1.5"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "pruned 0 keywords (usage < 2, unused for more than 1.5 days)"


def test_comparing_one_html_page_says_it_in_the_singular() -> None:
    log = io.StringIO()
    progress = IngestProgress(log, interval_s=0, tty=False, clock=lambda: 1.0)
    progress.on_stage("compare", 0, 1)
    progress.tick()
    progress.close()
    assert "ingest: comparing 1 HTML page with its Markdown copy: 0/1" in log.getvalue(), log.getvalue()
