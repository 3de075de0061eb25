"""The re-ranker's score of one candidate, with the query's share of the work done once
and an upper bound that needs no tokenising of the candidate's text.

Why a bound: a search re-ranks ~100 fused candidates to keep ``2 * top_k + 4`` of them
(~94 were scored per search since the duplicate collapse made that 24). ``rerank``
(``knowledge.ranking``) walks the candidates best fused first; once the list is full,
``parts`` reads a candidate's parts cheapest first (title, whether the query names it,
phrase, metadata) and gives up on it as soon as it cannot reach the last kept score, so
it is not split into words for coverage; and once ``ceiling`` (the bound of everything
still to come, from its fused value) is below that score the walk stops.

Why it is exact: each check and ``ceiling`` are the very expression of ``score``
(``combine``) with each unknown part replaced by what it cannot exceed (body coverage
by 1; for ``ceiling`` every bonus that can still apply), and every operation of that
expression, the final rounding included, is monotone in its inputs, so neither is ever
below the score. tests/test_knowledge_ranking.py compares the result with scoring every
candidate.

Per-query work is done once (term forms and their union, the query's words), what
candidates share is cached (a title's words and whether the query names it, a word's
answer to "is it a query term", a metadata value's match), and a candidate's text is
split into words once, for the phrase and for coverage. ASCII text (nearly all of it) is
split by a byte table instead of the Unicode word pattern: the same words
(``textnorm.tokens``: runs of letters and digits, lowercased), about five times faster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from knowledge.textnorm import STOP_WORDS, fold, stem, tokens

W_FUSED, W_PHRASE, W_TITLE, W_META = 0.80, 0.10, 0.05, 0.05
#: A document's opening says what the document is: when the query names the document
#: (every word of its title is a query term), its first chunk gains this much ("what
#: does npm dedupe do?" is answered by the npm-dedupe page's description, not its options).
W_LEAD = 0.15
RELEVANCE_FLOOR = 0.4

#: ASCII bytes → the lowercase letter or digit, everything else a space.
_ASCII_WORDS = bytes((c + 32 if 65 <= c <= 90 else c) if c < 128 and chr(c).isalnum() else 32 for c in range(256))


def words(text: str) -> list[str]:
    """``textnorm.tokens(text)``, with a fast path for ASCII text (for which the fold
    is ``lower()`` and a word character a letter or a digit)."""
    if text.isascii():
        return text.encode("ascii").translate(_ASCII_WORDS).decode("ascii").split()
    return tokens(text)


class Scorable(Protocol):
    """What the score reads of a candidate (``knowledge.ranking.Candidate``)."""

    position: int
    title: str
    heading: str
    text: str
    metadata: dict[str, Any]
    fused: float
    cosine: float


def combine(fused: float, relevance: float, phrase: float, title_cov: float, meta: float, lead: float) -> float:
    """The score from its parts: the fused share damped by relevance, plus the bonuses,
    on 0..1 and rounded (the one formula ``score``, ``bound`` and ``ceiling`` share)."""
    damped = fused * (RELEVANCE_FLOOR + (1.0 - RELEVANCE_FLOOR) * relevance)
    return round(
        min(1.0, W_FUSED * damped + W_PHRASE * phrase + W_TITLE * title_cov + W_META * meta + W_LEAD * lead), 4
    )


class Parts:
    """A candidate's parts known before its coverage (and its words, when read)."""

    __slots__ = ("body", "fused", "lead", "meta", "phrase", "title_cov", "title_hits")

    def __init__(
        self,
        fused: float,
        title_hits: tuple[bool, ...],
        title_cov: float,
        phrase: float,
        meta: float,
        lead: float,
        body: list[str] | None,
    ) -> None:
        self.fused = fused
        self.title_hits = title_hits
        self.title_cov = title_cov
        self.phrase = phrase
        self.meta = meta
        self.lead = lead
        self.body = body


