"""Two adjacent words of a text that a question writes as one ("agent chat" for the
question's "agentchat": ``written_apart``), out of ``llm.extractive_words`` (which
keeps how stems are made and met). ``llm.extractive_question`` is its one user
(``Question.written_apart``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

from llm.extractive_words import _STOP, folded_words


def written_apart(
    wanted: frozenset[str],
    texts: Iterable[str],
    stem: Callable[[str], str],
    shortest: int,
    folded: Callable[[str], tuple[str, ...]] = folded_words,
) -> dict[tuple[str, str], str]:
    """``{(left, right): stem}`` for the adjacent words of ``texts`` (letters only, none a
    stop word, each ``shortest`` letters or more) that join into one of the ``wanted``
    stems: "agent chat" for the question's "agentchat" (``Question.written_apart``).
    ``folded`` is ``folded_words`` or its memo (``Words.folded``)."""
    apart: dict[tuple[str, str], str] = {}
    # A stem keeps its word's start: most pairs are ruled out before stemming them.
    starts = frozenset(w[: 2 * shortest] for w in wanted)
    for text in texts:
        words = folded(text)
        for left, right in itertools.pairwise(words):
            if (
                (left + right)[: 2 * shortest] in starts
                and len(left) >= shortest
                and len(right) >= shortest
                and left.isalpha()
                and right.isalpha()
                and left not in _STOP
                and right not in _STOP
                and (joined := stem(left + right)) in wanted
            ):
                apart.setdefault((left, right), joined)
    return apart


__all__ = ["written_apart"]
