"""Score fusion: the BM25 and vector candidate lists of one query merged into one score.

* ``fuse`` is a weighted CombSUM of per-query min-max normalised scores: each side's raw
  scores are mapped onto 0..1 over that query's own candidate list (so BM25's unbounded
  scale and a compressed cosine range both span 0..1, and a side's spread, not its
  absolute level, is what counts), then averaged with per-side weights. Unlike
  reciprocal rank fusion it keeps *how much* better one candidate is than the next,
  which rank fusion throws away (``ranking.rrf`` stays for callers that only have ranks).
* Min-max has one blind spot: it makes every list's best candidate a perfect 1.0, even
  when that best is a poor match. BM25's best at least contains the query's rarest
  terms; a cosine list always has a "best", however unrelated. A dense side whose best
  cosine is below its embedder's ``confident_at`` has found nothing it is sure of, and
  its min-max-stretched order is noise that only reorders what the text side ranked: it
  sits that query out (the "fusing only where both sides are confident" rule of issue
  24). Above it, the side counts with its usual weight. Its cosines still reach the
  re-ranker, which damps weak matches by absolute relevance (``ranking.rerank``).
* The dense side is described per embedder kind by a ``DenseWeight``: how much it
  counts against BM25 (1.0), how deep its ranking is trusted (``depth``) and the cosine
  from which it is trusted at all (``confident_at``). A learned embedder (Gemini,
  Ollama, MiniLM) ranks by meaning all the way down its list, so its whole list is
  normalised. The hashing embedder is an IDF-free lexical proxy for BM25: below its
  first few hits its cosines are mostly collision and common-n-gram noise, so its
  normalisation floor is its score at rank ``depth``. The numbers, and how they were
  fitted (tune halves of two labelled sets only), are at ``DENSE_WEIGHTS``.
* When the two sides weigh differently, the prior already says which one ranks better
  in general; two rules (``FusionRules``, fitted the same way) keep the lighter side
  from undoing that where it is most likely wrong:
  - *head only*: the lighter side (BM25 against MiniLM's 2.0; the hashing embedder
    against BM25) reorders the other's list only with its own top ``light_depth``; its
    tail is floored to 0 like the hashing embedder's (its own ``depth`` wins when set).
  - *agreement*: when the two heads (each side's own top ``agreement_depth``) share
    fewer than ``agreement_full`` of ``agreement_depth`` members, at most one side has
    found the answer and mixing them interleaves two unrelated lists; the lighter side's
    weight shrinks in proportion, to nothing when the heads share no item, and the
    stronger side's order stands. Measured on the Node.js set with MiniLM: the ten
    questions whose heads shared no chunk had BM25 0.14, vectors 0.47 and fused 0.37
    (nDCG@10). A short list is compared whole against the other's full head, and the
    shared members asked of it are at most as many as it has: a rare-term query whose
    BM25 finds one chunk, ranked second by the vectors, agrees fully (cutting both heads
    to the shorter length, as the first version did, called that "no overlap" and
    dropped BM25 exactly where it is most precise).
  Equal weights (Gemini, Ollama against BM25) name no stronger side: both rules stay out.
* ``weigh`` says which sides a ranking rests on and why the others do not count
  (``FusionPlan``), so a caller can show it (a hybrid search's ``fused_sides``) from the
  same plan ``combine`` then adds up: one pass, not a second fusion to find out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class DenseWeight:
    """How the dense side enters the fusion for one embedder kind: its ``weight``
    relative to BM25's 1.0, ``depth``, the rank whose score is that side's
    normalisation floor (``None``: its whole list is trusted), and ``confident_at``, the
    best cosine below which the side sits a query out (``None``: always counts)."""

    weight: float
    depth: int | None = None
    confident_at: float | None = None

    def __post_init__(self) -> None:
        if self.depth is not None and self.depth < 1:
            raise ValueError("depth must be at least 1 (or None for the whole list)")


class FusionSide(NamedTuple):
    """One retriever's candidates for ``fuse``: ids, higher-is-better scores, weight,
    optionally the depth below which its scores are not trusted, and the best score
    below which the side is not trusted at all."""

    ids: Sequence[int]
    scores: Sequence[float]
    weight: float
    depth: int | None = None
    confident_at: float | None = None


@dataclass(frozen=True, slots=True)
class FusionRules:
    """How the lighter of two sides of unequal weight enters ``fuse`` (module docstring).

    ``light_depth``: the rank whose score floors the lighter side's normalisation when it
    has no ``depth`` of its own (``None``: its whole list counts). ``agreement_depth``:
    how many of each side's best candidates make its head. ``agreement_full``: the share
    of ``agreement_depth`` that, as shared head members, lets the lighter side count with
    its full weight (0.2 of 10: two shared members; never more than the shorter head
    holds); below it the weight scales linearly down to 0 at no shared member (``0``
    switches the rule off)."""

    light_depth: int | None = 10
    agreement_depth: int = 10
    agreement_full: float = 0.2

    def __post_init__(self) -> None:
        if self.light_depth is not None and self.light_depth < 1:
            raise ValueError("light_depth must be at least 1 (or None for the whole list)")
        if self.agreement_depth < 1:
            raise ValueError("agreement_depth must be at least 1")
        if not 0.0 <= self.agreement_full <= 1.0:
            raise ValueError("agreement_full is a share: 0..1")


#: The rules ``fuse`` applies unless given others. Fitted on the tune halves (even
#: positions) of both labelled sets of bench/corpus_quality.py, both embedders, with the
#: criterion of ``DENSE_WEIGHTS``: from light_depth {none, 10, 20} x agreement {off; a
#: step at 0.1, 0.2, 0.3; a linear ramp full at 0.2, 0.3, 0.5} x MiniLM weight {2, 3}:
#: depth 10, ramp full at 0.2 (2 shared of 10), weight 2 (worst tune margin over the
#: better side 0.0165 against 0.0126 before; held-out figures:
#: bench/results/corpus_quality_fusion2*.json; the short-list fix of ``agreement``
#: changed no question's ranking there: bench/results/corpus_quality_fusion3.json).
RULES = FusionRules()
#: The rules before issue 24's second fusion pass, for benchmarks comparing the two.
NO_RULES = FusionRules(light_depth=None, agreement_full=0.0)


#: The dense side per ``Embedder.name``; kinds not listed (Gemini, Ollama) use
#: ``DEFAULT_DENSE_WEIGHT`` over their whole list, always trusted.
#:
#: Fitted on the tune halves (even positions) of both labelled sets of
#: bench/corpus_quality.py only — the stdlib docstrings (bench/data/corpus_queries.json)
#: and the Node.js API sections (bench/data/node_queries.json) — then reported on the
#: held-out halves. The criterion: the largest worst-case margin of fused nDCG@10 over
#: the better single side, across the two tune halves (fused must beat both sides on
#: both sets, not on average).
#: * hashing: weight 0.25 and depth 10 as before (chosen on the stdlib tune half from
#:   depth {5, 10, 20, whole} x weight {0.15, 0.25, 0.35, 0.5}); ``confident_at`` from
#:   {none, 0.35, 0.40, 0.45} (and a 0.3..0.5 ramp instead of a step): 0.40.
#: * minilm: whole list; weight from {1.0, 1.5, 2.0, 3.0}: 2.0; ``confident_at``: see
#:   bench/results/corpus_quality.json's "fusion" note.
DENSE_WEIGHTS: Mapping[str, DenseWeight] = MappingProxyType(
    {"hashing": DenseWeight(0.25, depth=10, confident_at=0.40), "minilm": DenseWeight(2.0)}
)
DEFAULT_DENSE_WEIGHT = 1.0


def dense_weight(embedder_name: str | None, overrides: Mapping[str, float] | None = None) -> DenseWeight:
    """The vector side's fusion weight, trusted depth and confidence floor for an
    embedder kind.

    ``overrides`` replace the weight only; the kind's depth and floor stay, since they
    describe where the embedder's ranking is meaningful, not how much it should count.
    """
    if embedder_name is None:
        return DenseWeight(DEFAULT_DENSE_WEIGHT)
    prior = DENSE_WEIGHTS.get(embedder_name, DenseWeight(DEFAULT_DENSE_WEIGHT))
    if overrides and embedder_name in overrides:
        return DenseWeight(max(0.0, float(overrides[embedder_name])), prior.depth, prior.confident_at)
    return prior


def minmax(scores: Sequence[float]) -> list[float]:
    """Scores mapped onto 0..1 over this list (higher is better); a flat list is all 1.0
    (every candidate is as good as the best, which the re-ranker's absolute signals
    then sort out)."""
    if not scores:
        return []
    lo, hi = min(scores), max(scores)
    if hi <= lo:
        return [1.0] * len(scores)
    span = hi - lo
    return [(s - lo) / span for s in scores]


def head_minmax(scores: Sequence[float], depth: int | None) -> list[float]:
    """Like ``minmax`` but with the floor at the ``depth``-th best score: the head above
    it spans 0..1, everything at or below it is 0. ``None``, or a list no longer than
    ``depth``, is plain ``minmax``.

    For a retriever whose scores are signal only near the top: the tail's differences
    are noise and must not reorder what the other side ranked.
    """
    if depth is None or len(scores) <= depth:
        return minmax(scores)
    ranked = sorted(scores, reverse=True)
    lo, hi = ranked[depth - 1], ranked[0]
    if hi <= lo:  # a flat head: its members are all best, the rest nothing
        return [1.0 if s >= hi else 0.0 for s in scores]
    span = hi - lo
    return [max(0.0, (s - lo) / span) for s in scores]


def confident(side: FusionSide) -> bool:
    """True when the side's best score reaches its ``confident_at`` (or it has none)."""
    return side.confident_at is None or (bool(side.scores) and max(side.scores) >= side.confident_at)