class QueryScorer:
    """One query's scoring: its term forms, phrase and words, the candidates' shared
    title words, and caches of what candidates share."""

    def __init__(
        self,
        terms: Sequence[str],
        phrase: str,
        forms: list[frozenset[str]],
        titles: Iterable[str],
        max_fused: float,
    ) -> None:
        self.forms = forms
        self.n_terms = max(1, len(terms))
        self.max_fused = max_fused
        self.all_forms: frozenset[str] = frozenset().union(*forms) if forms else frozenset()
        self.phrase = f" {phrase} " if phrase else ""
        self.phrase_words = phrase.split()
        self.query_words = f" {phrase or ' '.join(terms)} "
        self._query_word_set = frozenset(self.query_words.split())
        self._empty_words = "  " in self.query_words
        self._title_words: dict[str, list[str]] = {}
        self._title_parts: dict[tuple[str, str], tuple[tuple[bool, ...], float]] = {}
        self._names: dict[str, bool] = {}
        self._asked: dict[str, bool] = {}
        self._meta: dict[int, float] = {}
        self._values: dict[str, bool] = {}
        self.shared = self._shared_title_words(titles)

    # ------------------------------------------------------------------ per candidate
    def parts(self, c: Scorable, floor: float | None = None) -> Parts | None:
        """The candidate's parts, cheapest first; ``None`` as soon as its score is sure to
        be below ``floor`` (each check is ``combine`` with the parts not read yet at the
        most they can be: relevance 1, or the cosine when the fused share is negative)."""
        fused = min(1.0, c.fused / self.max_fused)
        relevance = 1.0 if fused >= 0 else min(1.0, max(0.0, c.cosine))
        title_hits, title_cov = self._title(c.title, c.heading)
        lead = 1.0 if c.position == 0 and self.names_title(c.title) else 0.0
        can_phrase = 1.0 if self.phrase else 0.0
        if floor is not None and combine(fused, relevance, can_phrase, title_cov, 1.0, lead) < floor:
            return None
        phrase = 0.0
        body = None
        if self.phrase:
            # Every phrase word is a substring of the text if the phrase is in it: most
            # texts fail that without being split into words.
            folded = fold(c.text)
            if all(w in folded for w in self.phrase_words):
                body = words(c.text)
                if self.phrase in f" {' '.join(body)} ":
                    phrase = 1.0
            if floor is not None and combine(fused, relevance, phrase, title_cov, 1.0, lead) < floor:
                return None
        meta = self._meta_match(c.metadata)
        if floor is not None and combine(fused, relevance, phrase, title_cov, meta, lead) < floor:
            return None
        return Parts(fused, title_hits, title_cov, phrase, meta, lead, body)

    def score(self, c: Scorable, p: Parts) -> float:
        body = set(p.body if p.body is not None else words(c.text))
        coverage = (
            sum(1 for hit, f in zip(p.title_hits, self.forms, strict=True) if hit or not f.isdisjoint(body))
            / self.n_terms
        )
        relevance = max(coverage, min(1.0, max(0.0, c.cosine)))
        return combine(p.fused, relevance, p.phrase, p.title_cov, p.meta, p.lead)

    def ceiling(self, fused: float, lead_possible: bool) -> float:
        """At least the score of any candidate whose fused value is at most ``fused``
        (every bonus that can apply given)."""
        fn = min(1.0, fused / self.max_fused)
        phrase = 1.0 if self.phrase else 0.0
        lead = 1.0 if lead_possible else 0.0
        return combine(fn, 1.0 if fn >= 0 else 0.0, phrase, 1.0, 1.0, lead)

    # ------------------------------------------------------------------ shared parts
    def names_title(self, title: str) -> bool:
        """True when the query names the document: every word of ``title`` is one of the
        query's terms (in any form), or every content word of it that no other
        candidate's title has ("log in to the registry" names ``npm-login`` among
        ``npm-*`` pages)."""
        known = self._names.get(title)
        if known is None:
            known = self._names[title] = self._names_title(title)
        return known

    def _asked_word(self, w: str) -> bool:
        known = self._asked.get(w)
        if known is None:
            known = self._asked[w] = w in self.all_forms or stem(w) in self.all_forms
        return known

    def _names_title(self, title: str) -> bool:
        title_words = self._words_of_title(title)
        asked = self._asked_word
        if not title_words:
            return False
        if all(asked(w) for w in title_words):
            return True
        own = [w for w in title_words if w not in self.shared and w not in STOP_WORDS]
        return bool(own) and len(own) < len(title_words) and all(asked(w) for w in own)

    def _words_of_title(self, title: str) -> list[str]:
        known = self._title_words.get(title)
        if known is None:
            known = self._title_words[title] = words(title)
        return known

    def _title(self, title: str, heading: str) -> tuple[tuple[bool, ...], float]:
        key = (title, heading)
        known = self._title_parts.get(key)
        if known is None:
            found = set(words(title + " " + heading))
            hits = tuple(not f.isdisjoint(found) for f in self.forms)
            known = self._title_parts[key] = (hits, sum(1 for h in hits if h) / self.n_terms)
        return known

    def _meta_match(self, metadata: Mapping[str, Any]) -> float:
        """1.0 when a metadata value, as words, is among the query's words in a row."""
        key = id(metadata)
        known = self._meta.get(key)
        if known is None:
            known = 0.0
            for v in metadata.values():
                if isinstance(v, bool) or v is None or not isinstance(v, (str, int, float)):
                    continue
                if self._value_matches(str(v)):
                    known = 1.0
                    break
            self._meta[key] = known
        return known

    def _value_matches(self, value: str) -> bool:
        """A value's first word is one of the query's words and a substring of the folded
        value, so a value holding none of them is passed over without splitting it into words
        (a value with no words at all matches only a query with none)."""
        known = self._values.get(value)
        if known is None:
            s = fold(value).strip()
            known = (
                0 < len(s) <= 80
                and (self._empty_words or any(w in fold(s) for w in self._query_word_set))
                and f" {' '.join(words(s))} " in self.query_words
            )
            self._values[value] = known
        return known

    def _shared_title_words(self, titles: Iterable[str]) -> frozenset[str]:
        """Title words common to several of the candidates' titles: the collection's own
        name ("npm" in "npm-login", "npm-run", …), which says nothing about one page."""
        seen: dict[str, int] = {}
        for title in set(titles):
            for w in set(self._words_of_title(title)):
                seen[w] = seen.get(w, 0) + 1
        return frozenset(w for w, n in seen.items() if n > 1)


__all__ = [
    "RELEVANCE_FLOOR",
    "W_FUSED",
    "W_LEAD",
    "W_META",
    "W_PHRASE",
    "W_TITLE",
    "Parts",
    "QueryScorer",
    "combine",
    "words",
]
