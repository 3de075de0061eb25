"""Keyword rules and the keyword store (seed 001): validation, normalisation, merging under
concurrency, associations, lookup by phrase, pruning by usage and age."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agenttools.rag.external_results import Citation, new_external_result
from agenttools.rag.keyword_rules import (
    Candidate,
    Rejection,
    check_keyword,
    keyword_key,
    validate_keywords,
)
from agenttools.rag.keywords import KeywordIndex
from storage.interfaces import ExternalResultStore
from storage.sqlite import SqliteStorage, open_sqlite_storage
from tests.support.storage import opened_storage


class Clock:
    """A settable clock so ages are exact, not slept for."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance_days(self, days: float) -> None:
        self.now += days * 86_400.0


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "agent.db"


@pytest.fixture
async def storage(db_path: Path):
    async with opened_storage(db_path) as s:
        yield s


@pytest.fixture
def results(storage: SqliteStorage) -> ExternalResultStore:
    return storage.external_results


@pytest.fixture
def store(storage: SqliteStorage, clock: Clock) -> KeywordIndex:
    return KeywordIndex(storage.keywords, storage.external_results, clock=clock)


def cands(*words: str) -> list[Candidate]:
    out = []
    for w in words:
        c = check_keyword(w)
        assert isinstance(c, Candidate), c
        out.append(c)
    return out


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("a", "too_short"),
        ("   x  ", "too_short"),
        ("", "empty"),
        ("   ", "empty"),
        ("y" * 51, "too_long"),
        ("the", "generic"),
        ("THE", "generic"),
        ("Information", "generic"),
        ("of the", "generic"),
        ("--", "no_letters"),
        ("one two three four five six seven", "too_many_words"),
        (42, "not_text"),
    ],
)
def test_bad_keywords_are_rejected_with_a_reason(raw: object, reason: str) -> None:
    checked = check_keyword(raw)
    assert isinstance(checked, Rejection)
    assert checked.reason == reason
    assert checked.message


@pytest.mark.parametrize("raw", ["AI", "AAPL stock price", "quantum computing applications", "y" * 50, "C#"])
def test_good_keywords_pass(raw: str) -> None:
    assert isinstance(check_keyword(raw), Candidate)


def test_length_counts_after_trimming() -> None:
    padded = "  " + "z" * 50 + "  "
    assert isinstance(check_keyword(padded), Candidate)
    assert check_keyword(padded).display == "z" * 50  # type: ignore[union-attr]


def test_unicode_normalisation_merges_case_and_width_variants() -> None:
    assert keyword_key("Straße") == keyword_key("STRASSE") == keyword_key("strasse")
    assert keyword_key("ＡＡＰＬ stock") == keyword_key("aapl STOCK")  # full-width letters
    assert keyword_key("  Quantum   Computing, ") == "quantum computing"
    assert keyword_key("C#") == "c#"  # meaningful edge punctuation survives
    # full-width input is stored in its NFKC display form
    assert check_keyword("ＡＡＰＬ").display == "AAPL"  # type: ignore[union-attr]


def test_duplicates_within_one_call_are_merged_not_rejected() -> None:
    v = validate_keywords(["Straße", "STRASSE", "quantum computing", "Quantum  Computing", "the"])
    assert [c.key for c in v.accepted] == ["strasse", "quantum computing"]
    assert v.duplicates == ("STRASSE", "Quantum Computing")
    assert [r.reason for r in v.rejected] == ["generic"]


# ------------------------------------------------------------------ store: merge & associations


async def test_index_creates_then_merges(store: KeywordIndex, clock: Clock) -> None:
    first = await store.index(
        cands("Straße", "EU VAT"), query_id="q1", external_result_ids=["px_1"], conversation_id="c1"
    )
    assert [(k.display, k.usage_count, k.merged) for k in first] == [
        ("Straße", 1, False),
        ("EU VAT", 1, False),
    ]
    rec = await store.get("strasse")
    assert rec is not None and rec.last_used_at is None
    clock.advance_days(1)
    second = await store.index(
        cands("STRASSE", "Reverse charge"), query_id="q2", external_result_ids=["px_2"]
    )
    assert [(k.display, k.usage_count, k.merged) for k in second] == [
        ("Straße", 2, True),
        ("Reverse charge", 1, False),
    ]
    rec = await store.get("STRASSE")
    assert rec is not None
    assert rec.display == "Straße"  # first display form kept
    assert rec.usage_count == 2
    assert rec.updated_at == rec.last_used_at == clock.now
    assert rec.created_at == clock.now - 86_400
    assocs = await store.associations("straße")
    assert [(a.query_id, a.external_result_id, a.conversation_id) for a in assocs] == [
        ("q1", "px_1", "c1"),
        ("q2", "px_2", None),
    ]


