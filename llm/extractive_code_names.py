"""Names written in code (a code span, a constant such as ``AGENT_AUTH``) and the words
they clip, for the offline answerer: a reader reads ``AGENT_AUTH`` as the authentication
setting (``llm.extractive_about.clipped_terms``). The parts of a text's names
(``code_parts``) and the beginnings of a question's stems (``beginnings``) are what
meet; ``llm.extractive_words.Words`` memoises both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: A thing named in code: a code span, or a constant (``AGENT_AUTH``).
CODE_NAME = re.compile(r"`([^`]+)`|\b([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)\b")
_NAME_PART = re.compile(r"[^\W\d_]+")
#: A clipped word this short says too little to stand for a longer one ("max", "db").
MIN_CLIPPED_CHARS = 4


def code_parts(text: str) -> frozenset[str]:
    """The parts of the names ``text`` writes in code (``CODE_NAME``), folded, of at least
    ``MIN_CLIPPED_CHARS`` letters: what ``llm.extractive_about.clipped_terms`` meets the
    question's words with (``Words.code_parts`` memoises it per text)."""
    return frozenset(
        part
        for m in CODE_NAME.finditer(text)
        for part in _NAME_PART.findall((m.group(1) or m.group(2)).casefold())
        if len(part) >= MIN_CLIPPED_CHARS
    )


def beginnings(stems: frozenset[str]) -> Mapping[str, frozenset[str]]:
    """``{beginning: the stems it begins}`` for every beginning of ``stems`` shorter than
    its stem and at least ``MIN_CLIPPED_CHARS`` long: the clipped parts of a name in code
    that say a question word (``llm.extractive_about.clipped_terms``), in one look-up
    each (``Words.beginnings`` memoises it per question)."""
    out: dict[str, set[str]] = {}
    for q in stems:
        for k in range(MIN_CLIPPED_CHARS, len(q)):
            out.setdefault(q[:k], set()).add(q)
    return {part: frozenset(qs) for part, qs in out.items()}


__all__ = ["CODE_NAME", "MIN_CLIPPED_CHARS", "beginnings", "code_parts"]
