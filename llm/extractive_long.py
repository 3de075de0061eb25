"""How much of a long message the offline answerer reads: its last words, a fixed number.

The answerer (``llm.extractive_answer``) is pure Python and holds the GIL while it
works: its word matching, unit scoring and name finding grow with the words of the
message, so one message of ``AGENT_MAX_MESSAGE_CHARS`` (32,000 characters, ~2,900
distinct made-up words) cost it 7-14 s of CPU, every other stream of the process slowed
meanwhile, and the rate limit lets one user send 60 a minute. Questions are short (the
longest of every set in tests/data/offline_questions.json is 23 words, 121 characters)
and come last, after any context. So the answerer reads at most a message's last
``MAX_READ_WORDS`` words and ``MAX_READ_CHARS`` characters, and its knowledge search
looks for those: a bound a reader can state, not a timeout, and no question of any set
is cut (round 37, docs/knowledge-base.md: such a message now costs the whole offline path
0.02-0.10 s). A message that was cut says so first in its answer (``cut_note``), so the
reader knows what was read and can ask again with the question alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The most words (runs of non-space characters) of a message the answerer reads: its last.
MAX_READ_WORDS = 32
#: The most characters it reads (names and code spans cost more per word than words do):
#: within the knowledge search's query (``llm.extractive_followup.MAX_QUERY_CHARS``, 500),
#: so what is searched for and what is answered are the same text.
MAX_READ_CHARS = 300
_WORD = re.compile(r"\S+")


@dataclass(frozen=True, slots=True)
class ReadPart:
    """The part of a message the answerer reads (``text``), and how many words and
    characters the whole message has; ``cut`` when that part is not all of it."""

    text: str
    words: int
    chars: int
    cut: bool


def read_part(message: str) -> ReadPart:
    """The message's last ``MAX_READ_WORDS`` words, at most ``MAX_READ_CHARS`` characters
    (from a word's start, unless one word is longer than that), its spaces around left
    out; the whole message when it is within both."""
    text = message.strip()
    if len(text) <= MAX_READ_CHARS and len(text.split(None, MAX_READ_WORDS)) <= MAX_READ_WORDS:
        return ReadPart(message, len(text.split()), len(message), cut=False)
    starts = [m.start() for m in _WORD.finditer(text)]
    begin = starts[-MAX_READ_WORDS] if len(starts) >= MAX_READ_WORDS else 0
    floor = len(text) - MAX_READ_CHARS
    if begin < floor:
        later = [s for s in starts if s >= floor]
        begin = later[0] if later else floor
    return ReadPart(text[begin:], len(starts), len(message), cut=True)


def cut_note(part: ReadPart) -> str:
    """What an answer to a cut message says first: how much of it was read, and how to
    be answered on the rest."""
    return (
        f"_Your message is long ({_count(part.words, 'word')}, {_count(part.chars, 'character')}): I read only "
        f"its last {_count(len(part.text.split()), 'word')} ({_count(len(part.text), 'character')}). To ask "
        "about anything before them, send that question by itself._"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


__all__ = ["MAX_READ_CHARS", "MAX_READ_WORDS", "ReadPart", "cut_note", "read_part"]
