"""No every-bucket search ranks or counts another user's private bucket, on either engine
— not even one made by another replica between the bucket list being read and the
search's statements.

A conversation's attachments live in a private bucket (``knowledge.attachments``). A
search of "every bucket" reads the bucket list and, while it holds no private bucket,
searches every document. User B's first attachment committed between that read and
the search was ranked by both sides: its hits were dropped afterwards
(``KnowledgeBase.search``), which left user A fewer than ``top_k`` hits, and its chunks
were counted into A's ``total_matches``. Now each side leaves private buckets out in its
own selection (``KBScope.hidden_prefix``: the text statement, the vector statement on
PostgreSQL, the in-memory matrix by the bucket stored with each row on SQLite). The race
is pinned as in ``tests/storage/test_kb_private_counts.py``: the bucket list is kept as it
was read before the attachments were made.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from knowledge import KnowledgeBase
from knowledge.attachments import attachment_bucket
from knowledge.types import DocumentIn, SearchResponse
from storage.postgres.kb_graphs import graph_name
from storage.sqlite import kb_fts
from toolindex.embedder import EmbedTask, Matrix
from toolindex.hashing import HashingEmbedder

MODES = ("text", "semantic", "hybrid")
QUERY = "zeppelin mooring mast"
TOP_K = 4


class RememberingEmbedder(HashingEmbedder):
    """The hashing embedder, remembering each text's vector in ``seen``, which this
    module's tests share: the 2,200 notes of ``varied_shared_docs`` (~300,000 words)
    are embedded once for the three tests that load them, not once per test (it was
    most of their time). A text's hashed vector depends on nothing but the text."""

    def __init__(self, seen: dict[str, np.ndarray]) -> None:
        super().__init__(dim=64)
        self.seen = seen

    async def embed_batch(self, texts: list[str], *, task: EmbedTask = "document") -> Matrix:
        missing = list(dict.fromkeys(t for t in texts if t not in self.seen))
        if missing:
            self.seen.update(zip(missing, await super().embed_batch(missing, task=task), strict=True))
        return np.stack([self.seen[t] for t in texts]) if texts else await super().embed_batch([], task=task)


@pytest.fixture(scope="module")
def vectors_seen() -> dict[str, np.ndarray]:
    return {}


@pytest.fixture
async def kb(store_engine: Any, vectors_seen: dict[str, np.ndarray]) -> AsyncIterator[KnowledgeBase]:
    base = await KnowledgeBase.create(store_engine.kb_index, RememberingEmbedder(vectors_seen))
    try:
        yield base
    finally:
        await base.aclose()


def shared_docs() -> list[DocumentIn]:
    """Eight shared documents that match the query, each a little differently."""
    topics = ["hangar", "crew", "winch", "weather", "ballast", "engine", "rope", "ladder"]
    return [
        DocumentIn(text=f"the zeppelin {t} checklist and the {t} log", title=f"shared {t}", id=f"s{i}", source="shared")
        for i, t in enumerate(topics)
    ]


def private_docs(owner: str) -> list[DocumentIn]:
    """Documents that say the query's words outright: they would rank above every shared one."""
    words = ["invoice", "receipt", "contract", "letter", "diary"]
    return [
        DocumentIn(
            text=f"zeppelin mooring mast: {owner}'s {w}, the zeppelin mooring mast {w} of page {n}",
            title=f"{owner} {w}",
            id=f"{owner}{n}",
            source=f"{owner}-{w}.pdf",
        )
        for n, w in enumerate(words)
    ]