def _head(side: FusionSide, depth: int) -> set[int]:
    """The side's best ``depth`` ids (all of them when its list is shorter)."""
    order = sorted(range(len(side.ids)), key=lambda j: -side.scores[j])[:depth]
    return {side.ids[j] for j in order}


def _heads(a: FusionSide, b: FusionSide, depth: int) -> tuple[int, int]:
    """``(shared, shorter)``: how many members the two heads (each side's own best
    ``depth``) have in common, and the size of the smaller head."""
    head_a, head_b = _head(a, depth), _head(b, depth)
    return len(head_a & head_b), min(len(head_a), len(head_b))


def head_overlap(a: FusionSide, b: FusionSide, depth: int) -> float:
    """The share of the shorter head that the other head holds; each head is its own
    side's best ``depth`` ids (the whole list when shorter), so a short list is compared
    whole against the other's full head. 1.0 when either side has nothing to compare."""
    shared, shorter = _heads(a, b, depth)
    return shared / shorter if shorter else 1.0


def agreement(a: FusionSide, b: FusionSide, rules: FusionRules) -> float:
    """The factor 0..1 on the lighter side's weight under the agreement rule: shared head
    members over the number that counts as full agreement, ``agreement_full`` of
    ``agreement_depth`` but never more than the shorter head holds (a one-chunk BM25 list
    found in the vectors' head agrees fully). 1.0 when the rule is off or a side is
    empty."""
    if rules.agreement_full <= 0:
        return 1.0
    shared, shorter = _heads(a, b, rules.agreement_depth)
    if shorter == 0:
        return 1.0
    full_at = min(rules.agreement_full * rules.agreement_depth, float(shorter))
    return min(1.0, shared / full_at)


