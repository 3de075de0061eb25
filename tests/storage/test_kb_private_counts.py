"""No count of the knowledge base includes another user's private bucket, on either
engine — not even one made by another replica between a bucket list being read and the
count's statement.

A conversation's attachments live in a private bucket (``knowledge.attachments``). The
counts of "every bucket" (``count_documents``, ``constraint_counts``, ``relax_filters``,
and the relaxed retry of an every-bucket search) used to read the bucket list and, while
it held no private bucket, count every document: user B's first attachment committed
between that read and the count was counted into user A's numbers (which the corpus tools
show the model: "N documents match", the relaxed filter). Now the count's own statement
leaves private buckets out (``KBScope.hidden_prefix``). The race is pinned as in
``tests/test_attachment_counts.py``: the bucket list is kept as it was read before B's
attachment was made.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from knowledge import KnowledgeBase
from knowledge.attachments import attachment_bucket
from knowledge.types import DocumentIn
from toolindex.hashing import HashingEmbedder


@pytest.fixture
async def kb(store_engine: Any) -> AsyncIterator[KnowledgeBase]:
    base = await KnowledgeBase.create(store_engine.kb_index, HashingEmbedder(dim=64))
    try:
        yield base
    finally:
        await base.aclose()


def doc(i: int, text: str, source: str) -> DocumentIn:
    return DocumentIn(text=text, title=f"doc {i}", id=f"d{i}", source=source)


#: No document matches both; alone each matches one shared document. User B's attached
#: "manual"s make ``source`` look the less restrictive one if they are counted.
FILTERS = {"source": "manual", "title": "doc 2"}


async def counts_of_every_bucket(kb: KnowledgeBase) -> dict[str, Any]:
    """Everything user A's corpus tools could be told about "every bucket"."""
    relaxed_search = await kb.search("zeppelin", buckets=["*"], filters=FILTERS, relax=True, mode="text")
    return {
        "documents": (await kb.count_documents()).documents,
        "matching": (await kb.count_documents("zeppelin")).documents,
        "matching, filtered": (await kb.count_documents("zeppelin", filters={"source": "manual"})).documents,
        "filtered": (await kb.count_documents(filters={"source": "manual"})).documents,
        "constraints": [(c.label, c.documents) for c in await kb.constraint_counts(FILTERS)],
        "relaxed": await kb.relax_filters(FILTERS),
        "search relaxed": (relaxed_search.relaxed, relaxed_search.dropped_filter),
        "search hits": sorted({h.doc_id for h in relaxed_search.hits}),
    }


async def test_a_private_bucket_made_after_the_bucket_list_was_read_changes_no_count(
    kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kb.ingest_documents([doc(1, "zeppelin maintenance manual", "manual"), doc(2, "zeppelin hangar", "rules")])
    before = await counts_of_every_bucket(kb)
    assert before["documents"] == 2 and before["matching"] == 2 and before["filtered"] == 1, before
    assert before["constraints"] == [('{"source":"manual"}', 1), ('{"title":"doc 2"}', 1)], before

    # User A's bucket list is read: no private bucket anywhere yet.
    names_before = kb._buckets.names()
    # Then user B's first attachment commits (another replica, say): three "manual"s.
    bob = attachment_bucket("bob", "conversation-1")
    attached = [doc(10 + i, f"zeppelin notes page {i}", "manual") for i in range(3)]
    await kb.ingest_documents(attached, bucket=bob, private=True)
    assert len(await kb.list_documents(bucket=bob, private=bob)) == 3  # they are stored

    async def stale_load() -> None:  # A's read happened before B's attachment
        return None

    monkeypatch.setattr(kb._buckets, "load", stale_load)
    monkeypatch.setattr(kb._buckets, "names", lambda: names_before)
    after = await counts_of_every_bucket(kb)
    assert after == before  # B's three documents changed none of A's counts


async def test_counts_of_every_bucket_leave_every_private_bucket_out_whoever_made_it(kb: KnowledgeBase) -> None:
    """Without the race: user A's own attachment and user B's are both out of A's
    counts (a count must not tell how many documents a conversation holds), while a
    shared bucket made since is in them at once."""
    await kb.ingest_documents([doc(1, "zeppelin maintenance manual", "manual"), doc(2, "zeppelin hangar", "rules")])
    before = await counts_of_every_bucket(kb)
    for user in ("alice", "bob"):
        bucket = attachment_bucket(user, "conversation-1")
        await kb.ingest_documents([doc(20 + len(user), "zeppelin attic", "manual")], bucket=bucket, private=True)
    assert await counts_of_every_bucket(kb) == before

    await kb.ingest_documents([doc(3, "zeppelin mooring manual", "manual")], bucket="extra")
    grown = await counts_of_every_bucket(kb)
    assert grown["documents"] == 3 and grown["matching"] == 3 and grown["filtered"] == 2, grown
    assert (await kb.count_documents(bucket="extra")).documents == 1