async def test_association_needs_a_query_or_a_result(store: KeywordIndex) -> None:
    with pytest.raises(ValueError):
        await store.index(cands("EU VAT"), query_id=None, external_result_ids=[])
    assert await store.count() == 0


async def test_one_association_per_result(store: KeywordIndex) -> None:
    await store.index(cands("EU VAT"), query_id="q1", external_result_ids=["px_1", "px_2"])
    assocs = await store.associations("eu vat")
    assert sorted(a.external_result_id or "" for a in assocs) == ["px_1", "px_2"]
    assert (await store.get("eu vat")).usage_count == 1  # type: ignore[union-attr]


async def test_concurrent_indexing_never_loses_an_update(db_path: Path, store: KeywordIndex) -> None:
    """200 calls over overlapping keywords, spread over four storage bundles on one file
    (as four worker processes would be, each with its own writer): every usage count
    exact, every association present."""
    bundles = [await open_sqlite_storage(db_path) for _ in range(3)]
    others = [KeywordIndex(b.keywords, b.external_results) for b in bundles]
    stores = [store, *others]
    vocab = ["alpha term", "beta term", "gamma term", "delta term", "epsilon term", "zeta term", "eta term"]

    def words_for(i: int) -> list[str]:
        return [vocab[(i + j) % len(vocab)] for j in range(3 + i % 3)]

    try:
        await asyncio.gather(
            *(
                stores[i % 4].index(cands(*words_for(i)), query_id=f"q{i}", external_result_ids=[f"px_{i}"])
                for i in range(200)
            )
        )
    finally:
        for b in bundles:
            await b.close()

    expected: dict[str, list[int]] = {w: [] for w in vocab}
    for i in range(200):
        for w in words_for(i):
            expected[w].append(i)
    for w, calls in expected.items():
        rec = await store.get(w)
        assert rec is not None and rec.usage_count == len(calls), w
        assocs = await store.associations(w)
        assert sorted(a.query_id for a in assocs) == sorted(f"q{i}" for i in calls)  # type: ignore[type-var]


# ------------------------------------------------------------------ lookup


async def test_lookup_matches_all_terms_of_a_keyword_in_any_order(
    store: KeywordIndex, results: ExternalResultStore, clock: Clock
) -> None:
    vat = new_external_result(
        provider="perplexity",
        query="EU VAT reverse charge rules",
        answer="Reverse charge applies [1].",
        citations=[Citation(1, "https://ec.europa.eu/vat", "VAT rules")],
        query_id="q1",
        now=clock(),
    )
    nitrogen = new_external_result(
        provider="perplexity",
        query="boiling point of liquid nitrogen",
        answer="77 K.",
        citations=[],
        query_id="q2",
        now=clock(),
    )
    await results.save(vat)
    await results.save(nitrogen)
    await store.index(
        cands("reverse charge", "EU VAT", "Straße"), query_id="q1", external_result_ids=[vat.id]
    )
    await store.index(
        cands("liquid nitrogen", "boiling point", "cryogenics"),
        query_id="q2",
        external_result_ids=[nitrogen.id],
    )

    found = await store.lookup("How does the REVERSE CHARGE work for eu vat?")
    assert [r.id for r in found] == [vat.id]
    assert found[0].matched_keywords == ("EU VAT", "reverse charge")
    assert found[0].citations[0].url == "https://ec.europa.eu/vat"
    # every term of a keyword must be there, in any order; half a keyword is not enough
    assert [r.id for r in await store.lookup("charge reverse")] == [vat.id]
    assert await store.lookup("liquidnitrogen") == []
    assert await store.lookup("nitrogen") == []
    # normalisation on the query side too
    assert [r.id for r in await store.lookup("ＳＴＲＡＳＳＥ names")] == [vat.id]
    # ranking: more matched phrase words first
    clock.advance_days(1)
    both = await store.lookup("cryogenics: the boiling point of liquid nitrogen and eu vat")
    assert [r.id for r in both] == [nitrogen.id, vat.id]
    rec = await store.get("cryogenics")
    assert rec is not None and rec.last_used_at == clock.now


