"""Text folding and tokenising that agree with the FTS5 ``unicode61 remove_diacritics 2``
tokenizer closely enough for query building, re-ranking and snippet placement.
"""

from __future__ import annotations

import re
import unicodedata

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)
_COMBINING_RE = re.compile(r"[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]")

#: Words that carry no retrieval signal. Dropped from FTS queries because they match
#: nearly every chunk (slow, and they flatten BM25) and ignored by the re-ranker.
STOP_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves please tell show find give get know explain describe list
    """.split()
)


def fold(text: str) -> str:
    """Casefold and strip diacritics (``"Ünïcödé"`` → ``"unicode"``).

    The result may differ in length from the input; use ``fold_with_map`` when
    positions matter.
    """
    return _COMBINING_RE.sub("", unicodedata.normalize("NFKD", text)).casefold()


def fold_with_map(text: str) -> tuple[str, list[int]]:
    """``fold(text)`` plus, for each folded character, the index of its source character."""
    folded = fold(text)
    if len(folded) == len(text):
        return folded, list(range(len(text)))
    out: list[str] = []
    index: list[int] = []
    for i, ch in enumerate(text):
        f = fold(ch)
        out.append(f)
        index.extend([i] * len(f))
    return "".join(out), index


def tokens(text: str) -> list[str]:
    """Folded word tokens (letters and digits; punctuation and ``_`` separate)."""
    return _TOKEN_RE.findall(fold(text))


def content_terms(text: str, *, limit: int = 24) -> list[str]:
    """Distinct folded tokens without stop words, in order, at most ``limit``.

    Falls back to the stop words themselves when nothing else is left, so "who are
    you" still searches for something.
    """
    seen: dict[str, None] = {}
    all_tokens = tokens(text)
    for t in all_tokens:
        if t not in STOP_WORDS and (len(t) > 1 or t.isdigit()):
            seen.setdefault(t, None)
    if not seen:
        for t in all_tokens:
            seen.setdefault(t, None)
    return list(seen)[:limit]


def stem(word: str) -> str:
    """A light English suffix stripper for re-ranking (FTS5 itself uses Porter).

    Crude on purpose: it only has to make "tests"/"test" and "running"/"run" meet when
    counting which query terms a chunk contains.
    """
    n = len(word)
    if n > 5 and word.endswith("ies"):
        return word[:-3] + "y"
    if n > 5 and word.endswith("ing"):
        w = word[:-3]
        return w[:-1] if len(w) > 2 and w[-1] == w[-2] else w
    if n > 4 and word.endswith("ed"):
        w = word[:-2]
        return w[:-1] if len(w) > 2 and w[-1] == w[-2] else w
    if n > 4 and word.endswith(("ches", "shes", "sses", "xes", "zes")):
        return word[:-2]
    if n > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word
