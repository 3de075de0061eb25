"""Score fusion: per-query normalisation, side weights, and the re-ranker's scale."""

from __future__ import annotations

import pytest

from knowledge.ranking import (
    DEFAULT_DENSE_WEIGHT,
    Candidate,
    QueryTerms,
    dense_weight,
    fuse,
    minmax,
    rerank,
)


def test_minmax_spans_unit_interval_and_flat_lists_are_all_best() -> None:
    assert minmax([10.0, 6.0, 2.0]) == [1.0, 0.5, 0.0]
    assert minmax([0.3, 0.3]) == [1.0, 1.0]
    assert minmax([]) == []


def test_single_side_keeps_its_order_and_relative_gaps() -> None:
    fused = fuse([([7, 8, 9], [20.0, 19.0, 2.0], 1.0), ([], [], 0.25)])
    assert fused == pytest.approx({7: 1.0, 8: 17 / 18, 9: 0.0})
    assert sorted(fused, key=lambda i: -fused[i]) == [7, 8, 9]


def test_scales_do_not_matter_only_each_sides_spread() -> None:
    # BM25 in the tens and cosines squeezed into 0.20..0.22 count alike once normalised.
    a = fuse([([1, 2], [30.0, 10.0], 1.0), ([2, 1], [0.22, 0.20], 1.0)])
    assert a[1] == pytest.approx(0.5) and a[2] == pytest.approx(0.5)


def test_weights_decide_which_side_wins_a_disagreement() -> None:
    text = ([1, 2, 3], [9.0, 5.0, 1.0])
    vec = ([3, 2, 1], [0.9, 0.5, 0.1])
    bm25_led = fuse([(*text, 1.0), (*vec, 0.25)])
    vec_led = fuse([(*text, 0.25), (*vec, 1.0)])
    assert max(bm25_led, key=bm25_led.__getitem__) == 1
    assert max(vec_led, key=vec_led.__getitem__) == 3
    assert all(0.0 <= v <= 1.0 for v in (*bm25_led.values(), *vec_led.values()))


def test_agreement_on_both_sides_reaches_one_and_missing_side_counts_zero() -> None:
    fused = fuse([([1, 2], [4.0, 1.0], 1.0), ([1, 3], [0.8, 0.2], 1.0)])
    assert fused[1] == pytest.approx(1.0)
    assert fused[2] == pytest.approx(0.0)
    assert fused[3] == pytest.approx(0.0)


def test_zero_weight_or_empty_sides_are_ignored() -> None:
    assert fuse([([1], [3.0], 0.0), ([2], [0.5], 1.0)]) == {2: 1.0}
    assert fuse([([], [], 1.0)]) == {}
    with pytest.raises(ValueError):
        fuse([([1, 2], [1.0], 1.0)])


def test_dense_weight_defaults_per_embedder_kind_and_overrides() -> None:
    assert dense_weight("hashing") < DEFAULT_DENSE_WEIGHT
    assert dense_weight("gemini") == DEFAULT_DENSE_WEIGHT
    assert dense_weight("ollama") == DEFAULT_DENSE_WEIGHT
    assert dense_weight(None) == DEFAULT_DENSE_WEIGHT
    assert dense_weight("hashing", {"hashing": 0.6}) == 0.6
    assert dense_weight("ollama", {"ollama": -1.0}) == 0.0


def _cand(i: int, text: str, fused: float) -> Candidate:
    return Candidate(i, f"d{i}", 0, "T", "", text, "b", "s", None, {}, fused)


def test_rerank_on_fuse_scale_keeps_fused_order_among_equal_signals() -> None:
    fused = fuse([([1, 2, 3], [12.0, 8.0, 2.0], 1.0)])
    cands = [_cand(i, "alpha beta gamma", fused[i]) for i in (3, 1, 2)]
    q = QueryTerms.of("alpha", ["alpha"])
    top = rerank(cands, q, lists=1, top_k=3, max_fused=1.0)
    assert [c.chunk_rowid for c in top] == [1, 2, 3]
    assert top[0].score > top[1].score > top[2].score
    assert all(0.0 <= c.score <= 1.0 for c in top)


def test_rerank_default_scale_is_still_rrf() -> None:
    cands = [_cand(1, "alpha", 1 / 61), _cand(2, "alpha", 1 / 70)]
    q = QueryTerms.of("alpha", ["alpha"])
    rrf_scaled = rerank([_cand(1, "alpha", 1 / 61)], q, lists=1, top_k=1)
    assert rrf_scaled[0].score == pytest.approx(rerank(cands, q, lists=1, top_k=1)[0].score)
    # Passing the fuse scale to an RRF value would make the best hit look weak.
    weak = rerank([_cand(1, "alpha", 1 / 61)], q, lists=1, top_k=1, max_fused=1.0)
    assert weak[0].score < rrf_scaled[0].score
