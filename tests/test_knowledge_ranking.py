"""Score fusion: per-query normalisation, side weights, and the re-ranker's scale."""

from __future__ import annotations

import random

import pytest

from knowledge.ranking import (
    DEFAULT_DENSE_WEIGHT,
    Candidate,
    DenseWeight,
    FusionSide,
    QueryTerms,
    dense_weight,
    fuse,
    head_minmax,
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
    assert dense_weight("hashing").weight < DEFAULT_DENSE_WEIGHT
    assert dense_weight("gemini").weight == DEFAULT_DENSE_WEIGHT
    assert dense_weight("ollama").weight == DEFAULT_DENSE_WEIGHT
    assert dense_weight(None).weight == DEFAULT_DENSE_WEIGHT
    assert dense_weight("hashing", {"hashing": 0.6}).weight == 0.6
    assert dense_weight("ollama", {"ollama": -1.0}).weight == 0.0


def test_only_the_hashing_embedder_has_a_trusted_depth_and_overrides_keep_it() -> None:
    # Learned embedders rank by meaning all the way down; the hashing one only at its head.
    assert dense_weight("hashing").depth is not None
    for kind in ("gemini", "ollama", "minilm", None):
        assert dense_weight(kind).depth is None
    assert dense_weight("hashing", {"hashing": 0.6}).depth == dense_weight("hashing").depth
    with pytest.raises(ValueError):
        DenseWeight(0.5, depth=0)


def test_head_minmax_floors_at_the_depth_th_score() -> None:
    scores = [0.9, 0.5, 0.7, 0.3, 0.1]
    assert head_minmax(scores, 3) == pytest.approx([1.0, 0.0, 0.5, 0.0, 0.0])
    # No depth, or a list no longer than it: plain min-max.
    assert head_minmax(scores, None) == minmax(scores)
    assert head_minmax(scores, 5) == minmax(scores)
    # A flat head: its members are all best, everything below is nothing.
    assert head_minmax([0.4, 0.4, 0.4, 0.2], 2) == [1.0, 1.0, 1.0, 0.0]


def test_dense_tail_cannot_reorder_bm25_but_its_head_still_can() -> None:
    # BM25 ranks 1 > 2 > 3 > 4 with 3 and 4 close; the dense side's noisy tail prefers 4.
    text = ([1, 2, 3, 4], [10.0, 6.0, 3.0, 2.9])
    dense_ids = [2, 9, 8, 7, 4, 5, 3]
    dense_scores = [0.40, 0.30, 0.29, 0.28, 0.27, 0.26, 0.10]
    whole = fuse([(*text, 1.0), FusionSide(dense_ids, dense_scores, 0.5)])
    head = fuse([(*text, 1.0), FusionSide(dense_ids, dense_scores, 0.5, depth=3)])
    assert whole[4] > whole[3]  # min-max over the whole list lets the tail decide
    assert head[3] > head[4]  # below the 3rd cosine the dense side adds nothing
    assert head[4] == 0.0 and head[9] > 0.0 and head[8] == 0.0
    # The head still counts: 2 is the dense side's best and closes on BM25's best.
    assert head[2] - head[1] > fuse([(*text, 1.0)])[2] - fuse([(*text, 1.0)])[1]


def test_a_lone_depth_limited_side_keeps_its_whole_order() -> None:
    # Vectors alone (semantic mode): nothing to defer to, so the depth does not apply.
    ids, scores = [5, 6, 7, 8], [0.9, 0.6, 0.5, 0.2]
    alone = fuse([([], [], 1.0), FusionSide(ids, scores, 0.25, depth=2)])
    assert alone == pytest.approx(dict(zip(ids, minmax(scores), strict=True)))


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


def test_words_written_apart_offer_the_word_documents_join_them_into() -> None:
    from knowledge.word_forms import joined_terms

    assert joined_terms("How do I log in to the registry?") == {"login": "log"}
    assert "setup" in joined_terms("How do I set up workspaces?")
    # Articles, pronouns and auxiliaries never join: "the registry" is no word.
    assert not any(w.startswith("the") for w in joined_terms("Where is the registry?"))


def _page(i: int, title: str, position: int, text: str, fused: float) -> Candidate:
    return Candidate(i, title, position, title, "", text, "b", "s", None, {}, fused)


def test_a_page_named_by_its_own_title_word_opens_the_answer() -> None:
    # "log in" names npm-login among npm-* pages ("npm" is every page's word), and
    # "login" counts as the query's "log" in the page that holds it.
    cands = [
        _page(1, "logging", 4, "npm logs notices sent by the registry", 0.8),
        _page(2, "npm-login", 0, "npm login verifies a user in the registry", 0.8),
        _page(3, "npm-logout", 0, "npm logout ends the session with the registry", 0.8),
    ]
    query = "How do I log in to the registry?"
    from knowledge.textnorm import content_terms
    from knowledge.word_forms import joined_terms

    q = QueryTerms.of(query, content_terms(query), joined_terms(query))
    top = rerank(cands, q, lists=1, top_k=3, max_fused=1.0)
    assert top[0].doc_id == "npm-login", [(c.doc_id, c.score) for c in top]


def test_a_named_page_shows_its_opening_among_its_chunks_without_moving_any_page() -> None:
    # npm-rebuild's option sections outscore its description; with two chunks per page
    # the opening would be left out. It takes the place of the page's last kept chunk:
    # the pages keep their order and none leaves the list.
    from knowledge.textnorm import content_terms
    from knowledge.word_forms import joined_terms

    query = "What does npm rebuild run?"
    q = QueryTerms.of(query, content_terms(query), joined_terms(query))
    option = "npm rebuild does not run scripts when ignore-scripts is set; npm rebuild run scripts"
    cands = [
        _page(1, "npm-rebuild", 3, option, 1.0),
        _page(2, "npm-rebuild", 4, option + " again", 0.95),
        _page(3, "npm-explore", 1, "the shell to run for npm explore", 0.9),
        _page(4, "npm-rebuild", 0, "This command does the following: execute lifecycle scripts", 0.3),
    ]
    top = rerank(cands, q, lists=1, top_k=10, per_doc=2, max_fused=1.0)
    assert [(c.doc_id, c.position) for c in top] == [("npm-rebuild", 3), ("npm-rebuild", 0), ("npm-explore", 1)]
    # A page the query does not name keeps its best chunks.
    other = rerank(
        cands, QueryTerms.of("shell scripts", ["shell", "scripts"]), lists=1, top_k=10, per_doc=2, max_fused=1.0
    )
    assert ("npm-rebuild", 0) not in [(c.doc_id, c.position) for c in other]


def test_fold_of_ascii_text_is_the_full_unicode_fold() -> None:
    """``fold`` lowercases ASCII text directly; it must stay what NFKD + combining-mark
    removal + casefold gives (every ASCII character, controls included), and non-ASCII
    text still takes the full path."""
    import unicodedata

    from knowledge.textnorm import _COMBINING_RE, fold

    def full(text: str) -> str:
        return _COMBINING_RE.sub("", unicodedata.normalize("NFKD", text)).casefold()

    every_ascii = "".join(chr(i) for i in range(128))
    assert fold(every_ascii) == full(every_ascii)
    for text in ("Invoice INV-2024 from Kalomi GmbH", "", "A_b-C.d", "Ünïcödé Straße", "ﬁle Ⅻ"):
        assert fold(text) == full(text)


def test_clipped_words_offer_their_full_form_and_the_reverse() -> None:
    from knowledge.word_forms import clipped_terms

    assert clipped_terms("Where does npm get its configuration settings from?") == {"config": "configuration"}
    assert clipped_terms("Open the repo and its docs") == {"repository": "repo", "documentation": "docs"}
    assert clipped_terms("Is the env set? Use the dir.") == {"environment": "env", "directory": "dir"}
    # A word inside a name is part of the name, not the word.
    assert clipped_terms("Set npm_config_cache in package-lock.json or ./config/app.toml") == {}


def _random_candidates(rng: random.Random, n: int) -> list[Candidate]:
    """Candidates shaped like a search's: a few documents with several chunks, shared
    title words, metadata that sometimes names a query word, fused values with ties."""
    words = ["alpha", "beta", "gamma", "delta", "tests", "testing", "login", "log", "npm", "run", "é", "x_y"]
    titles = ["npm-alpha", "npm-beta run", "gamma", "alpha beta", "delta testing", "npm-login", "Ünïcödé alpha"]
    out = []
    for i in range(n):
        doc = rng.randrange(max(1, n // 3))
        title = titles[doc % len(titles)] + ("" if doc < len(titles) else f" {doc}")
        text = " ".join(rng.choice(words) + rng.choice(["", ",", ".", " -", "_"]) for _ in range(rng.randint(0, 12)))
        meta = {"kind": rng.choice(["alpha", "other", "beta gamma", 3, True])} if rng.random() < 0.5 else {}
        fused = round(rng.random(), 1) if rng.random() < 0.3 else rng.random()  # ties on purpose
        c = Candidate(
            i,
            f"doc{doc}",
            rng.randrange(3),
            title,
            rng.choice(["", "Alpha", "usage"]),
            text,
            "b",
            "s",
            None,
            meta,
            fused,
        )
        c.cosine = rng.uniform(-0.2, 1.0)
        out.append(c)
    return out


@pytest.mark.parametrize("seed", range(300))
def test_rerank_early_exit_returns_what_scoring_every_candidate_returns(seed: int) -> None:
    rng = random.Random(seed)
    query = rng.choice(["alpha beta", "log in to npm", "tests", "gamma delta alpha", "run alpha for beta", "ünïcödé"])
    from knowledge.textnorm import content_terms
    from knowledge.word_forms import joined_terms

    q = QueryTerms.of(query, content_terms(query), joined_terms(query))
    n = rng.randint(1, 120)
    top_k, per_doc = rng.choice([(1, 1), (4, 2), (24, 3), (10, 3)])
    max_fused = rng.choice([None, 1.0])

    def ranked(exhaustive: bool) -> list[tuple[int, float]]:
        cands = _random_candidates(random.Random(seed), n)
        top = rerank(cands, q, lists=2, top_k=top_k, per_doc=per_doc, max_fused=max_fused, exhaustive=exhaustive)
        return [(c.chunk_rowid, c.score) for c in top]

    assert ranked(False) == ranked(True)


def test_rerank_early_exit_skips_candidates_that_cannot_enter() -> None:
    # Thirty strong candidates hold the list; the weak tail is never tokenised.
    strong = [_cand(i, "alpha beta", 1.0 - i / 1000) for i in range(30)]
    weak = [_cand(100 + i, "gamma", 0.01) for i in range(70)]
    q = QueryTerms.of("alpha", ["alpha"])
    seen: list[int] = []
    import knowledge.rerank_score as rs

    real = rs.QueryScorer.score

    def counting(self: rs.QueryScorer, c: Candidate, p: rs.Parts) -> float:  # type: ignore[override]
        seen.append(c.chunk_rowid)
        return real(self, c, p)

    rs.QueryScorer.score = counting  # type: ignore[method-assign]
    try:
        top = rerank(strong + weak, q, lists=1, top_k=24, max_fused=1.0)
    finally:
        rs.QueryScorer.score = real  # type: ignore[method-assign]
    assert [c.chunk_rowid for c in top] == list(range(24))
    assert not any(i >= 100 for i in seen) and len(seen) <= 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("they said alpha beta here", True),
        ("ALPHA, beta!", True),
        ("alpha_beta", True),  # "_" separates tokens
        ("alphabeta", False),
        ("xalpha beta", False),
        ("alpha betas", False),
        ("Ålpha beta", True),  # folded like the index folds it
        ("alpha\n\t--beta", True),
        ("beta alpha", False),
        ("alpha", False),
    ],
)
def test_phrase_bonus_is_the_query_words_in_a_row(text: str, expected: bool) -> None:
    from knowledge.rerank_score import QueryScorer
    from knowledge.textnorm import tokens

    q = QueryTerms.of("alpha beta", ["alpha", "beta"])
    scorer = QueryScorer(q.terms, q.phrase, q.forms(), [], 1.0)
    assert (f" {q.phrase} " in f" {' '.join(tokens(text))} ") == expected
    assert scorer.parts(_cand(1, text, 0.5)).phrase == (1.0 if expected else 0.0)


def test_ascii_words_are_the_tokens_of_the_unicode_pattern() -> None:
    """The re-ranker splits ASCII text by a byte table; it must give ``tokens``' words."""
    from knowledge.rerank_score import words
    from knowledge.textnorm import tokens

    every_ascii = "".join(chr(i) for i in range(128))
    assert words(every_ascii) == tokens(every_ascii)
    rng = random.Random(7)
    alphabet = every_ascii + "ÅéüßİΣ—…\u00a0"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert words(text) == tokens(text), repr(text)
