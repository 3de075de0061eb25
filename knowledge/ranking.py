"""Fusion, re-ranking and snippets: from candidate lists to the hits a model reads.

* Score fusion (``fuse``, ``dense_weight``) lives in ``knowledge.fusion`` and is
  re-exported here; ``rrf`` stays for callers that only have ranks.
* The re-ranker adds cheap signals that a rank alone misses and that are absolute,
  so a poor best match does not look perfect: how many query terms the chunk contains,
  an exact phrase match, terms in the title, and query words equal to a metadata value.
* Scores are on 0..1: the fused part is divided by its maximum possible value (rank 1
  in every list for ``rrf``, 1.0 for ``fuse``) and damped by how relevant the chunk
  actually is (the larger of its query-term coverage and its cosine similarity), so
  the best hit of a query that matches nothing well scores low; phrase and title matches and metadata add fixed amounts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from knowledge.fusion import DEFAULT_DENSE_WEIGHT as DEFAULT_DENSE_WEIGHT  # fusion, re-exported
from knowledge.fusion import DENSE_WEIGHTS as DENSE_WEIGHTS
from knowledge.fusion import DenseWeight as DenseWeight
from knowledge.fusion import FusionSide as FusionSide
from knowledge.fusion import dense_weight as dense_weight
from knowledge.fusion import fuse as fuse
from knowledge.fusion import head_minmax as head_minmax
from knowledge.fusion import minmax as minmax
from knowledge.rerank_score import RELEVANCE_FLOOR as RELEVANCE_FLOOR  # the re-ranker's weights, re-exported
from knowledge.rerank_score import W_FUSED as W_FUSED
from knowledge.rerank_score import W_LEAD as W_LEAD
from knowledge.rerank_score import W_META as W_META
from knowledge.rerank_score import W_PHRASE as W_PHRASE
from knowledge.rerank_score import W_TITLE as W_TITLE
from knowledge.rerank_score import QueryScorer
from knowledge.textnorm import fold_with_map, stem, tokens

RRF_K = 60


def rrf(rankings: Sequence[Sequence[int]], k: int = RRF_K) -> dict[int, float]:
    """``{item: sum(1 / (k + rank))}`` over the rankings (ranks from 1)."""
    fused: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + 1.0 / (k + rank)
    return fused


def rrf_max(lists: int, k: int = RRF_K) -> float:
    return lists / (k + 1.0)


@dataclass(slots=True)
class Candidate:
    """A hydrated chunk with its fused score, waiting to be re-ranked."""

    chunk_rowid: int
    doc_id: str
    position: int
    title: str
    heading: str
    text: str
    bucket: str
    source: str
    url: str | None
    metadata: dict[str, Any]
    fused: float
    score: float = 0.0
    cosine: float = 0.0
    page: int | None = None
    page_end: int | None = None


@dataclass(frozen=True, slots=True)
class QueryTerms:
    terms: tuple[str, ...]
    phrase: str  # folded, whitespace-normalised query; empty if a single term
    #: ``{joined word: the term it extends}`` ("login": "log"): a chunk holding the
    #: joined word covers that term (``word_forms.joined_terms``).
    joined: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, query: str, content: Sequence[str], joined: Mapping[str, str] | None = None) -> QueryTerms:
        words = tokens(query)
        phrase = " ".join(words) if len(words) > 1 else ""
        return cls(tuple(content), phrase, MappingProxyType(dict(joined or {})))

    def forms(self) -> list[frozenset[str]]:
        """Per term, the words that count as it in a chunk: its inflections and those
        of the words it joins into."""
        out: list[frozenset[str]] = []
        for t in self.terms:
            forms = set(_surface_forms(t))
            for word, head in self.joined.items():
                if head == t:
                    forms |= _surface_forms(word)
            out.append(frozenset(forms))
        return out


def _surface_forms(term: str) -> frozenset[str]:
    """The term plus common English inflections of its stem ("tests" → test, testing…),
    so coverage matches what the Porter-stemmed FTS index matched, without stemming
    every word of every candidate."""
    s = stem(term)
    forms = {term, s, s + "s", s + "es", s + "ed", s + "ing", s + "er", s + "ers"}
    if s.endswith("y"):
        forms.add(s[:-1] + "ies")
    if len(s) > 2 and s[-1] not in "aeiouy":
        forms.update({s + s[-1] + "ing", s + s[-1] + "ed"})
    return frozenset(forms)


def rerank(
    candidates: list[Candidate],
    q: QueryTerms,
    *,
    lists: int,
    top_k: int,
    per_doc: int = 3,
    max_fused: float | None = None,
    exhaustive: bool = False,
) -> list[Candidate]:
    """Score, cap at ``per_doc`` chunks per document, and keep the best ``top_k``.

    ``max_fused`` is the largest fused value possible: 1.0 for ``fuse``; by default
    that of ``rrf`` over ``lists`` rankings.

    Exact early exit (``knowledge.rerank_score``): candidates are walked best fused
    first; once ``top_k`` are kept, a candidate that cannot reach the last kept score
    (its title, phrase and metadata read, its coverage taken as full) is passed over
    without being split into words, and the walk stops when the bound of everything
    after it (its fused value with every bonus that can still apply) is below that
    score. The last kept score only rises as candidates are scored (a per-document cap
    under a size limit is a matroid: its greedy best set only improves as items are
    added), so what is passed over could never have been kept: the result is that of
    scoring every candidate (``exhaustive=True``, which the tests compare it with).
    """
    if max_fused is None or max_fused <= 0:
        max_fused = rrf_max(max(1, lists))
    scorer = QueryScorer(q.terms, q.phrase, q.forms(), (c.title for c in candidates), max_fused)
    ordered_in = sorted(candidates, key=lambda c: -c.fused)
    # lead_ahead[i]: whether a document opening (the lead bonus) is among ordered_in[i:].
    lead_ahead = [False] * (len(ordered_in) + 1)
    for i in range(len(ordered_in) - 1, -1, -1):
        lead_ahead[i] = lead_ahead[i + 1] or ordered_in[i].position == 0
    scored: list[Candidate] = []
    last: Candidate | None = None  # the top_k-th kept candidate, once there are top_k
    for i, c in enumerate(ordered_in):
        if last is None:
            parts = scorer.parts(c)
        elif scorer.ceiling(c.fused, lead_ahead[i]) < last.score:
            break
        else:
            parts = scorer.parts(c, last.score)
        if parts is None:
            continue
        c.score = scorer.score(c, parts)
        scored.append(c)
        # The list changes only when c ranks above its last member (score, then _capped's
        # ties), and then its last score can only rise.
        if not exhaustive and len(scored) >= top_k and (last is None or _rank_key(c) < _rank_key(last)):
            current = _capped(scored, top_k, per_doc)
            last = current[-1] if len(current) >= top_k else None
    kept = _capped(scored, top_k, per_doc)
    # The openings of the kept documents the query names, scored even when the walk
    # skipped them or stopped before them (a few chunks at most: one per kept document).
    kept_docs = {c.doc_id for c in kept}
    seen = {c.chunk_rowid for c in scored}
    openings: list[Candidate] = []
    for c in ordered_in:
        if c.position == 0 and c.doc_id in kept_docs and scorer.names_title(c.title):
            if c.chunk_rowid not in seen:
                parts = scorer.parts(c)
                assert parts is not None  # without a floor there is always an answer
                c.score = scorer.score(c, parts)
            openings.append(c)
    return _with_openings(kept, openings, top_k, per_doc)


def _rank_key(c: Candidate) -> tuple[float, float, str, int]:
    return (-c.score, -c.fused, c.doc_id, c.position)


def _capped(candidates: list[Candidate], top_k: int, per_doc: int) -> list[Candidate]:
    """Best ``top_k`` by score with at most ``per_doc`` per document (ties: fused, id, position)."""
    ordered = sorted(candidates, key=_rank_key)
    kept: list[Candidate] = []
    per: dict[str, int] = {}
    for c in ordered:
        if per.get(c.doc_id, 0) >= per_doc:
            continue
        per[c.doc_id] = per.get(c.doc_id, 0) + 1
        kept.append(c)
        if len(kept) >= top_k:
            break
    return kept


def _with_openings(kept: list[Candidate], openings: list[Candidate], top_k: int, per_doc: int) -> list[Candidate]:
    """Every kept document the query names shows its opening among its chunks.

    "What does npm rebuild run?" names ``npm-rebuild``, whose option sections (repeated on
    many pages) outscore its description; the per-document cap then leaves the page's
    opening out, and with it what the page says it does. The opening joins right after
    the document's last kept chunk while the list and the document have room, else it
    takes that chunk's place: every document keeps the rank its best chunk gave it and
    no document leaves the list, only which of its chunks are shown changes.
    """
    out = list(kept)
    for opening in openings:
        if any(c is opening for c in out):
            continue
        mine = [i for i, c in enumerate(out) if c.doc_id == opening.doc_id]
        if not mine:
            continue
        if len(mine) < per_doc and len(out) < top_k:
            out.insert(mine[-1] + 1, opening)
        else:
            out[mine[-1]] = opening
    return out


#: How deep a search's scores are read to tell whether they are flat (``OverloadRule``):
#: the best against the 10th, or the ``top_k``-th when more are asked for.
SPREAD_DEPTH = 10


def spread_depth(top_k: int, scored: int) -> int:
    """The score a side's best is compared with (``signal_spread``): the ``SPREAD_DEPTH``-th,
    or the ``top_k``-th when more are asked for, or the last of fewer (never fewer than
    ``top_k``: fewer than asked for are not flat)."""
    return max(top_k, min(SPREAD_DEPTH, scored))


def signal_spread(values: Sequence[float], top_k: int) -> float:
    """Relative drop of a raw relevance signal from the best to the ``top_k``-th value.

    ~0 means the query does not discriminate (flat scores); 1.0 when there are fewer
    than ``top_k`` values (nothing to be flat about).
    """
    if len(values) < max(2, top_k):
        return 1.0
    best = values[0]
    if best <= 0:
        return 0.0
    return max(0.0, min(1.0, (best - values[top_k - 1]) / best))


def snippet(text: str, q: QueryTerms, context_chars: int | None) -> str:
    """``text`` cut to about ``context_chars`` around its best match (phrase, else the
    densest cluster of query terms), on word boundaries, with ``…`` where cut."""
    if not context_chars or context_chars <= 0 or len(text) <= context_chars:
        return text
    folded, index = fold_with_map(text)
    start_f: int | None = None
    if q.phrase:
        pat = r"\W+".join(re.escape(w) for w in q.phrase.split())
        m = re.search(r"(?<!\w)" + pat + r"(?!\w)", folded)
        if m:
            start_f = m.start()
    if start_f is None and q.terms:
        positions = sorted(
            m.start() for t in q.terms for m in re.finditer(r"(?<![^\W_])" + re.escape(t) + r"(?![^\W_])", folded)
        )
        best, best_count, j = None, 0, 0
        for i, p in enumerate(positions):
            while positions[j] < p - context_chars // 2:
                j += 1
            count = i - j + 1
            if count > best_count:
                best, best_count = positions[j], count
        start_f = best
    if start_f is None:
        anchor = 0
    else:
        anchor = index[min(start_f, len(index) - 1)] if index else 0
    start = max(0, anchor - context_chars // 4)
    end = min(len(text), start + context_chars)
    start = max(0, end - context_chars)
    if start > 0:
        sp = text.find(" ", start, min(len(text), start + 40))
        if sp != -1:
            start = sp + 1
    if end < len(text):
        sp = text.rfind(" ", max(start, end - 40), end)
        if sp > start:
            end = sp
    cut = text[start:end].strip()
    return ("…" if start > 0 else "") + cut + ("…" if end < len(text) else "")
