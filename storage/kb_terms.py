"""Which query terms are worth scoring: the same rule for FTS5 and PostgreSQL text
search (``storage/sqlite/kb_fts.py``, ``storage/postgres/kb_text.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from storage.kb_records import KBTextTuning


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




def tuned_selective_terms(
    terms: Sequence[str], df: Mapping[str, int], total_chunks: int, tuning: KBTextTuning, *, min_matches: int = 0
) -> list[str]:
    """``selective_terms`` with the thresholds of ``tuning`` (``AGENT_KB_*`` settings): what
    both engines' text rankers call once they know each term's document frequency."""
    return selective_terms(
        terms,
        df,
        total_chunks,
        common_fraction=tuning.common_term_fraction,
        common_min_df=tuning.common_term_min_df,
        min_matches=min_matches,
    )


__all__ = ["selective_terms", "tuned_selective_terms"]
