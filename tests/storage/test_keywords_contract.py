"""The ``KeywordStore`` contract: merging by key, associations, hits, touching, pruning,
and owners: a keyword is its user's, never merged with nor read by another.

Keys are opaque here: normalising them is the caller's job (``agenttools.keywords``), so
the store compares them exactly.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from storage.interfaces import KeywordStore

T0 = 1_700_000_000.0
DAY = 86_400.0
A, B = "alice", "bob"


@pytest.fixture
def keywords(store_engine: Any) -> KeywordStore:
    return store_engine.keywords


async def test_a_new_keyword_starts_at_one_use(keywords: KeywordStore) -> None:
    stored = await keywords.upsert(
        {"strasse": "Straße", "eu vat": "EU VAT"}, query_id="q1", external_result_ids=["px_1"], owner=A, now=T0
    )
    assert [(k.key, k.display, k.usage_count) for k in stored] == [("strasse", "Straße", 1), ("eu vat", "EU VAT", 1)]
    rec = await keywords.get("strasse", owner=A)
    assert rec is not None and rec == stored[0]
    assert rec.created_at == rec.updated_at == T0 and rec.last_used_at is None


async def test_a_known_keyword_is_merged(keywords: KeywordStore) -> None:
    [first] = await keywords.upsert({"strasse": "Straße"}, query_id="q1", owner=A, now=T0)
    stored = await keywords.upsert({"reverse charge": "Reverse charge", "strasse": "STRASSE"}, query_id="q2",
                                   owner=A, now=T0 + DAY)
    assert [k.key for k in stored] == ["reverse charge", "strasse"]  # the order given
    merged = stored[1]
    assert merged.keyword_id == first.keyword_id
    assert merged.display == "Straße"  # the first display form is kept
    assert merged.usage_count == 2
    assert merged.created_at == T0 and merged.updated_at == merged.last_used_at == T0 + DAY
    assert await keywords.get("strasse", owner=A) == merged


async def test_keys_are_compared_exactly(keywords: KeywordStore) -> None:
    await keywords.upsert({"eu vat": "EU VAT"}, query_id="q1", owner=A, now=T0)
    assert await keywords.get("EU VAT", owner=A) is None
    assert await keywords.get("eu vat", owner=A) is not None


async def test_one_association_per_result_or_one_for_the_query(keywords: KeywordStore) -> None:
    await keywords.upsert({"eu vat": "EU VAT"}, query_id="q1", external_result_ids=["px_1", "px_2", "px_1"],
                          conversation_id="c1", owner=A, now=T0)
    await keywords.upsert({"eu vat": "EU VAT"}, query_id="q2", owner=A, now=T0 + 1)
    assocs = await keywords.associations("eu vat", owner=A)
    assert [(a.keyword_key, a.query_id, a.external_result_id, a.conversation_id, a.archived) for a in assocs] == [
        ("eu vat", "q1", "px_1", "c1", False),
        ("eu vat", "q1", "px_2", "c1", False),
        ("eu vat", "q2", None, None, False),
    ]
    rec = await keywords.get("eu vat", owner=A)
    assert rec is not None and rec.usage_count == 2  # one use per call, not per result


async def test_a_repeated_association_is_kept_once_but_counts_a_use(keywords: KeywordStore) -> None:
    for t in (T0, T0 + 1):
        await keywords.upsert({"eu vat": "EU VAT"}, query_id="q1", external_result_ids=["px_1"],
                              conversation_id="c1", owner=A, now=t)
    assert len(await keywords.associations("eu vat", owner=A)) == 1
    assert (await keywords.get("eu vat", owner=A)).usage_count == 2  # type: ignore[union-attr]


async def test_an_association_needs_a_query_or_a_result(keywords: KeywordStore) -> None:
    with pytest.raises(ValueError):
        await keywords.upsert({"eu vat": "EU VAT"}, query_id=None, external_result_ids=[], owner=A, now=T0)
    assert await keywords.count() == 0
    assert await keywords.upsert({}, query_id=None, owner=A, now=T0) == []


async def test_any_number_of_keywords_in_one_call(keywords: KeywordStore) -> None:
    many = {f"term {i:04d}": f"Term {i:04d}" for i in range(1_200)}
    stored = await keywords.upsert(many, query_id="q1", external_result_ids=["px_1"], owner=A, now=T0)
    assert [k.key for k in stored] == list(many)
    assert await keywords.count() == 1_200
    hits = await keywords.hits(list(many), owner=A)
    assert sorted(h.key for h in hits) == sorted(many)


async def test_hits_are_live_keywords_that_point_at_results(keywords: KeywordStore) -> None:
    await keywords.upsert({"eu vat": "EU VAT", "reverse charge": "Reverse charge"}, query_id="q1",
                          external_result_ids=["px_1"], conversation_id="c1", owner=A, now=T0)
    await keywords.upsert({"eu vat": "EU VAT"}, query_id="q2", external_result_ids=["px_1", "px_2"],
                          conversation_id="c2", owner=A, now=T0)
    await keywords.upsert({"query only": "query only"}, query_id="q3", owner=A, now=T0)
    hits = await keywords.hits({"eu vat", "query only", "unknown key"}, owner=A)
    assert sorted((h.key, h.display, h.external_result_id) for h in hits) == [
        ("eu vat", "EU VAT", "px_1"),  # once, although two associations lead there
        ("eu vat", "EU VAT", "px_2"),
    ]
    assert await keywords.hits(set(), owner=A) == []


async def test_touch_sets_last_used_at_of_the_given_keys_only(keywords: KeywordStore) -> None:
    await keywords.upsert({"a key": "a key", "b key": "b key"}, query_id="q1", owner=A, now=T0)
    await keywords.touch({"a key", "unknown"}, owner=A, now=T0 + 5)
    a, b = await keywords.get("a key", owner=A), await keywords.get("b key", owner=A)
    assert a is not None and a.last_used_at == T0 + 5 and a.usage_count == 1 and a.updated_at == T0
    assert b is not None and b.last_used_at is None


async def test_prune_by_usage_and_idleness_archives_associations(keywords: KeywordStore) -> None:
    await keywords.upsert({"rare": "rare", "often": "often", "touched": "touched"}, query_id="q1",
                          external_result_ids=["px_1"], owner=A, now=T0)
    await keywords.upsert({"often": "often"}, query_id="q2", owner=A, now=T0)
    await keywords.upsert({"fresh": "fresh"}, query_id="q3", external_result_ids=["px_3"], owner=A, now=T0 + 40 * DAY)
    await keywords.touch({"touched"}, owner=A, now=T0 + 39 * DAY)
    now = T0 + 40 * DAY
    # rare: 1 use, idle 40 days -> goes; often: 2 uses -> stays; fresh: idle 0 days;
    # touched: 1 use but last used a day ago -> stays.
    assert await keywords.prune(usage_below=2, idle_before=now - 30 * DAY, now=now) == 1
    assert await keywords.get("rare", owner=A) is None
    assert all([await keywords.get(k, owner=A) is not None for k in ("often", "touched", "fresh")])
    assert await keywords.count() == 3
    [assoc] = await keywords.associations("rare", owner=A)
    assert assoc.archived and assoc.external_result_id == "px_1" and assoc.query_id == "q1"
    assert await keywords.hits({"rare"}, owner=A) == []
    assert not any(a.archived for a in await keywords.associations("often", owner=A))
    assert await keywords.prune(usage_below=2, idle_before=now - 30 * DAY, now=now) == 0


async def test_a_pruned_keyword_starts_afresh(keywords: KeywordStore) -> None:
    await keywords.upsert({"rare": "Rare"}, query_id="q1", external_result_ids=["px_1"], owner=A, now=T0)
    assert await keywords.prune(usage_below=2, idle_before=T0 + DAY, now=T0 + DAY) == 1
    [again] = await keywords.upsert({"rare": "rare"}, query_id="q2", external_result_ids=["px_2"], owner=A,
                                    now=T0 + 2 * DAY)
    assert again.usage_count == 1 and again.display == "rare" and again.created_at == T0 + 2 * DAY
    assert [h.external_result_id for h in await keywords.hits({"rare"}, owner=A)] == ["px_2"]
    assert [(a.external_result_id, a.archived) for a in await keywords.associations("rare", owner=A)] == [
        ("px_1", True),
        ("px_2", False),
    ]


async def test_concurrent_merges_never_lose_an_update(keywords: KeywordStore) -> None:
    vocab = ["alpha", "beta", "gamma", "delta", "epsilon"]

    def words(i: int) -> list[str]:
        return [vocab[(i + j) % len(vocab)] for j in range(1 + i % 3)]

    await asyncio.gather(
        *(
            keywords.upsert({w: w for w in words(i)}, query_id=f"q{i}", external_result_ids=[f"px_{i}"], owner=A,
                            now=T0 + i)
            for i in range(60)
        )
    )
    for w in vocab:
        calls = [i for i in range(60) if w in words(i)]
        rec = await keywords.get(w, owner=A)
        assert rec is not None and rec.usage_count == len(calls), w
        assocs = await keywords.associations(w, owner=A)
        assert sorted(a.query_id or "" for a in assocs) == sorted(f"q{i}" for i in calls)


async def test_unknown_keys_read_as_absent(keywords: KeywordStore) -> None:
    assert await keywords.get("nothing", owner=A) is None
    assert await keywords.associations("nothing", owner=A) == []
    assert await keywords.count() == 0


async def test_each_owner_has_their_own_keywords(keywords: KeywordStore) -> None:
    """Issue 21: the same key indexed by two users is two keywords; nothing one user
    stored (its display form, uses, associations, results) is read for the other."""
    [a] = await keywords.upsert({"eu vat": "EU VAT"}, query_id="qa", external_result_ids=["px_a"],
                                conversation_id="ca", owner=A, now=T0, terms={"eu vat": ["eu", "vat"]})
    [b] = await keywords.upsert({"eu vat": "eu-VAT"}, query_id="qb", external_result_ids=["px_b"],
                                conversation_id="cb", owner=B, now=T0 + 1, terms={"eu vat": ["eu", "vat"]})
    assert a.keyword_id != b.keyword_id and a.usage_count == b.usage_count == 1  # never merged across users
    assert (a.owner, b.owner, b.display) == (A, B, "eu-VAT")
    assert await keywords.get("eu vat", owner=A) == a and await keywords.get("eu vat", owner="carol") is None
    assert await keywords.count() == 2

    assert [h.external_result_id for h in await keywords.hits({"eu vat"}, owner=A)] == ["px_a"]
    assert [h.external_result_id for h in await keywords.hits({"eu vat"}, owner=B)] == ["px_b"]
    assert await keywords.hits({"eu vat"}, owner="carol") == []
    assert sorted(h.external_result_id for h in await keywords.hits({"eu vat"}, owner=None)) == ["px_a", "px_b"]

    assert [h.external_result_id for h in await keywords.term_hits({"eu", "vat"}, owner=A)] == ["px_a"]
    assert await keywords.term_hits({"eu", "vat"}, owner="carol") == []
    both = await keywords.term_hits({"eu", "vat"}, owner=None)
    assert sorted((h.external_result_id, h.matched, h.terms) for h in both) == [("px_a", 2, 2), ("px_b", 2, 2)]

    assert [x.conversation_id for x in await keywords.associations("eu vat", owner=B)] == ["cb"]
    assert sorted(x.conversation_id or "" for x in await keywords.associations("eu vat", owner=None)) == ["ca", "cb"]

    await keywords.touch({"eu vat"}, owner=A, now=T0 + 9)
    assert (await keywords.get("eu vat", owner=A)).last_used_at == T0 + 9  # type: ignore[union-attr]
    assert (await keywords.get("eu vat", owner=B)).last_used_at is None  # type: ignore[union-attr]

    [again] = await keywords.upsert({"eu vat": "EU VAT"}, query_id="qa2", external_result_ids=["px_a2"],
                                    owner=A, now=T0 + 10)
    assert again.keyword_id == a.keyword_id and again.usage_count == 2
    assert (await keywords.get("eu vat", owner=B)).usage_count == 1  # type: ignore[union-attr]
