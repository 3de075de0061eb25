"""The Porter stemmer (M. F. Porter, "An algorithm for suffix stripping", 1980).

Why a real stemmer beside ``textnorm.stem``: that light suffix stripper only has to make
"tests"/"test" meet when the re-ranker counts query terms, and FTS5 does its own Porter
stemming. Keyword matching (``textnorm.keyword_terms``) needs the words a paraphrase
actually changes to meet: "computing", "computers" and "computation" → ``comput``,
"applications" → ``applic``, "optimizing"/"optimization" → ``optim``, "batteries"/
"battery" → ``batteri``. Porter's algorithm does that with five steps of suffix rules
conditioned on the *measure* of the stem (its number of vowel-consonant sequences), so
short words keep their endings ("news" stays apart from "new" only by measure, not by a
list). The output is a matching key, not a word: "degradation" → ``degrad``.

This is the original algorithm as published (no Porter2 extensions), applied to
casefolded ASCII letters; words with digits or other scripts are returned unchanged
except for step 1a's plural ``s``.

``porter_stem`` is the pure function; ``Stemmer`` memoises it, and is owned by whoever
matches keywords for the service's life (the app's wiring builds one with the knowledge
base and gives it to the keyword index), so a process holds no memo outside it and two
apps in one process share none.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

#: Bound of ``Stemmer``'s memo: a service's keywords and questions use a few thousand
#: words again and again; past this many, the least recently used go first.
STEM_MEMO = 65_536

_VOWELS = frozenset("aeiou")

_STEP2 = (
    ("ational", "ate"),
    ("tional", "tion"),
    ("enci", "ence"),
    ("anci", "ance"),
    ("izer", "ize"),
    ("abli", "able"),
    ("alli", "al"),
    ("entli", "ent"),
    ("eli", "e"),
    ("ousli", "ous"),
    ("ization", "ize"),
    ("ation", "ate"),
    ("ator", "ate"),
    ("alism", "al"),
    ("iveness", "ive"),
    ("fulness", "ful"),
    ("ousness", "ous"),
    ("aliti", "al"),
    ("iviti", "ive"),
    ("biliti", "ble"),
)
_STEP3 = (
    ("icate", "ic"),
    ("ative", ""),
    ("alize", "al"),
    ("iciti", "ic"),
    ("ical", "ic"),
    ("ful", ""),
    ("ness", ""),
)
_STEP4 = (
    "al", "ance", "ence", "er", "ic", "able", "ible", "ant", "ement", "ment", "ent",
    "ion", "ou", "ism", "ate", "iti", "ous", "ive", "ize",
)


def _is_consonant(word: str, i: int) -> bool:
    ch = word[i]
    if ch in _VOWELS:
        return False
    if ch == "y":
        return i == 0 or not _is_consonant(word, i - 1)
    return True


def _measure(stem: str) -> int:
    """m in [C](VC)^m[V]: how many vowel-consonant sequences ``stem`` has."""
    m = 0
    prev_vowel = False
    for i in range(len(stem)):
        vowel = not _is_consonant(stem, i)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m


def _has_vowel(stem: str) -> bool:
    return any(not _is_consonant(stem, i) for i in range(len(stem)))


def _double_consonant(word: str) -> bool:
    return len(word) >= 2 and word[-1] == word[-2] and _is_consonant(word, len(word) - 1)


def _cvc(word: str) -> bool:
    """Ends consonant-vowel-consonant, the last not w, x or y ("hop", not "snow")."""
    n = len(word)
    if n < 3:
        return False
    return (
        _is_consonant(word, n - 3)
        and not _is_consonant(word, n - 2)
        and _is_consonant(word, n - 1)
        and word[-1] not in "wxy"
    )


def _replace(word: str, rules: tuple[tuple[str, str], ...], min_measure: int) -> str:
    """Apply the rule with the longest matching suffix, if its stem is long enough."""
    for suffix, repl in sorted(rules, key=lambda r: -len(r[0])):
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            return stem + repl if _measure(stem) > min_measure else word
    return word


def _step1ab(word: str) -> str:
    if word.endswith(("sses", "ies")):  # SSES -> SS, IES -> I
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]

    if word.endswith("eed"):
        if _measure(word[:-3]) > 0:
            word = word[:-1]
        return word
    for suffix in ("ed", "ing"):
        if word.endswith(suffix) and _has_vowel(word[: -len(suffix)]):
            word = word[: -len(suffix)]
            if word.endswith(("at", "bl", "iz")):
                return word + "e"
            if _double_consonant(word) and word[-1] not in "lsz":
                return word[:-1]
            if _measure(word) == 1 and _cvc(word):
                return word + "e"
            return word
    return word


def _step4(word: str) -> str:
    for suffix in sorted(_STEP4, key=len, reverse=True):
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if _measure(stem) <= 1:
                return word
            if suffix == "ion" and not stem.endswith(("s", "t")):
                return word
            return stem
    return word


def _step5(word: str) -> str:
    if word.endswith("e"):
        stem = word[:-1]
        m = _measure(stem)
        if m > 1 or (m == 1 and not _cvc(stem)):
            word = stem
    if word.endswith("ll") and _measure(word) > 1:
        word = word[:-1]
    return word


def porter_stem(word: str) -> str:
    """The Porter stem of one casefolded word (``"applications"`` → ``"applic"``)."""
    if len(word) <= 2:
        return word
    if not word.isascii() or not word.isalpha():
        # Identifiers, numbers and other scripts: only a plain plural "s" goes.
        if word.isascii() and word.endswith("s") and not word.endswith("ss"):  # "mp3s", "1990s"
            return word[:-1]
        return word
    word = _step1ab(word)
    if word.endswith("y") and _has_vowel(word[:-1]):
        word = word[:-1] + "i"
    word = _replace(word, _STEP2, 0)
    word = _replace(word, _STEP3, 0)
    word = _step4(word)
    return _step5(word)


class Stemmer:
    """``porter_stem`` behind a bounded least-recently-used memo (``STEM_MEMO`` words):
    stemming one word runs Porter's five steps, about 10 us; a memoised word costs a
    dictionary lookup. Same answers as ``porter_stem``."""

    __slots__ = ("stem",)

    def __init__(self, maxsize: int = STEM_MEMO) -> None:
        self.stem: Callable[[str], str] = lru_cache(maxsize=maxsize)(porter_stem)


__all__ = ["STEM_MEMO", "Stemmer", "porter_stem"]
