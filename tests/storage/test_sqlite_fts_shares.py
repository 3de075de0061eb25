"""A large filtered scope's BM25 ranking in shares of the chunk-id range
(``storage.sqlite.kb_fts_shares``) is the one statement's ranking: the same chunks, the
same scores, the same order (ties by id, across shares too) and the same match count,
whether the scope came as a filter (a text search) or as its chunk ids (a hybrid one).

The share threshold is lowered so a test-sized bucket is ranked in shares; each
comparison's reference is the same call with the threshold above the scope."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge.buckets import typed_values
from knowledge.filters import compile_filters
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBRanked, KBScope, KBTextTuning
from storage.sqlite import kb_fts
from storage.sqlite.kb_fts_shares import merge_shares, share_bounds
from tests.support.storage import opened_storage

FIELDS = {"type": "TEXT", "year": "INTEGER"}
TYPES = ["diode", "mosfet", "regulator"]
WORDS = ["maximum", "voltage", "current", "breakdown", "thermal", "gain", "leakage", "noise"]


def _document(i: int, rng: random.Random) -> KBDocumentWrite:
    kind = TYPES[i % 3]
    # Every eighth document repeats an earlier one's text: equal scores, ordered by id.
    seed = i - 8 if i % 8 == 7 else i
    words = random.Random(seed).choices(WORDS, k=random.Random(seed).randint(3, 12))
    text = f"The part {i} is a {kind} device. " + " ".join(words)
    meta = {"type": kind, "year": rng.randint(2019, 2024)}
    return KBDocumentWrite(
        id=f"ds-{i:05d}",
        title=f"{kind} datasheet" if i % 5 else f"{kind} {words[0]} datasheet",
        source=f"ds-{i}.md",
        url=None,
        content_hash=f"h{i}",
        metadata=meta,
        chars=len(text),
        chunks=[KBChunkWrite(0, "", text)],
        typed=typed_values(FIELDS, meta),
    )


async def _ranked(kb: Any, terms: list[str], scope: KBScope, limit: int) -> KBRanked:
    return await kb.text_candidates(terms, scope, limit, KBTextTuning())


@pytest.mark.parametrize("share_min", [1, 40, 400])
async def test_a_ranking_in_shares_is_the_one_statements(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share_min: int
) -> None:
    rng = random.Random(43)
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("sheets", FIELDS, typed_row=typed_values)
        await kb.write_documents("sheets", FIELDS, [_document(i, rng) for i in range(1_500)])
        filters: list[dict[str, Any]] = [{"type": "mosfet"}, {"type": "diode", "year": {">=": 2021}}, {"year": 2020}]
        queries = [["mosfet", "maximum", "voltage"], ["breakdown", "thermal"], ["noise"], ["absent"]]
        compared = 0
        for f in filters:
            scope = KBScope("sheets", compile_filters(f, FIELDS, bucket="sheets"))
            chunk_ids = await kb.scoped_chunk_ids(scope)
            assert len(chunk_ids) > 2 * share_min or share_min == 400
            for terms in queries:
                for limit in (1, 10, 1_000):
                    monkeypatch.setattr(kb_fts, "SHARE_MIN_CHUNKS", 10**9)
                    one = await _ranked(kb, terms, scope, limit)
                    one_resolved = await _ranked(kb, terms, replace(scope, chunk_ids=chunk_ids), limit)
                    monkeypatch.setattr(kb_fts, "SHARE_MIN_CHUNKS", share_min)
                    shared = await _ranked(kb, terms, scope, limit)
                    shared_resolved = await _ranked(kb, terms, replace(scope, chunk_ids=chunk_ids), limit)
                    for got in (one_resolved, shared, shared_resolved):
                        assert (got.ids, got.scores, got.total) == (one.ids, one.scores, one.total), (f, terms, limit)
                    compared += bool(one.ids)
        assert compared >= 20
        # Ties do occur (copied texts), so the order by id across shares is checked above.
        tied = await _ranked(
            kb,
            ["mosfet", "maximum"],
            KBScope("sheets", compile_filters({"type": "mosfet"}, FIELDS, bucket="sheets")),
            1_000,
        )
        assert len(set(tied.scores)) < len(tied.scores)


def test_shares_split_the_scope_evenly_and_merge_by_score_then_id() -> None:
    ids = np.arange(10, 31, dtype=np.int64)
    assert share_bounds(ids, 2) == [(0, 10), (10, 21)]
    assert share_bounds(ids[:1], 2) == [(0, 1)]
    assert share_bounds(ids[:0], 2) == []
    # Rows (id, bm25, count): lower bm25 is better; equal scores by id; one share empty.
    first = [(3, -5.0, 3), (1, -2.0, 3), (7, -2.0, 3)]
    second = [(4, -5.0, 2), (2, -2.0, 2)]
    assert merge_shares([first, second, []], 4) == [(3, -5.0, 5), (4, -5.0, 5), (1, -2.0, 5), (2, -2.0, 5)]
    assert merge_shares([[], []], 10) == []
