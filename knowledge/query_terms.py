"""The BM25 terms of a query beyond its content words: the words adjacent ones join
into, the other forms of clipped or full words and the words documentation writes for a
reader's verb (``knowledge.textnorm``), shared by the search's term choice and its
re-ranking; and the ways a joined word could be read as two or three words
(``split_candidates``), which the index judges against its vocabulary
(``KBIndex.term_splits``).
"""

from __future__ import annotations

from knowledge.textnorm import STOP_WORDS, content_terms
from knowledge.word_forms import clipped_terms, joined_terms, reader_terms
from storage.interfaces import KBIndex
from storage.kb_records import KBTextTuning
from storage.kb_terms import split_phrase

#: The shortest part a joined word is split into: two letters split off anything.
MIN_SPLIT_PART = 3
#: At most this many parts ("healthcheckendpoint" → three words).
MAX_SPLIT_PARTS = 3
#: A longer word is not cut: three short words rarely run past it, and the cuts (and the
#: parts the index is asked about) grow with the square of the length ("a" * 5000).
MAX_SPLIT_WORD = 24


def related_terms(query: str) -> dict[str, str]:
    """``{word: the query term it counts as}``: the words adjacent query words join into
    ("log in" → ``login``, ``word_forms.joined_terms``), the clipped or full forms of
    query words ("configuration" → ``config``, ``word_forms.clipped_terms``) and the words
    documentation writes for a reader's verb ("see" → ``show``, ``list``, ``display``,
    ``print``: ``word_forms.reader_terms``) unless the query says them itself."""
    terms = set(content_terms(query))
    related = joined_terms(query)
    for word, term in clipped_terms(query).items():
        if term in terms:
            related.setdefault(word, term)
    for word, term in reader_terms(query).items():
        if term in terms and word not in terms:
            related.setdefault(word, term)
    return related


def text_terms(query: str) -> list[str]:
    """The BM25 terms of ``query``: its content words, then the words adjacent ones join
    into ("log in" → ``login``, found in ``npm-login``) and the other forms of its clipped
    or full words ("configuration" → ``config``; see ``related_terms``)."""
    terms = content_terms(query)
    return terms + [w for w in related_terms(query) if w not in terms]


def split_candidates(term: str) -> list[tuple[str, ...]]:
    """The ways ``term`` reads as two (or three) words: every cut into parts of
    ``MIN_SPLIT_PART`` letters or more, none a stop word ("therapist" is never "the
    rapist"), two-part cuts first. Only words of letters, at most ``MAX_SPLIT_WORD`` of
    them: an identifier or a version is not a compound. Which cut (if any) the documents use is the index's to say
    (``KBIndex.term_splits``): this is only what to ask it."""
    if not term.isalpha() or not 2 * MIN_SPLIT_PART <= len(term) <= MAX_SPLIT_WORD:
        return []
    out: list[tuple[str, ...]] = []

    def cut(rest: str, parts: tuple[str, ...], left: int) -> None:
        if left == 1:
            if len(rest) >= MIN_SPLIT_PART and rest not in STOP_WORDS:
                out.append((*parts, rest))
            return
        for i in range(MIN_SPLIT_PART, len(rest) - MIN_SPLIT_PART * (left - 1) + 1):
            head = rest[:i]
            if head not in STOP_WORDS:
                cut(rest[i:], (*parts, head), left - 1)

    for n in range(2, MAX_SPLIT_PARTS + 1):
        cut(term, (), n)
    return out


async def bm25_terms(index: KBIndex, query: str, n_cand: int, tuning: KBTextTuning) -> list[str]:
    """The terms BM25 ranks by: the query's (``text_terms``), with the split of each
    content word the index barely knows into words it does, as a phrase beside it
    ("agentchat" → ``agent chat``: a question joins words the documents write apart),
    then without those worth nothing (``KBIndex.selective_terms``). The index answers a
    word's split from its vocabulary once until it changes (``KBIndex.term_splits``)."""
    terms = text_terms(query)
    cuts = {t: c for t in content_terms(query) if (c := split_candidates(t))}
    if cuts:
        splits = await index.term_splits(cuts, tuning)
        terms += [p for p in (split_phrase(s) for s in splits.values()) if p not in terms]
    return await index.selective_terms(terms, n_cand, tuning)


__all__ = ["bm25_terms", "related_terms", "split_candidates", "text_terms"]