#: Why a side does not count in a ``FusionPlan`` (``FusionPlan.dropped``'s values).
NO_CANDIDATES = "no_candidates"
NO_WEIGHT = "no_weight"
NOT_CONFIDENT = "not_confident"
HEADS_DISAGREE = "heads_disagree"


@dataclass(frozen=True, slots=True)
class FusionPlan:
    """What ``fuse`` will add, and why: ``sides`` as they will be weighed, ``counted``
    the position in the given sides of each of them, ``dropped`` the given positions
    that do not count and why (``NO_CANDIDATES``, ``NO_WEIGHT``, ``NOT_CONFIDENT``,
    ``HEADS_DISAGREE``)."""

    sides: tuple[FusionSide, ...]
    counted: tuple[int, ...]
    dropped: Mapping[int, str]


def weigh(
    sides: Sequence[FusionSide | tuple[Sequence[int], Sequence[float], float]],
    rules: FusionRules | None = None,
) -> FusionPlan:
    """The sides ``fuse`` adds, as it will weigh them, and why the others do not count:
    sides without candidates or weight dropped, unconfident ones sitting out
    (``confident``), and the lighter of two sides of unequal weight floored at its head
    and scaled by how much the two heads agree (``agreement``); a side scaled to nothing
    is dropped. For a caller that wants to say which side a hybrid ranking rests on."""
    rules = RULES if rules is None else rules
    given = [FusionSide(*s) for s in sides]
    dropped: dict[int, str] = {}
    active: list[int] = []
    for i, side in enumerate(given):
        if len(side.ids) != len(side.scores):
            raise ValueError("each side needs one score per id")
        if not side.ids:
            dropped[i] = NO_CANDIDATES
        elif side.weight <= 0:
            dropped[i] = NO_WEIGHT
        else:
            active.append(i)
    weighed = {i: given[i] for i in active}
    if len(active) > 1:
        sure = [i for i in active if confident(given[i])]
        if sure:
            dropped.update((i, NOT_CONFIDENT) for i in active if i not in sure)
            active = sure
    if len(active) == 2 and given[active[0]].weight != given[active[1]].weight:
        a, b = active
        li = a if given[a].weight < given[b].weight else b
        light = given[li]
        if light.depth is None and rules.light_depth is not None:
            light = light._replace(depth=rules.light_depth)
        light = light._replace(weight=light.weight * agreement(given[a], given[b], rules))
        weighed[li] = light
        if light.weight <= 0:
            dropped[li] = HEADS_DISAGREE
            active = [i for i in active if i != li]
    return FusionPlan(tuple(weighed[i] for i in active), tuple(active), MappingProxyType(dropped))


