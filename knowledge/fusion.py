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


def fuse(
    sides: Sequence[FusionSide | tuple[Sequence[int], Sequence[float], float]],
) -> dict[int, float]:
    """Weighted CombSUM of per-query min-max normalised scores, on 0..1.

    ``sides`` holds a ``FusionSide`` (or a plain ``(ids, scores, weight)``) per
    retriever, scores higher-is-better (BM25 as a positive number, cosine similarity).
    When another side takes part too, a side with a ``depth`` is floored at its
    ``depth``-th score (``head_minmax``), so that side's untrusted tail cannot reorder
    the other's ranking, and a side whose best score is below its ``confident_at`` sits
    the query out (unless every side would: then all count, as without floors). An item
    absent from a side scores 0 there. Only sides with candidates and a positive weight
    take part, and the sum is divided by their total weight, so 1.0 means "best in every
    list that ran" whether one side ran or two: a single side (depth, floor or not:
    there is nothing else to defer to) keeps its own order and relative gaps.
    """
    active = [side for side in (FusionSide(*s) for s in sides) if side.ids and side.weight > 0]
    for side in active:
        if len(side.ids) != len(side.scores):
            raise ValueError("each side needs one score per id")
    if len(active) > 1:
        sure = [side for side in active if confident(side)]
        active = sure or active
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
