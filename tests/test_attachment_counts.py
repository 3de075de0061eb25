"""A conversation's attachments (private ``att_*`` buckets) never show in the knowledge
base's counts: ``count_documents``, ``constraint_counts`` and ``relax_filters`` called
without a bucket cover the shared buckets only, as listings and "every bucket" searches
do — a count must not tell anyone how many documents someone else attached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agenttools.core.executor import ToolExecutor
from agenttools.core.validation import validate_arguments
from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge import KnowledgeBase
from knowledge.attachments import attachment_bucket
from knowledge.buckets import UnknownBucketError
from knowledge.types import DocumentIn
from llm.extractive import ExtractiveProvider
from tests.conftest import running_app
from tests.support.readyz_counts import current, knowledge_check
from tests.test_compat_faces_owners import bearer, env
from tests.test_corpus_tools import Harness, build_corpus, build_registry
from toolindex.hashing import HashingEmbedder


@pytest.fixture
async def kb(tmp_path: Path) -> AsyncIterator[KnowledgeBase]:
    base = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        yield base
    finally:
        await base.aclose()


def doc(i: int, text: str, source: str) -> DocumentIn:
    return DocumentIn(text=text, title=f"doc {i}", id=f"d{i}", source=source)


async def test_counts_without_a_bucket_leave_attachments_out(kb: KnowledgeBase) -> None:
    shared = [doc(1, "zeppelin maintenance manual", "manual"), doc(2, "zeppelin hangar rules", "rules")]
    await kb.ingest_documents(shared)
    before = (
        await kb.count_documents(),
        await kb.count_documents("zeppelin"),
        await kb.constraint_counts({"source": "manual"}),
        await kb.relax_filters({"source": "manual", "title": "doc 1"}),
    )
    assert before[0].documents == 2 and before[1].documents == 2

    private = attachment_bucket("alice", "c1")
    attached = [doc(10 + i, f"zeppelin notes page {i}", "manual") for i in range(3)]
    await kb.ingest_documents(attached, bucket=private, private=True)
    assert len(await kb.list_documents(bucket=private, private=private)) == 3  # they are stored

    after = (
        await kb.count_documents(),
        await kb.count_documents("zeppelin"),
        await kb.constraint_counts({"source": "manual"}),
        await kb.relax_filters({"source": "manual", "title": "doc 1"}),
    )
    assert after == before  # the three attached documents changed no count
    assert after[2][0].documents == 1
    assert (await kb.count_documents(filters={"source": "manual"})).documents == 1

    # Naming the private bucket is an unknown bucket, as for a search.
    for call in (
        kb.count_documents(bucket=private),
        kb.constraint_counts({"source": "manual"}, bucket=private),
        kb.relax_filters({"source": "manual"}, bucket=private),
    ):
        with pytest.raises(UnknownBucketError):
            await call


async def test_a_private_bucket_made_after_the_bucket_list_was_read_never_reaches_an_every_bucket_search(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Every bucket" reads the bucket list and, while no private bucket exists, searches
    every document; someone's first attachment committed between that read and the
    search's statements must still not show (the race is pinned by keeping the list as
    it was read before the attachment was made)."""
    await kb.ingest_documents([doc(1, "zeppelin maintenance manual", "manual")])
    names_before = kb._buckets.names()
    private = attachment_bucket("alice", "c1")
    await kb.ingest_documents([doc(10, "zeppelin maintenance secrets", "manual")], bucket=private, private=True)

    async def stale_load() -> None:  # the read happened before the attachment
        return None

    monkeypatch.setattr(kb._buckets, "load", stale_load)
    monkeypatch.setattr(kb._buckets, "names", lambda: names_before)
    for mode in ("hybrid", "text", "semantic"):
        found = await kb.search("zeppelin maintenance", buckets=["*"], mode=mode)
        assert [h.doc_id for h in found.hits] == ["d1"], (mode, [(h.doc_id, h.bucket) for h in found.hits])


