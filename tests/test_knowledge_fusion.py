"""Fusion's confidence floor (issue 24 item 5): a dense side whose best cosine is below its
embedder's ``confident_at`` sits the query out, so min-max cannot stretch an unrelated
"best" match into a perfect 1.0 that reorders what BM25 ranked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge import fusion, ranking
from knowledge.fusion import (
    DENSE_WEIGHTS,
    HEADS_DISAGREE,
    NO_CANDIDATES,
    NO_RULES,
    NO_WEIGHT,
    NOT_CONFIDENT,
    RULES,
    DenseWeight,
    FusionRules,
    FusionSide,
    agreement,
    combine,
    confident,
    dense_weight,
    fuse,
    head_overlap,
    plan,
    weigh,
)
from toolindex.hashing import HashingEmbedder

TEXT = FusionSide([1, 2, 3, 4], [12.0, 9.0, 8.5, 2.0], 1.0)
DENSE_IDS = [4, 3, 9]


def order(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda i: (-scores[i], i))


def test_an_unconfident_dense_side_leaves_the_text_order_alone() -> None:
    weak = FusionSide(DENSE_IDS, [0.31, 0.30, 0.12], 0.5, confident_at=0.4)
    assert not confident(weak)
    assert fuse([TEXT, weak]) == fuse([TEXT])
    # Without the floor the same weak list, stretched to 0..1, reorders BM25's list.
    unfloored = fuse([TEXT, weak._replace(confident_at=None)])
    assert order(unfloored) != order(fuse([TEXT]))


def test_a_confident_dense_side_counts_with_its_weight() -> None:
    sure = FusionSide(DENSE_IDS, [0.62, 0.55, 0.20], 0.5, confident_at=0.4)
    assert confident(sure)
    fused = fuse([TEXT, sure])
    assert fused == fuse([TEXT, sure._replace(confident_at=None)])
    # Its best (3, BM25's third) now leads; its own find (9) joins the list.
    assert order(fused)[0] == 3 and order(fuse([TEXT]))[0] == 1
    assert fused[4] > fuse([TEXT])[4] and 9 in fused
    # The floor is inclusive: a best cosine exactly at it counts.
    assert confident(sure._replace(scores=[0.4, 0.3, 0.1]))


def test_a_lone_side_ranks_whatever_its_confidence() -> None:
    # Semantic mode (no text side): nothing to defer to, so the floor does not apply.
    weak = FusionSide(DENSE_IDS, [0.31, 0.30, 0.12], 0.5, confident_at=0.4)
    alone = fuse([FusionSide([], [], 1.0), weak])
    assert order(alone) == DENSE_IDS and alone[4] == pytest.approx(1.0)


def test_when_every_side_is_unconfident_all_of_them_count() -> None:
    a = FusionSide([1, 2], [0.2, 0.1], 1.0, confident_at=0.5)
    b = FusionSide([2, 3], [0.3, 0.1], 1.0, confident_at=0.5)
    assert fuse([a, b]) == fuse([a._replace(confident_at=None), b._replace(confident_at=None)])


def test_floors_per_embedder_kind_and_overrides_keep_them() -> None:
    hashing = dense_weight("hashing")
    assert hashing.confident_at is not None and 0.0 < hashing.confident_at < 1.0
    assert dense_weight("hashing", {"hashing": 0.6}) == DenseWeight(0.6, hashing.depth, hashing.confident_at)
    # Kinds without a fitted floor (Gemini, Ollama, no embedder) always count.
    for kind in ("gemini", "ollama", None):
        assert dense_weight(kind).confident_at is None
    assert set(DENSE_WEIGHTS) >= {"hashing", "minilm"}


def test_ranking_re_exports_the_fusion_api() -> None:
    # Callers written against knowledge.ranking keep working after the move.
    for name in ("fuse", "dense_weight", "DenseWeight", "FusionSide", "minmax", "head_minmax", "DENSE_WEIGHTS"):
        assert getattr(ranking, name) is getattr(fusion, name)


DOCS = [
    {
        "id": "gzip",
        "title": "gzip",
        "text": "Compress and decompress files in the gzip format; the checksum of every "
        "member is verified on reading.",
    },
    {
        "id": "zipfile",
        "title": "zipfile",
        "text": "Read and write ZIP archives: list their members, extract them, and append files to an archive.",
    },
    {
        "id": "tarfile",
        "title": "tarfile",
        "text": "Tape archives: create, list and extract tar files, optionally compressed with gzip, bz2 or lzma.",
    },
    {
        "id": "hashlib",
        "title": "hashlib",
        "text": "Secure hashes and message digests: SHA-256, SHA-3, BLAKE2 and the legacy MD5 checksum.",
    },
    {
        "id": "zlib",
        "title": "zlib",
        "text": "Low-level deflate compression compatible with gzip, and the adler32 and crc32 checksums.",
    },
    {
        "id": "sched",
        "title": "sched",
        "text": "A general purpose event scheduler that runs callables at given times with priorities.",
    },
]


async def test_the_search_path_applies_the_floor_of_the_hashing_embedder(tmp_path: Path) -> None:
    """Through a real knowledge base (default configuration, hashing embedder): a query
    whose best cosine is under the floor ranks in hybrid mode exactly as in text mode; one
    above it lets the dense side add what only it found."""
    embedder = HashingEmbedder(dim=384)
    floor = dense_weight(embedder.name).confident_at
    assert floor is not None
    docs_matrix = await embedder.embed_batch([f"{d['title']}\n{d['text']}" for d in DOCS])
    kb = await open_kb_file(tmp_path / "kb.sqlite3", embedder)
    try:
        assert not (await kb.ingest_documents(DOCS, bucket="b")).rejected

        async def hits(query: str, mode: str) -> list[tuple[str, float]]:
            res = await kb.search(query, bucket="b", mode=mode, top_k=6)  # type: ignore[arg-type]
            return [(h.doc_id, h.score) for h in res.hits]

        weak, strong = "verify a checksum", "crc32 checksums of compressed data"
        best = {q: float(np.max(docs_matrix @ await embedder.embed(q))) for q in (weak, strong)}
        assert best[weak] < floor <= best[strong], best
        assert await hits(weak, "hybrid") == await hits(weak, "text")
        text_docs = {d for d, _ in await hits(strong, "text")}
        hybrid_docs = {d for d, _ in await hits(strong, "hybrid")}
        assert hybrid_docs > text_docs  # the dense side's own finds join the list
    finally:
        await kb.aclose()


# --- the rules for two sides of unequal weight (issue 24 item 5, second pass) -----------


#: A BM25 side of 12 candidates and a heavier dense side (MiniLM's 2.0), with heads
#: (top 10 each) that share ``shared`` members.
def sides_sharing(shared: int) -> tuple[FusionSide, FusionSide]:
    text = FusionSide(list(range(1, 13)), [float(20 - i) for i in range(12)], 1.0)
    dense_ids = list(range(1, 1 + shared)) + list(range(100, 110 - shared)) + [11, 12]
    dense = FusionSide(dense_ids, [0.8 - 0.01 * i for i in range(len(dense_ids))], 2.0)
    return text, dense


def test_heads_that_share_nothing_leave_the_stronger_side_alone() -> None:
    text, dense = sides_sharing(0)
    assert head_overlap(text, dense, 10) == 0.0
    assert plan([text, dense]) == [dense]
    assert fuse([text, dense]) == fuse([dense])
    # Before the rules, the lighter BM25 side reordered the dense list.
    assert order(fuse([text, dense], NO_RULES))[:10] != order(fuse([dense]))[:10]


def test_the_lighter_side_counts_in_proportion_to_the_heads_agreement() -> None:
    rules = FusionRules(light_depth=None, agreement_full=0.2)
    for shared, share in ((1, 0.5), (2, 1.0), (5, 1.0)):
        text, dense = sides_sharing(shared)
        assert head_overlap(text, dense, 10) == pytest.approx(shared / 10)
        counted = plan([text, dense], rules)
        assert [s.weight for s in counted] == pytest.approx([share * text.weight, dense.weight])
    # Switched off (agreement_full 0), the lighter side keeps its weight however far apart.
    text, dense = sides_sharing(0)
    assert [s.weight for s in plan([text, dense], NO_RULES)] == [1.0, 2.0]


def test_the_lighter_side_is_trusted_at_its_head_only() -> None:
    text, dense = sides_sharing(5)
    light, heavy = plan([text, dense])
    assert light.depth == RULES.light_depth and heavy.depth is None
    fused = fuse([text, dense])
    # BM25's 11th and 12th candidates sit at or below its 10th score: no BM25 share, so
    # their fused value is the dense side's share only.
    dense_only = fuse([text._replace(weight=0.0), dense])
    for item in (11, 12):
        assert fused[item] == pytest.approx(dense_only[item] * 2.0 / 3.0)
    # A side's own depth wins over the rule's (the hashing embedder's 10 stays its own).
    assert plan([text._replace(depth=3), dense])[0].depth == 3


def test_equal_weights_name_no_stronger_side() -> None:
    # Gemini or Ollama against BM25 (1.0 each): neither rule applies.
    text, dense = sides_sharing(0)
    even = dense._replace(weight=1.0)
    assert plan([text, even]) == [text, even]
    assert fuse([text, even]) == fuse([text, even], NO_RULES)


def test_the_lighter_dense_side_of_the_hashing_embedder_follows_the_same_rules() -> None:
    # Hashing (0.25) is the lighter side against BM25; its own depth and floor still hold.
    text, _ = sides_sharing(0)
    hashing = dense_weight("hashing")
    far = FusionSide(
        list(range(200, 215)), [0.9 - 0.01 * i for i in range(15)], hashing.weight, hashing.depth, hashing.confident_at
    )
    assert plan([text, far]) == [text]
    near = far._replace(ids=[1, 2, 3, *range(203, 215)])
    assert plan([text, near])[1] == near  # 3 of 10 shared: full weight, its own depth


def test_short_lists_compare_what_they_have() -> None:
    # Each head is its own side's best 10 (the whole list when shorter); the share is of
    # the shorter head.
    a = FusionSide([1, 2, 3], [3.0, 2.0, 1.0], 1.0)
    assert head_overlap(a, FusionSide([2, 9], [0.9, 0.8], 2.0), 10) == 0.5
    assert head_overlap(a, FusionSide([3, 9], [0.9, 0.8], 2.0), 10) == 0.5  # a's 3rd is in its head
    assert head_overlap(a, FusionSide([], [], 2.0), 10) == 1.0


#: MiniLM's side (weight 2.0) of ten candidates, best first.
DENSE_TEN = FusionSide(list(range(1, 11)), [0.9 - 0.01 * i for i in range(10)], 2.0)


def test_a_one_chunk_bm25_list_found_in_the_vectors_head_counts_in_full() -> None:
    # A rare-term query: BM25 finds one chunk, the vectors rank it second. Cutting both
    # heads to the shorter list's length compared it with the vectors' first only, called
    # that no overlap and dropped BM25 where it is most precise.
    rare = FusionSide([2], [5.0], 1.0)
    light, heavy = plan([rare, DENSE_TEN])
    assert light.ids == [2] and light.weight == 1.0 and heavy == DENSE_TEN
    assert weigh([rare, DENSE_TEN]).dropped == {}
    assert order(fuse([rare, DENSE_TEN]))[0] == 2  # both sides' vote lifts it to the top
    # Found nowhere in the vectors' head it still agrees with nothing, and sits out.
    assert plan([FusionSide([42], [5.0], 1.0), DENSE_TEN]) == [DENSE_TEN]


def test_a_short_list_is_compared_with_the_other_sides_whole_head() -> None:
    # BM25's three candidates sit at the vectors' ranks 5, 8 and 10: outside the vectors'
    # best three, inside their best ten.
    short = FusionSide([5, 8, 10], [7.0, 6.0, 5.0], 1.0)
    assert head_overlap(short, DENSE_TEN, 10) == 1.0
    assert plan([short, DENSE_TEN])[0].weight == 1.0


def test_full_agreement_asks_no_more_shared_members_than_the_shorter_head_has() -> None:
    # Full at 0.2 x 10 = 2 shared members, or the shorter head's size when that is less.
    for bm25_ids, weight in (([3], 1.0), ([3, 50, 51], 0.5), ([3, 4, 50], 1.0), ([50, 51, 52], 0.0)):
        text = FusionSide(bm25_ids, [9.0 - i for i in range(len(bm25_ids))], 1.0)
        assert agreement(text, DENSE_TEN, RULES) == weight, bm25_ids
    # Two long lists keep the fitted ramp: 1 shared of 10 is half the weight.
    text, dense = sides_sharing(1)
    assert agreement(text, dense, RULES) == 0.5
    assert agreement(text, dense, NO_RULES) == 1.0  # the rule switched off


def test_the_plan_says_why_a_side_does_not_count() -> None:
    text, dense = sides_sharing(0)
    assert weigh([text, dense]).dropped == {0: HEADS_DISAGREE}
    assert weigh([text, dense]).counted == (1,)
    weak = FusionSide(DENSE_IDS, [0.31, 0.30, 0.12], 0.5, confident_at=0.4)
    assert weigh([TEXT, weak]).dropped == {1: NOT_CONFIDENT}
    assert weigh([FusionSide([], [], 1.0), dense]).dropped == {0: NO_CANDIDATES}
    assert weigh([text, dense._replace(weight=0.0)]).dropped == {1: NO_WEIGHT}
    # Both sides count: nothing dropped, and fuse adds up exactly the plan's sides.
    both = weigh([TEXT, weak._replace(scores=[0.62, 0.55, 0.20])])
    assert both.dropped == {} and both.counted == (0, 1)
    assert combine(both.sides) == fuse([TEXT, weak._replace(scores=[0.62, 0.55, 0.20])])


def test_rules_refuse_values_that_mean_nothing() -> None:
    for bad in ({"light_depth": 0}, {"agreement_depth": 0}, {"agreement_full": 1.5}, {"agreement_full": -0.1}):
        with pytest.raises(ValueError):
            FusionRules(**bad)  # type: ignore[arg-type]
