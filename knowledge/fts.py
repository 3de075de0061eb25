"""Build FTS5 ``MATCH`` expressions from user text without ever exposing FTS syntax.

User text is never passed to ``MATCH`` as is: quotes, ``*``, ``:``, ``^``, ``-``,
parentheses and the words ``AND``/``OR``/``NOT``/``NEAR`` all mean something to FTS5 and
raise syntax errors or change the query. We tokenise like the ``unicode61`` tokenizer,
drop stop words, and emit each remaining term as a double-quoted string (a token can
contain no ``"``, but any is doubled anyway) joined with ``OR``; BM25 then ranks chunks
that contain more of the terms higher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from knowledge.textnorm import content_terms


def quote_term(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(query: str, *, max_terms: int = 24) -> str | None:
    """The ``MATCH`` argument for ``query``, or ``None`` when it has no searchable term."""
    terms = content_terms(query, limit=max_terms)
    if not terms:
        return None
    return " OR ".join(quote_term(t) for t in terms)


def bm25_to_unit(bm25: float) -> float:
    """Map an FTS5 ``bm25()`` value (negative, lower is better) onto 0..1, saturating."""
    x = max(0.0, -bm25)
    return x / (1.0 + x)


def or_expression(terms: Sequence[str]) -> str | None:
    """``"a" OR "b"`` for already tokenised ``terms``; ``None`` when there are none."""
    return " OR ".join(quote_term(t) for t in terms) if terms else None


def selective_terms(
    terms: Sequence[str],
    df: Mapping[str, int],
    total_chunks: int,
    *,
    common_fraction: float = 0.2,
    common_min_df: int = 5_000,
    min_matches: int = 0,
) -> list[str]:
    """The query terms worth handing to BM25, given each term's document frequency.

    Why dropping them costs little: FTS5's ``bm25()`` uses
    ``idf = log((N - df + 0.5) / (df + 0.5))`` (clamped to ``1e-6`` when not positive),
    so a term in more than half of the chunks adds nothing to any score and one in a
    fifth adds at most log(4) ≈ 1.4 against 3–7 for a discriminating term; yet scoring
    it means visiting every one of its matches (an "invoice" in half of 100k chunks
    costs ~50 ms). The re-ranker still counts every query term for coverage, so a chunk
    that also has the dropped term keeps an edge there.

    A term is dropped when it is in more than ``common_fraction`` of the chunks and in
    at least ``common_min_df`` of them (below that, scoring it is cheap, and small
    collections keep exactly the old behaviour). Terms with no match are dropped too
    (they cannot change a score or a match). When every present term is common the
    rarest one is kept; when the kept terms together match fewer than ``min_matches``
    chunks, nothing common is dropped (the common terms are then needed to fill the
    candidate list). Order is preserved.
    """
    present = [t for t in terms if df.get(t, 0) > 0]
    if not present:
        return []
    threshold = total_chunks * common_fraction

    def common(term: str) -> bool:
        n = df[term]
        return n >= common_min_df and n > threshold

    kept = [t for t in present if not common(t)]
    if kept and sum(df[t] for t in kept) < min_matches:
        return present
    if kept:
        return kept
    rarest = min(range(len(present)), key=lambda i: (df[present[i]], i))
    return [present[rarest]]