async def test_another_users_attachments_change_no_count_a_corpus_tool_shows(tmp_path: Path) -> None:
    """Through the tool face: user B's attached invoices change none of the counts user
    A's corpus tool tells the model (the documents without an unmatched condition), and
    naming B's private bucket is an unknown bucket whose list of buckets leaves it out."""
    kb = await build_corpus(tmp_path / "kb.sqlite3")
    try:
        async with httpx.AsyncClient() as http:
            alice = Harness(kb, ToolExecutor(build_registry(kb), validator=validate_arguments), http)
            args = {"bucket": "invoices", "query": "invoice payable", "filters": {"vendor": "ACME", "year": 2031}}
            before, _ = await alice.call("search_text", args)
            assert before.content["documents_without_them"] > 0, before.content

            bob = attachment_bucket("bob", "c9")
            attached = [
                DocumentIn(
                    text=f"invoice payable to ACME number {i}",
                    title=f"ACME invoice {i}",
                    id=f"b{i}",
                    metadata={"vendor": "ACME", "year": 2031},
                )
                for i in range(5)
            ]
            await kb.ingest_documents(attached, bucket=bob, private=True)
            after, _ = await alice.call("search_text", args)
            assert after.content == before.content

            named, _ = await alice.call("search_text", {**args, "bucket": bob})
            assert named.is_error and named.content["reason"] == "unknown_bucket", named.content
            assert bob not in {b["bucket"] for b in named.content["available_buckets"]}
    finally:
        await kb.aclose()


async def test_readyz_counts_the_shared_corpus_only(tmp_path: Path) -> None:
    """``/readyz`` answers anyone, without a token: its knowledge counts (documents,
    chunks, vectors) are the shared corpus's, so nobody watching them learns when a user
    attached a file to a conversation, nor how long it was. Before, each upload moved
    all three (a file of N chunks: +1, +N, +N)."""
    settings = Settings.from_env(env(tmp_path, AGENT_EMBEDDER="hashing", AGENT_ADMIN_USERS="admin"))
    alice = bearer("alice")
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, _app),
        httpx.AsyncClient(base_url=base, timeout=60) as http,
    ):
        shared = {"documents": [{"id": "zeppelins", "title": "Zeppelins", "text": "Zeppelin hangar rules. " * 40}]}
        ingested = await http.post("/v1/kb/documents", json=shared, headers=bearer("admin"))
        assert ingested.status_code == 200, ingested.text

        async def readyz() -> dict[str, Any]:
            body: dict[str, Any] = (await http.get("/readyz")).json()
            return body

        async def counts() -> tuple[int, int, int]:
            """Once counted after the last write (in the background: a probe never waits
            for it) - else an attachment's upload would leave them unmoved trivially."""
            knowledge = knowledge_check(await current(readyz))
            return knowledge["documents"], knowledge["chunks"], knowledge["vectors"]

        before = await counts()
        assert before[0] == 1 and before[1] >= 1 and before[2] == before[1], before
        note = "# Private plan\n\n" + "Alice's launch codes are kept in the blue folder. " * 200
        up = await http.post(
            "/v1/agent/conversations/alice-1/attachments",
            files={"file": ("plan.md", note.encode(), "text/markdown")},
            headers=alice,
        )
        assert up.status_code == 201 and up.json()["chunks"] > 1, up.text
        assert await counts() == before
        # The attachment is stored and searchable all the same: its owner's listing has it.
        listed = await http.get("/v1/agent/conversations/alice-1/attachments", headers=alice)
        assert [a["id"] for a in listed.json()["attachments"]] == [up.json()["id"]]
        # A second shared document still moves the counts.
        more = {"documents": [{"id": "hangars", "title": "Hangars", "text": "Hangar doors open at dawn."}]}
        assert (await http.post("/v1/kb/documents", json=more, headers=bearer("admin"))).status_code == 200
        after = await counts()
        assert after[0] == 2 and after[1] > before[1] and after[2] == after[1], after