# ------------------------------------------------------------------ pruning


async def test_prune_by_usage_and_age_keeps_associations_archived(store: KeywordIndex, clock: Clock) -> None:
    await store.index(
        cands("rarely used", "often used", "fresh single"), query_id="q1", external_result_ids=["px_1"]
    )
    await store.index(
        cands("often used", "extra one", "extra two"), query_id="q2", external_result_ids=["px_2"]
    )
    clock.advance_days(40)
    await store.index(
        cands("fresh single", "new one", "new two"), query_id="q3", external_result_ids=["px_3"]
    )
    # rarely used: usage 1, idle 40 days -> pruned; extra one/two: same -> pruned;
    # often used: usage 2 -> kept; fresh single: usage 2 -> kept; new one/two: idle 0 days -> kept.
    pruned = await store.prune(min_usage=2, older_than_days=30)
    assert pruned == 3
    assert await store.get("rarely used") is None
    assert await store.get("often used") is not None
    assert await store.get("new one") is not None
    assert await store.count() == 4
    assocs = await store.associations("rarely used")
    assert len(assocs) == 1 and assocs[0].archived and assocs[0].external_result_id == "px_1"
    assert await store.lookup("rarely used things") == []
    # indexing a pruned keyword again starts it afresh
    again = await store.index(
        cands("rarely used", "often used", "new one"), query_id="q4", external_result_ids=["px_4"]
    )
    assert [(k.display, k.usage_count) for k in again] == [
        ("rarely used", 1),
        ("often used", 3),
        ("new one", 2),
    ]
    assert await store.prune(min_usage=2, older_than_days=30) == 0


async def test_prune_rejects_nonsense_arguments(store: KeywordIndex) -> None:
    with pytest.raises(ValueError):
        await store.prune(min_usage=0, older_than_days=1)
    with pytest.raises(ValueError):
        await store.prune(min_usage=1, older_than_days=-1)


async def test_a_second_bundle_on_the_file_sees_the_data_and_migrates_nothing(
    db_path: Path, storage: SqliteStorage, store: KeywordIndex
) -> None:
    await store.index(cands("EU VAT"), query_id="q1")
    async with opened_storage(db_path) as again:
        assert again.schema_version == storage.schema_version
        assert (await KeywordIndex(again.keywords, again.external_results).get("eu vat")) is not None
        rows = await again.db.fetchall("SELECT version FROM schema_version ORDER BY version")
        assert [r[0] for r in rows] == list(range(1, storage.schema_version + 1))


async def test_a_cancelled_index_call_commits_whole_or_not_at_all(db_path: Path, store: KeywordIndex) -> None:
    """Cancelled while waiting for the write lock (another process holds it): the call's
    transaction still ends (commit or rollback) before the writer is reused, so there is
    no partial write and no transaction left open."""
    import aiosqlite

    async with aiosqlite.connect(str(db_path), isolation_level=None) as other:
        await other.execute_fetchall("BEGIN IMMEDIATE")
        task = asyncio.create_task(store.index(cands("EU VAT", "reverse charge"), query_id="q1"))
        await asyncio.sleep(0.05)
        task.cancel()
        await other.execute_fetchall("ROLLBACK")
        with pytest.raises(asyncio.CancelledError):
            await task
    first = [await store.get("eu vat"), await store.get("reverse charge")]
    assert (first[0] is None and first[1] is None) or all(r is not None and r.usage_count == 1 for r in first)
    landed = first[0] is not None
    again = await store.index(cands("EU VAT", "reverse charge"), query_id="q2")
    assert [k.usage_count for k in again] == ([2, 2] if landed else [1, 1])
    assert [a.query_id for a in await store.associations("eu vat")] == (["q1", "q2"] if landed else ["q2"])
