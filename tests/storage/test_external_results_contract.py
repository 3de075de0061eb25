"""The ``ExternalResultStore`` contract: stored answers come back whole, in the order
asked, and only to their owner when one is named."""

from __future__ import annotations

from typing import Any

import pytest

from storage.interfaces import ExternalResultStore
from storage.keyword_records import Citation, ExternalResult


@pytest.fixture
def results(store_engine: Any) -> ExternalResultStore:
    return store_engine.external_results


def result(rid: str, **kw: Any) -> ExternalResult:
    fields: dict[str, Any] = {
        "provider": "perplexity",
        "query": f"question for {rid}",
        "answer": "Liquid nitrogen boils at 77 K [1][2].",
        "citations": (),
        "model": None,
        "query_id": None,
        "conversation_id": None,
        "created_at": 1_700_000_000.5,
    }
    fields.update(kw)
    return ExternalResult(id=rid, **fields)


async def test_a_saved_result_comes_back_whole(results: ExternalResultStore) -> None:
    r = result(
        "px_1",
        citations=(
            Citation(1, "https://en.wikipedia.org/wiki/Liquid_nitrogen", "Liquid nitrogen", date="2025-11-02",
                     snippet="boils at 77 K"),
            Citation(2, "https://webbook.nist.gov/nitrogen"),
        ),
        model="sonar",
        query_id="q1",
        conversation_id="c1",
    )
    await results.save(r)
    assert await results.get("px_1", owner=None) == r


async def test_unicode_and_empty_fields_survive(results: ExternalResultStore) -> None:
    r = result("px_ü", query="Stra\u00dfe \uff21\uff21\uff30\uff2c \u6771\u4eac", answer="", citations=())
    await results.save(r)
    assert await results.get("px_ü", owner=None) == r


async def test_matched_keywords_are_not_stored(results: ExternalResultStore) -> None:
    await results.save(result("px_1", matched_keywords=("eu vat",)))
    got = await results.get("px_1", owner=None)
    assert got is not None and got.matched_keywords == ()


async def test_unknown_ids_read_as_absent(results: ExternalResultStore) -> None:
    assert await results.get("px_missing", owner=None) is None
    assert await results.get_many([], owner=None) == []
    assert await results.get_many(["px_missing"], owner=None) == []


async def test_get_many_keeps_the_order_asked_skips_unknown_and_repeats(results: ExternalResultStore) -> None:
    for rid in ("px_a", "px_b", "px_c"):
        await results.save(result(rid))
    got = await results.get_many(["px_c", "px_missing", "px_a", "px_c", "px_b"], owner=None)
    assert [r.id for r in got] == ["px_c", "px_a", "px_b"]


async def test_get_many_takes_any_number_of_ids(results: ExternalResultStore) -> None:
    ids = [f"px_{i:04d}" for i in range(1_200)]
    for rid in ids:
        await results.save(result(rid))
    got = await results.get_many(list(reversed(ids)), owner=None)
    assert [r.id for r in got] == list(reversed(ids))


async def test_an_owner_reads_only_their_own_results(results: ExternalResultStore) -> None:
    """Issue 21: Alice's saved web answer is not read for Bob (None: every owner, the
    shared pool)."""
    await results.save(result("px_alice", owner="alice", query="my medical leave"))
    await results.save(result("px_bob", owner="bob"))
    await results.save(result("px_nobody"))  # from before owners: nobody's
    ids = ["px_alice", "px_bob", "px_nobody"]
    assert [r.id for r in await results.get_many(ids, owner="alice")] == ["px_alice"]
    assert [r.id for r in await results.get_many(ids, owner="bob")] == ["px_bob"]
    assert await results.get_many(ids, owner="carol") == []
    assert [r.id for r in await results.get_many(ids, owner=None)] == ids
    assert await results.get("px_alice", owner="bob") is None
    got = await results.get("px_alice", owner="alice")
    assert got is not None and got.owner == "alice" and got.query == "my medical leave"
    nobody = await results.get("px_nobody", owner=None)
    assert nobody is not None and nobody.owner == ""
