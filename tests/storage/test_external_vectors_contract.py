"""The ``ExternalVectorStore`` contract and the keyword terms of ``KeywordStore``: saved
answers found by meaning and by order-free terms, alike on every engine."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from storage.keyword_records import ExternalResult, NewExternalVector

T0 = 1_700_000_000.0


def unit(*values: float) -> np.ndarray:
    v = np.asarray(values, np.float32)
    return v / np.linalg.norm(v)


def result(rid: str, at: float = T0) -> ExternalResult:
    return ExternalResult(rid, "perplexity", f"question {rid}", f"answer {rid}", (), None, "q", None, at)


async def test_vectors_come_back_by_model_dimension_and_id(store_engine: Any) -> None:
    vectors = store_engine.external_vectors
    await vectors.save("m", [NewExternalVector("question", "px_1", unit(1, 0, 0)),
                             NewExternalVector("answer", "px_1", unit(0, 1, 0))])
    await vectors.save("m", [NewExternalVector("keyword", "eu vat", unit(0, 0, 1)),
                             NewExternalVector("answer", "px_1", unit(1, 1, 1))])  # kept: (kind, ref) has one
    await vectors.save("other", [NewExternalVector("answer", "px_1", unit(1, 1))])
    rows = await vectors.after("m", 3, 0, 100)
    assert [(r.kind, r.ref) for r in rows] == [("question", "px_1"), ("answer", "px_1"), ("keyword", "eu vat")]
    assert [r.id for r in rows] == sorted(r.id for r in rows)
    np.testing.assert_allclose(rows[1].vector, unit(0, 1, 0), rtol=1e-6)
    assert rows[1].vector.dtype == np.float32
    assert [r.ref for r in await vectors.after("m", 3, rows[1].id, 100)] == ["eu vat"]
    assert len(await vectors.after("m", 3, 0, 1)) == 1
    assert await vectors.after("m", 2, 0, 100) == []
    assert [r.kind for r in await vectors.after("other", 2, 0, 100)] == ["answer"]


async def test_concurrent_saves_are_never_skipped_by_a_reader(store_engine: Any) -> None:
    vectors = store_engine.external_vectors
    seen: list[str] = []
    last = 0
    one_reader = asyncio.Lock()  # like the one loader of a process

    async def read() -> None:
        nonlocal last
        async with one_reader:
            for row in await vectors.after("m", 2, last, 1000):
                seen.append(row.ref)
                last = row.id

    async def save(i: int) -> None:
        await vectors.save("m", [NewExternalVector("keyword", f"k{i}", unit(1, i + 1))])
        await read()

    await asyncio.gather(*(save(i) for i in range(40)))
    await read()
    assert sorted(seen) == sorted(f"k{i}" for i in range(40))


async def test_unembedded_results_and_keywords(store_engine: Any) -> None:
    for rid, at in (("px_1", T0), ("px_2", T0 + 1)):
        await store_engine.external_results.save(result(rid, at))
    await store_engine.keywords.upsert({"eu vat": "EU VAT", "reverse charge": "Reverse charge"},
                                       query_id="q", external_result_ids=["px_1"], owner="alice", now=T0)
    await store_engine.keywords.upsert({"reverse charge": "reverse charge"}, query_id="q", owner="bob", now=T0)
    vectors = store_engine.external_vectors
    assert [r.id for r in await vectors.unembedded_results("m", 10)] == ["px_1", "px_2"]
    await vectors.save("m", [NewExternalVector("answer", "px_1", unit(1, 0)),
                             NewExternalVector("keyword", "eu vat", unit(0, 1))])
    assert [r.id for r in await vectors.unembedded_results("m", 10)] == ["px_2"]
    assert [r.id for r in await vectors.unembedded_results("other", 1)] == ["px_1"]
    # A key's vector serves every owner's keyword of that key: listed once.
    assert list(await vectors.unembedded_keywords("m", 10)) == ["reverse charge"]


async def test_keyword_terms_find_results_in_any_order(store_engine: Any) -> None:
    keywords = store_engine.keywords
    await keywords.upsert({"eu vat rules": "EU VAT rules"}, query_id="q1", external_result_ids=["px_1"],
                          owner="alice", now=T0, terms={"eu vat rules": ["eu", "vat", "rule"]})
    await keywords.upsert({"vat": "VAT"}, query_id="q2", external_result_ids=["px_2", "px_1"], owner="alice", now=T0,
                          terms={"vat": ["vat"]})
    await keywords.upsert({"no terms": "no terms"}, query_id="q3", external_result_ids=["px_3"], owner="alice", now=T0)
    hits = await keywords.term_hits({"vat", "rule", "unknown"}, owner="alice")
    assert sorted((h.external_result_id, h.key, h.matched, h.terms) for h in hits) == [
        ("px_1", "eu vat rules", 2, 3), ("px_1", "vat", 1, 1), ("px_2", "vat", 1, 1)]
    assert await keywords.term_hits(set(), owner="alice") == []
    assert await keywords.without_terms(10) == {"no terms": "no terms"}
    await keywords.set_terms({"no terms": ["term"], "eu vat rules": ["eu", "vat"], "unknown key": ["x"]})
    assert await keywords.without_terms(10) == {}
    again = await keywords.term_hits({"rule", "term"}, owner="alice")
    assert sorted((h.key, h.matched, h.terms) for h in again) == [("no terms", 1, 1)]
    assert await keywords.prune(usage_below=2, idle_before=T0 + 1, now=T0 + 1) == 3
    assert await keywords.term_hits({"vat", "term"}, owner="alice") == []