def varied_shared_docs() -> list[DocumentIn]:
    """2,200 shared matches of "zeppelin", from a few words to a few hundred long: the
    best stand clear of the rest, so the ranking is settled long before every match is
    read (the SQLite probe, the PostgreSQL postings) and the total is counted apart.

    The other words are one vocabulary of 275 (note i says its first i // 8): only the
    length ranks a note for "zeppelin", and embedding ~300,000 distinct words instead
    (a vocabulary of its own per note) was ~10 s of CPU, most of this module's."""
    return [
        DocumentIn(
            text="zeppelin " + " ".join(f"w{k}" for k in range(i // 8)),
            title=f"note {i}",
            id=f"n{i}",
            source="notes",
        )
        for i in range(2200)
    ]


def weak_docs(owner: str) -> list[DocumentIn]:
    """40 documents that mention "zeppelin" once in a long text: ranked below every
    shared match by BM25, so no look at the ranking's top would see them."""
    filler = " ".join(f"word{w}" for w in range(60))
    return [
        DocumentIn(text=f"{filler} zeppelin {filler} page {n}", title=f"{owner} {n}", id=f"{owner}{n}", source="b.pdf")
        for n in range(40)
    ]


async def every_bucket(kb: KnowledgeBase, mode: str, **kw: Any) -> SearchResponse:
    return await kb.search(QUERY, top_k=TOP_K, mode=mode, **kw)  # type: ignore[arg-type]


def seen(response: SearchResponse) -> tuple[list[str], int, str]:
    return [h.doc_id for h in response.hits], response.total_matches, response.mode


async def race(kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """User A's bucket list is read with no private bucket in it; then user B's and user
    A's own attachments commit (another replica, say), and A's searches go on with the
    list as read. Returns (A's bucket, B's bucket)."""
    names_before = kb._buckets.names()
    alice, bob = attachment_bucket("alice", "conversation-a"), attachment_bucket("bob", "conversation-b")
    await kb.ingest_documents(private_docs("bob"), bucket=bob, private=True)
    await kb.ingest_documents(private_docs("alice"), bucket=alice, private=True)
    assert len(await kb.list_documents(bucket=bob, private=bob)) == 5  # they are stored

    async def stale_load() -> None:  # A's read happened before the attachments
        return None

    monkeypatch.setattr(kb._buckets, "load", stale_load)
    monkeypatch.setattr(kb._buckets, "names", lambda: names_before)
    return alice, bob


async def test_a_private_bucket_made_after_the_list_was_read_changes_no_hit_and_no_total(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kb.ingest_documents(shared_docs())
    before = {mode: seen(await every_bucket(kb, mode)) for mode in MODES}
    for mode, (hits, total, used) in before.items():
        assert used == mode and len(hits) == TOP_K and total == 8, (mode, before[mode])

    alice, _bob = await race(kb, monkeypatch)
    after = {mode: seen(await every_bucket(kb, mode)) for mode in MODES}
    assert after == before  # neither A's nor B's attachment reaches the ranking or the count
    starred = {mode: seen(await every_bucket(kb, mode, buckets=["*"])) for mode in MODES}
    assert starred == before

    # A's own attachment is searched when A names it, beside every shared bucket.
    for mode in MODES:
        mine = await every_bucket(kb, mode, private=[alice])
        hits = [h.doc_id for h in mine.hits]
        assert len(hits) == TOP_K and hits[0].startswith("alice"), (mode, seen(mine))
        assert not any(h.startswith("bob") for h in hits), (mode, hits)
        alone = await kb.search(QUERY, bucket=alice, private=[alice], mode=mode)  # type: ignore[arg-type]
        assert {h.doc_id for h in alone.hits} <= {f"alice{n}" for n in range(5)} and alone.hits, mode

    # Only private buckets are left out: a shared bucket made after the list was read
    # is searched and counted at once.
    extra = DocumentIn(text="zeppelin mooring mast manual", title="mast", id="extra1", source="extra")
    await kb.ingest_documents([extra], bucket="extra")
    for mode in MODES:
        response = await every_bucket(kb, mode)
        assert "extra1" in [h.doc_id for h in response.hits] and response.total_matches == 9, (mode, seen(response))
        assert all(h.doc_id.startswith(("s", "extra")) for h in response.hits), (mode, seen(response))


async def test_every_bucket_search_fills_top_k_with_shared_hits_when_private_chunks_rank_first(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's chunks say the query outright and would be the best candidates of both sides;
    A's every-bucket search still returns ``top_k`` shared hits, the best shared ones."""
    await kb.ingest_documents(shared_docs())
    await race(kb, monkeypatch)
    for mode in MODES:
        response = await every_bucket(kb, mode, buckets=["*"])
        hits = [h.doc_id for h in response.hits]
        assert len(hits) == TOP_K and all(h.startswith("s") for h in hits), (mode, hits)
        assert response.total_matches == 8, (mode, response.total_matches)
        # Not a count that merely happens to match: B's chunks are ranked, and counted,
        # by a search of B's own bucket.
        theirs = await kb.search(
            QUERY,
            bucket=attachment_bucket("bob", "conversation-b"),
            private=[attachment_bucket("bob", "conversation-b")],
            mode=mode,
            top_k=TOP_K,
        )  # type: ignore[arg-type]
        assert len(theirs.hits) == TOP_K and theirs.total_matches == 5, (mode, seen(theirs))


@pytest.mark.parametrize("store_engine", ["postgres"], indirect=True)
async def test_a_private_bucket_with_its_own_graph_is_no_part_of_an_every_bucket_search(
    store_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: past the exact threshold (set small here) each bucket is searched
    through its own HNSW graph, one statement per graph. B's private bucket with a graph
    of its own is not one of the statements of A's every-bucket search, and the exact
    rest leaves it out too."""
    index = store_engine.kb_index
    index.exact_scope_vectors = 6
    kb = await KnowledgeBase.create(index, HashingEmbedder(dim=64))
    try:
        await kb.ingest_documents(shared_docs())
        await kb.ingest_documents(shared_docs()[:3], bucket="small")  # under the threshold: the exact rest
        before = {mode: seen(await every_bucket(kb, mode)) for mode in MODES}
        _alice, bob = await race(kb, monkeypatch)
        await kb.ingest_documents([
            DocumentIn(text=f"zeppelin mooring mast scan {n}", title=f"scan {n}", id=f"bobscan{n}", source="bob.pdf")
            for n in range(4)
        ], bucket=bob, private=True)  # fmt: skip
        await asyncio.wait_for(index.graph_builds_done(), 60)
        rows = await store_engine.db.fetchall("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'kb%%hnsw%%'")
        graphs = {str(r[0]) for r in rows}
        assert {graph_name(64, "default"), graph_name(64, bob)} <= graphs, graphs
        assert graph_name(64, "small") not in graphs
        assert {mode: seen(await every_bucket(kb, mode)) for mode in MODES} == before
    finally:
        await kb.aclose()


async def test_a_private_bucket_made_after_the_list_was_read_changes_no_total_past_the_exact_count(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More matches than the text side ranks exactly (the SQLite probe's best 1,000, the
    PostgreSQL postings' first read): ``total_matches`` is then counted apart from the
    ranking, and B's matches ranked below the shared ones must not be in it either."""
    await kb.ingest_documents(varied_shared_docs())
    before = {mode: seen(await kb.search("zeppelin", top_k=TOP_K, mode=mode)) for mode in MODES}  # type: ignore[arg-type]
    # The semantic side counts the chunks of positive similarity: most notes (1,912).
    assert before["text"][1] == 2200 and before["semantic"][1] > 1800, before

    names_before = kb._buckets.names()
    bob = attachment_bucket("bob", "conversation-b")
    await kb.ingest_documents(weak_docs("bob"), bucket=bob, private=True)
    theirs = await kb.search("zeppelin", bucket=bob, private=[bob], mode="text", top_k=TOP_K)
    assert theirs.total_matches == 40

    async def stale_load() -> None:
        return None

    monkeypatch.setattr(kb._buckets, "load", stale_load)
    monkeypatch.setattr(kb._buckets, "names", lambda: names_before)
    after = {mode: seen(await kb.search("zeppelin", top_k=TOP_K, mode=mode)) for mode in MODES}  # type: ignore[arg-type]
    assert after == before


@pytest.mark.parametrize("store_engine", ["sqlite"], indirect=True)
async def test_an_attachment_committed_while_the_total_is_counted_does_not_move_it(
    store_engine: Any, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite past the probe: the every-bucket total is counted in one statement apart
    from the ranking. B's attachment committed right before that statement is neither
    counted nor subtracted (two statements, all matches then the hidden ones, each on
    its own snapshot, subtracted B's matches without having counted them)."""
    await kb.ingest_documents(varied_shared_docs())
    before = seen(await kb.search("zeppelin", top_k=TOP_K, mode="text"))
    assert before[1] == 2200, before
    bob = attachment_bucket("bob", "conversation-b")
    fetchone = store_engine.db.fetchone
    made: list[bool] = []

    async def bob_commits_first(sql: str, params: Any = ()) -> Any:
        if sql == kb_fts.SHOWN_MATCHES and not made:
            made.append(True)
            await kb.ingest_documents(weak_docs("bob"), bucket=bob, private=True)
        return await fetchone(sql, params)

    monkeypatch.setattr(store_engine.db, "fetchone", bob_commits_first)
    after = seen(await kb.search("zeppelin", top_k=TOP_K, mode="text"))
    assert made, "the every-bucket total was not counted apart from the ranking"
    assert after == before
