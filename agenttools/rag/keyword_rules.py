"""Seed 001's rules for a keyword, before it reaches the index: how it is normalised
(NFKC + casefold, whitespace collapsed, edge punctuation dropped) into the *key* that is
UNIQUE in the table, and whether it is accepted (2-50 characters trimmed, at most six
words, letters or digits, not generic) - with a reason code and a message the model can
act on when it is not. Apart from the index (``agenttools.rag.keywords``) because the
tool's call checks them with no store at hand, and benches and tests read them alone.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from knowledge.textnorm import STOP_WORDS
from knowledge.textnorm import tokens as text_tokens

MIN_CHARS = 2
MAX_CHARS = 50
MAX_WORDS = 6
MIN_PER_CALL = 3
MAX_PER_CALL = 10
# Punctuation kept at token edges because it changes meaning ("C#", "AT&T", "50%").
_KEEP_EDGE = frozenset("#%&@+")

# Words that are real words but say nothing as a keyword (seed 000: "information", "a").
VAGUE_WORDS: frozenset[str] = frozenset(
    """
    information info data thing things stuff something anything everything answer answers
    question questions result results query queries search searches topic topics subject
    content details detail overview summary general various misc miscellaneous example
    examples item items way ways lot lots kind type types part parts aspect aspects fact
    facts issue issues case cases point points source sources reference references
    perplexity keyword keywords knowledge web internet online article page link url
    """.split()
)

#: Stop words are the service's one list (``knowledge.textnorm``).
GENERIC_WORDS: frozenset[str] = STOP_WORDS | VAGUE_WORDS


# --------------------------------------------------------------------------- normalisation


def display_form(raw: str) -> str:
    """What we store and show: NFKC (full-width → ASCII), whitespace collapsed, trimmed."""
    return " ".join(unicodedata.normalize("NFKC", raw).split())


def _strip_edge_punctuation(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_edge_punct(token[start]):
        start += 1
    while end > start and _is_edge_punct(token[end - 1]):
        end -= 1
    return token[start:end]


def _is_edge_punct(ch: str) -> bool:
    return ch not in _KEEP_EDGE and unicodedata.category(ch)[0] == "P"


def tokens(text: str) -> list[str]:
    """Case-free tokens of ``text``: NFKC, casefold, split on whitespace, edge punctuation off."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    out = []
    for raw in folded.split():
        tok = _strip_edge_punctuation(raw)
        if tok:
            out.append(tok)
    return out


def keyword_key(text: str) -> str:
    """The UNIQUE key of a keyword; a query contains it when its tokens contain this phrase."""
    return " ".join(tokens(text))


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True, slots=True)
class Candidate:
    """A keyword that passed validation: its unique key and its display form."""

    key: str
    display: str


@dataclass(frozen=True, slots=True)
class Rejection:
    """A keyword the model must fix; ``reason`` is a stable code, ``message`` says how."""

    keyword: str
    reason: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"keyword": self.keyword, "reason": self.reason, "message": self.message}


@dataclass(frozen=True, slots=True)
class KeywordValidation:
    accepted: tuple[Candidate, ...]
    rejected: tuple[Rejection, ...]
    duplicates: tuple[str, ...]  # given more than once in this call (merged, not rejected)


def check_keyword(raw: object) -> Candidate | Rejection:
    """Validate one keyword against seed 001's rules (2-50 chars trimmed, not generic)."""
    if not isinstance(raw, str):
        return Rejection(repr(raw)[:60], "not_text", "Each keyword must be a string.")
    display = display_form(raw)
    if not display:
        return Rejection(raw, "empty", "Keyword is empty after trimming whitespace.")
    if len(display) < MIN_CHARS:
        return Rejection(raw, "too_short", f"Keyword must be at least {MIN_CHARS} characters after trimming.")
    if len(display) > MAX_CHARS:
        return Rejection(
            raw,
            "too_long",
            f"Keyword is {len(display)} characters; the limit is {MAX_CHARS}. Use a shorter phrase.",
        )
    toks = tokens(display)
    if not toks or not any(ch.isalnum() for ch in "".join(toks)):
        return Rejection(raw, "no_letters", "Keyword must contain letters or digits.")
    if len(toks) > MAX_WORDS:
        return Rejection(raw, "too_many_words", f"Keyword has {len(toks)} words; use at most {MAX_WORDS}.")
    key = " ".join(toks)
    if key in GENERIC_WORDS or all(_is_stop_word(t) for t in toks):
        return Rejection(
            raw,
            "generic",
            "Keyword is too generic; use a specific term such as a name, product, "
            "technology or 'topic + domain' phrase.",
        )
    return Candidate(key=key, display=display)


def _is_stop_word(token: str) -> bool:
    """A stop word, or a contraction of them ("don't", "it's")."""
    if token in STOP_WORDS:
        return True
    parts = text_tokens(token)
    return ("'" in token or "\u2019" in token) and bool(parts) and all(p in STOP_WORDS for p in parts)


def validate_keywords(raw_keywords: Sequence[object]) -> KeywordValidation:
    """Check each keyword and merge duplicates of the same key within the call."""
    accepted: dict[str, Candidate] = {}
    rejected: list[Rejection] = []
    duplicates: list[str] = []
    for raw in raw_keywords:
        checked = check_keyword(raw)
        if isinstance(checked, Rejection):
            rejected.append(checked)
        elif checked.key in accepted:
            duplicates.append(checked.display)
        else:
            accepted[checked.key] = checked
    return KeywordValidation(tuple(accepted.values()), tuple(rejected), tuple(duplicates))


__all__ = [
    "GENERIC_WORDS",
    "MAX_CHARS",
    "MAX_PER_CALL",
    "MAX_WORDS",
    "MIN_CHARS",
    "MIN_PER_CALL",
    "VAGUE_WORDS",
    "Candidate",
    "KeywordValidation",
    "Rejection",
    "check_keyword",
    "display_form",
    "keyword_key",
    "tokens",
    "validate_keywords",
]
