"""Which query terms are worth scoring, and which split of a joined word the index knows
better: the same rules for FTS5 and PostgreSQL text search (``storage/sqlite/kb_fts.py``,
``storage/postgres/kb_text.py``)."""

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


#: A query term matching fewer chunks than this is looked up for a split into words the
#: index knows ("agentchat" → "agent chat"); a more frequent term is the index's own word
#: and is never looked up.
SPLIT_MAX_DF = 50
#: Each part of a split must match at least this many chunks before its phrase is
#: counted: a part the index barely holds is no reading of the word.
SPLIT_MIN_PART_DF = 2
#: Phrase counts stop here: they only rank the cuts of one word against each other.
SPLIT_PHRASE_COUNT_CAP = 1_000


def may_split(df: int) -> bool:
    """Whether a term matching ``df`` chunks is rare enough to look up its splits."""
    return df < SPLIT_MAX_DF


def plausible_cuts(cuts: Sequence[Sequence[str]], part_df: Mapping[str, int]) -> list[tuple[str, ...]]:
    """The cuts of a word whose every part the index holds (``SPLIT_MIN_PART_DF`` chunks
    at least): the only ones whose phrase is worth counting."""
    return [tuple(c) for c in cuts if len(c) >= 2 and all(part_df.get(p, 0) >= SPLIT_MIN_PART_DF for p in c)]


def choose_split(cuts: Sequence[Sequence[str]], phrase_df: Mapping[str, int]) -> tuple[str, ...] | None:
    """Of a rare word's plausible cuts (``plausible_cuts``), the one the documents write:
    its phrase (``split_phrase``) matches chunks; fewer parts first (a two-word compound
    before a three-word reading of it), then the phrase in most chunks. ``None`` when
    no cut's phrase is written anywhere.

    Why: a question writes "agentchat", "filesystem" or "keepalive" where the documents
    write "agent chat", "file system", "keep alive"; the joined word then matches nothing,
    or a handful of chunks that are not the page asked about (the sample knowledge base
    names its command ``agentchat`` in 24 chunks, and its overview page says "the agent
    chat service"). Counting the phrase rather than trusting the parts keeps a rare word
    that merely splits into known words ("ano" + "ther") as it is.
    """
    best: tuple[str, ...] | None = None
    best_key: tuple[int, int] | None = None
    for cut in cuts:
        n = phrase_df.get(split_phrase(cut), 0)
        if n <= 0:
            continue
        key = (-len(cut), n)
        if best_key is None or key > best_key:
            best, best_key = tuple(cut), key
    return best


def split_phrase(parts: Sequence[str]) -> str:
    """A split as one query term: its parts joined by a space, which both engines rank as
    the parts written in sequence (FTS5: a quoted phrase; PostgreSQL: ``<->``)."""
    return " ".join(parts)


def is_split_phrase(term: str) -> bool:
    """Whether a query term is a split's phrase (``split_phrase``): a folded query term
    never holds a space otherwise."""
    return " " in term


__all__ = [
    "SPLIT_MAX_DF",
    "SPLIT_MIN_PART_DF",
    "SPLIT_PHRASE_COUNT_CAP",
    "choose_split",
    "is_split_phrase",
    "may_split",
    "plausible_cuts",
    "selective_terms",
    "split_phrase",
    "tuned_selective_terms",
]
