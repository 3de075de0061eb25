"""The shipped sample knowledge base reaches installations that hold an older one
(issue 20): a ``default`` bucket holding only the sample's own documents gets the
shipped sample on the next start, unchanged files skipped by their stamps; a bucket
holding any other document is never touched.

An "older sample" is made from the shipped one as an older release left it: some of
its documents missing (files added since) and the others stored before file stamps
existed (migration 21), so the update has to read them and finds them unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge import DocumentIn, IngestReport, KnowledgeBase, SampleLeft, ensure_sample_kb
from knowledge.sample import SAMPLE_KB_DIR, is_sample_source
from llm.scripted import ScriptedProvider
from tests.conftest import running_app
from tests.support.readyz_counts import counts_current
from toolindex.hashing import HashingEmbedder

#: How many of the shipped documents the older sample lacks.
MISSING = 3
READY_DEADLINE_S = 120.0


def shipped_files() -> list[Path]:
    return sorted(p for p in SAMPLE_KB_DIR.iterdir() if p.suffix == ".md")


async def sample_docs(kb: KnowledgeBase, bucket: str = "default") -> dict[str, str]:
    """doc id → source of every document of ``bucket``."""
    return {d["doc_id"]: d["source"] for d in await kb.list_documents(bucket=bucket, limit=1000)}


async def make_older_sample(kb: KnowledgeBase) -> tuple[dict[str, str], list[str]]:
    """Ingest the shipped sample, then make it an older release's: the documents of the
    last ``MISSING`` files removed, the others' stamps cleared. Returns the whole
    sample's documents and the ids removed."""
    assert isinstance(await ensure_sample_kb(kb), IngestReport)
    whole = await sample_docs(kb)
    assert len(whole) == len(shipped_files()) and all(is_sample_source(s) for s in whole.values()), whole
    last = {f"sample_kb/{p.name}" for p in shipped_files()[-MISSING:]}
    removed = sorted(i for i, s in whole.items() if s in last)
    assert len(removed) == MISSING, (removed, last)
    assert await kb.delete_documents(removed) == MISSING
    await kb.index.set_file_stamps([(i, None) for i in whole if i not in removed])
    return whole, removed


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        yield kb
    finally:
        await kb.aclose()


async def test_an_older_sample_gets_the_new_files_and_then_stays(kb: KnowledgeBase) -> None:
    whole, removed = await make_older_sample(kb)
    report = await ensure_sample_kb(kb)
    assert isinstance(report, IngestReport) and report.rejected == [], report
    assert (report.added, report.updated, report.deleted) == (MISSING, 0, 0), report
    assert report.skipped == len(whole) - MISSING, report  # read, same content: not rewritten
    assert await sample_docs(kb) == whole
    # Stamped now: the next start neither reads nor ingests anything.
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT
    # A changed stamp (a file edited by a release) is a reason to ingest again.
    await kb.index.set_file_stamps([(removed[0], "0:0:0:0:sample_kb/old.md")])
    again = await ensure_sample_kb(kb)
    assert isinstance(again, IngestReport) and (again.added, again.updated, again.deleted) == (0, 0, 0), again
    assert await ensure_sample_kb(kb) is SampleLeft.CURRENT


async def test_a_bucket_with_a_users_document_is_never_touched(kb: KnowledgeBase) -> None:
    whole, removed = await make_older_sample(kb)
    mine = DocumentIn(id="my-notes", title="My notes", text="Our own runbook for the agent.", source="notes/runbook.md")
    assert (await kb.ingest_documents([mine], bucket="default")).added == 1
    before = await sample_docs(kb)
    assert await ensure_sample_kb(kb) is SampleLeft.OTHERS
    assert await sample_docs(kb) == before
    assert not set(removed) & set(before) and before["my-notes"] == "notes/runbook.md"
    # A document posted without a source is someone's too.
    await kb.delete_documents(["my-notes"])
    posted = DocumentIn(id="posted", title="Posted", text="Posted over HTTP, no source.")
    assert (await kb.ingest_documents([posted], bucket="default")).added == 1
    assert await ensure_sample_kb(kb) is SampleLeft.OTHERS
    assert set(await sample_docs(kb)) == (set(whole) - set(removed)) | {"posted"}