def plan(
    sides: Sequence[FusionSide | tuple[Sequence[int], Sequence[float], float]],
    rules: FusionRules | None = None,
) -> list[FusionSide]:
    """The sides ``fuse`` adds, as it will weigh them (``weigh`` without the reasons)."""
    return list(weigh(sides, rules).sides)


def combine(active: Sequence[FusionSide]) -> dict[int, float]:
    """The weighted CombSUM of sides already weighed (``weigh``'s ``sides``): ``fuse``'s
    second half, for a caller that keeps the plan to report it."""
    total = sum(side.weight for side in active)
    fused: dict[int, float] = {}
    if total <= 0:
        return fused
    for ids, scores, w, depth, _ in active:
        share = w / total
        floor_at = depth if len(active) > 1 else None
        for item, norm in zip(ids, head_minmax(scores, floor_at), strict=True):
            fused[item] = fused.get(item, 0.0) + share * norm
    return fused


def fuse(
    sides: Sequence[FusionSide | tuple[Sequence[int], Sequence[float], float]],
    rules: FusionRules | None = None,
) -> dict[int, float]:
    """Weighted CombSUM of per-query min-max normalised scores, on 0..1.

    ``sides`` holds a ``FusionSide`` (or a plain ``(ids, scores, weight)``) per
    retriever, scores higher-is-better (BM25 as a positive number, cosine similarity).
    ``weigh`` decides which sides count and how much: a side whose best score is below
    its ``confident_at`` sits the query out (unless every side would: then all count,
    as without floors), and of two sides of unequal weight the lighter counts only at its
    head and only as far as the two heads agree (``rules``, default ``RULES``). When
    another side takes part too, a side with a ``depth`` is floored at its ``depth``-th
    score (``head_minmax``), so that side's untrusted tail cannot reorder the other's
    ranking. An item absent from a side scores 0 there. The sum is divided by the
    total weight of the sides that count, so 1.0 means "best in every list that counted"
    whether one side counted or two: a single side (depth, floor or not: there is
    nothing else to defer to) keeps its own order and relative gaps.
    """
    return combine(weigh(sides, rules).sides)
