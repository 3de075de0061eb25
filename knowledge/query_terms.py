"""The BM25 terms of a query beyond its content words: the words adjacent ones join
into and the other forms of clipped or full words (``knowledge.textnorm``), shared by
the search's term choice and its re-ranking.
"""

from __future__ import annotations

from knowledge.textnorm import clipped_terms, content_terms, joined_terms


def related_terms(query: str) -> dict[str, str]:
    """``{word: the query term it counts as}``: the words adjacent query words join into
    ("log in" → ``login``, ``textnorm.joined_terms``) and the clipped or full forms of
    query words ("configuration" → ``config``, ``textnorm.clipped_terms``)."""
    terms = set(content_terms(query))
    related = joined_terms(query)
    for word, term in clipped_terms(query).items():
        if term in terms:
            related.setdefault(word, term)
    return related


def text_terms(query: str) -> list[str]:
    """The BM25 terms of ``query``: its content words, then the words adjacent ones join
    into ("log in" → ``login``, found in ``npm-login``) and the other forms of its clipped
    or full words ("configuration" → ``config``; see ``related_terms``)."""
    terms = content_terms(query)
    return terms + [w for w in related_terms(query) if w not in terms]


__all__ = ["related_terms", "text_terms"]