async def test_other_buckets_do_not_hold_the_update_back(kb: KnowledgeBase) -> None:
    whole, _ = await make_older_sample(kb)
    other = DocumentIn(id="recipe", title="Recipe", text="Whisk eggs.", source="recipes/eggs.md")
    assert (await kb.ingest_documents([other], bucket="recipes")).added == 1
    report = await ensure_sample_kb(kb)
    assert isinstance(report, IngestReport) and report.added == MISSING, report
    assert await sample_docs(kb) == whole
    assert set(await sample_docs(kb, "recipes")) == {"recipe"}


async def start_and_read_sample_status(tmp_path: Path, embedder: HashingEmbedder) -> dict[str, Any]:
    """Start the app on the database at ``tmp_path / 'a.db'`` and return ``/readyz``'s
    knowledge check once the sample ingestion at start-up has ended and its counts are
    current (counted in the background after it)."""
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "a.db")})
    async with (
        running_app(settings, provider=ScriptedProvider([]), embedder=embedder) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
    ):
        seen: dict[str, Any] = {}
        try:
            async with asyncio.timeout(READY_DEADLINE_S):
                while True:
                    body = (await http.get("/readyz")).json()
                    seen = dict((body.get("checks") or {}).get("knowledge") or {})
                    if seen.get("sample_kb") not in (None, "ingesting") and counts_current(body):
                        return seen
                    await asyncio.sleep(0.05)
        except TimeoutError:
            raise AssertionError(f"the sample ingestion did not end within {READY_DEADLINE_S} s: {seen}") from None


async def test_a_start_brings_an_older_sample_up_to_date_and_says_so(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dim=64)
    kb = await open_kb_file(tmp_path / "a.db", embedder)
    try:
        whole, _ = await make_older_sample(kb)
    finally:
        await kb.aclose()
    status = await start_and_read_sample_status(tmp_path, embedder)
    assert str(status["sample_kb"]).startswith("ingested"), status
    assert f"sample updated: {MISSING} added, 0 updated, 0 removed" in status["sample_kb"], status
    assert status["documents"] == len(whole), status
    kb = await open_kb_file(tmp_path / "a.db", embedder)
    try:
        assert await sample_docs(kb) == whole
    finally:
        await kb.aclose()
    # The next start finds the shipped sample and leaves it, and says that is why.
    status = await start_and_read_sample_status(tmp_path, embedder)
    assert status["ok"] and status["sample_kb"] == SampleLeft.CURRENT.status("default"), status
    assert status["sample_kb"].startswith("already there: ingested by an earlier start"), status


async def test_a_start_leaves_a_bucket_with_a_users_document_alone(tmp_path: Path) -> None:
    embedder = HashingEmbedder(dim=64)
    kb = await open_kb_file(tmp_path / "a.db", embedder)
    try:
        _, removed = await make_older_sample(kb)
        mine = DocumentIn(id="my-notes", title="My notes", text="Our own runbook.", source="notes/runbook.md")
        await kb.ingest_documents([mine], bucket="default")
        before = await sample_docs(kb)
    finally:
        await kb.aclose()
    status = await start_and_read_sample_status(tmp_path, embedder)
    # Ready, and the words say the sample is there, kept as stored beside someone else's
    # documents - not "not added", which a newcomer read as the sample missing.
    assert status["ok"] and status["documents"] == len(before), status
    kept = len(before) - 1
    assert status["sample_kb"] == SampleLeft.OTHERS.status("default", kept), status
    words = f"kept as stored: the 'default' bucket holds the sample's {kept} documents"
    assert status["sample_kb"].startswith(words), status
    kb = await open_kb_file(tmp_path / "a.db", embedder)
    try:
        assert await sample_docs(kb) == before and not set(removed) & set(before)
    finally:
        await kb.aclose()


def test_the_words_for_a_bucket_of_others_say_whether_the_sample_is_in_it() -> None:
    """A walk of the README read "not added: the 'default' bucket already holds documents
    that are not the sample's" with the sample's 20 documents right there."""
    assert SampleLeft.OTHERS.status("default").startswith("not added: the 'default' bucket already holds")
    kept = SampleLeft.OTHERS.status("default", 1)
    assert kept.startswith("kept as stored: the 'default' bucket holds the sample's 1 document beside"), kept
    assert "--bucket default` updates it" in kept
