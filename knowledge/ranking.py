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

from knowledge.fusion import (
    DEFAULT_DENSE_WEIGHT,
    DENSE_WEIGHTS,
    DenseWeight,
    FusionSide,
    dense_weight,
    fuse,
    head_minmax,
    minmax,
)
from knowledge.textnorm import STOP_WORDS, fold, fold_with_map, stem, tokens

RRF_K = 60
W_FUSED, W_PHRASE, W_TITLE, W_META = 0.80, 0.10, 0.05, 0.05
#: A document's opening says what the document is: when the query names the document
#: (every word of its title is a query term), its first chunk gains this much ("what
#: does npm dedupe do?" is answered by the npm-dedupe page's description, not its options).
W_LEAD = 0.15
RELEVANCE_FLOOR = 0.4

__all__ = [
    "DEFAULT_DENSE_WEIGHT",
    "DENSE_WEIGHTS",
    "Candidate",
    "DenseWeight",
    "FusionSide",
    "QueryTerms",
    "dense_weight",
    "fuse",
    "head_minmax",
    "minmax",
    "rerank",
    "rrf",
    "rrf_max",
    "signal_spread",
    "snippet",
]


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
    #: joined word covers that term (``textnorm.joined_terms``).
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


def _meta_values(metadata: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for v in metadata.values():
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, (str, int, float)):
            s = fold(str(v)).strip()
            if 0 < len(s) <= 80:
                out.add(" ".join(tokens(s)))
    return out


def rerank(
    candidates: list[Candidate],
    q: QueryTerms,
    *,
    lists: int,
    top_k: int,
    per_doc: int = 3,
    max_fused: float | None = None,
) -> list[Candidate]:
    """Score, cap at ``per_doc`` chunks per document, and keep the best ``top_k``.

    ``max_fused`` is the largest fused value possible: 1.0 for ``fuse``; by default
    that of ``rrf`` over ``lists`` rankings.
    """
    if max_fused is None or max_fused <= 0:
        max_fused = rrf_max(max(1, lists))
    n_terms = max(1, len(q.terms))
    forms = q.forms()
    meta_cache: dict[int, set[str]] = {}
    query_words = f" {q.phrase or ' '.join(q.terms)} "
    phrase_in_query = q.phrase
    ordered_in = sorted(candidates, key=lambda c: -c.fused)
    shared = _shared_title_words(candidates)
    scored: list[Candidate] = []
    openings: set[int] = set()  # chunk rowids of the openings of documents the query names

    def score(c: Candidate) -> None:
        body_words = tokens(c.text)
        body_set = set(body_words)
        title_set = set(tokens(c.title + " " + c.heading))
        coverage = sum(1 for f in forms if not f.isdisjoint(body_set) or not f.isdisjoint(title_set)) / n_terms
        title_cov = sum(1 for f in forms if not f.isdisjoint(title_set)) / n_terms
        body = " ".join(body_words)
        phrase = 1.0 if phrase_in_query and f" {phrase_in_query} " in f" {body} " else 0.0
        key = id(c.metadata)
        values = meta_cache.get(key)
        if values is None:
            values = meta_cache[key] = _meta_values(c.metadata)
        meta = 1.0 if any(f" {value} " in query_words for value in values) else 0.0
        fused = min(1.0, c.fused / max_fused)
        relevance = max(coverage, min(1.0, max(0.0, c.cosine)))
        damped = fused * (RELEVANCE_FLOOR + (1.0 - RELEVANCE_FLOOR) * relevance)
        lead = 1.0 if c.position == 0 and _names_title(c.title, forms, shared) else 0.0
        if lead:
            openings.add(c.chunk_rowid)
        c.score = round(
            min(1.0, W_FUSED * damped + W_PHRASE * phrase + W_TITLE * title_cov + W_META * meta + W_LEAD * lead), 4
        )

    for i, c in enumerate(ordered_in):
        # Exact early exit: a candidate's score is at most W_FUSED * its fused share plus
        # every bonus, so once the current top_k all beat that bound for the next
        # candidate (fused is sorted), nothing further can enter the result.
        if i >= top_k and i % 8 == 0:
            bound = W_FUSED * min(1.0, c.fused / max_fused) + W_PHRASE + W_TITLE + W_META + W_LEAD
            current = _capped(scored, top_k, per_doc)
            if len(current) >= top_k and current[-1].score > bound:
                break
        scored.append(c)
        score(c)
    kept = _capped(scored, top_k, per_doc)
    # The openings of the kept documents the query names, scored even when the early
    # exit stopped before them (a few chunks at most: one per kept document).
    kept_docs = {c.doc_id for c in kept}
    seen = {c.chunk_rowid for c in scored}
    for c in ordered_in:
        if (
            c.position == 0
            and c.doc_id in kept_docs
            and c.chunk_rowid not in seen
            and _names_title(c.title, forms, shared)
        ):
            scored.append(c)
            score(c)
    return _with_openings(kept, [c for c in scored if c.chunk_rowid in openings], top_k, per_doc)


def _shared_title_words(candidates: Sequence[Candidate]) -> frozenset[str]:
    """Title words common to several of the candidates' titles: the collection's own name
    ("npm" in "npm-login", "npm-run", …), which says nothing about one page."""
    seen: dict[str, int] = {}
    for title in {c.title for c in candidates}:
        for w in set(tokens(title)):
            seen[w] = seen.get(w, 0) + 1
    return frozenset(w for w, n in seen.items() if n > 1)


def _names_title(title: str, forms: list[frozenset[str]], shared: frozenset[str] = frozenset()) -> bool:
    """True when the query names the document: every word of ``title`` is one of the
    query's terms (in any form), or every content word of it that no other candidate's
    title has ("log in to the registry" names ``npm-login`` among ``npm-*`` pages)."""
    words = tokens(title)

    def asked(w: str) -> bool:
        s = stem(w)
        return any(w in f or s in f for f in forms)

    if not words:
        return False
    if all(asked(w) for w in words):
        return True
    own = [w for w in words if w not in shared and w not in STOP_WORDS]
    return bool(own) and len(own) < len(words) and all(asked(w) for w in own)


def _capped(candidates: list[Candidate], top_k: int, per_doc: int) -> list[Candidate]:
    """Best ``top_k`` by score with at most ``per_doc`` per document (ties: fused, id, position)."""
    ordered = sorted(candidates, key=lambda c: (-c.score, -c.fused, c.doc_id, c.position))
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
            m.start()
            for t in q.terms
            for m in re.finditer(r"(?<![^\W_])" + re.escape(t) + r"(?![^\W_])", folded)
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
