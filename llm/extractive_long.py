"""How much of a long message the offline answerer reads: a fixed number of words, its
question among them.

The answerer (``llm.extractive_answer``) is pure Python and holds the GIL while it
works: its word matching, unit scoring and name finding grow with the words of the
message, so one message of ``AGENT_MAX_MESSAGE_CHARS`` (32,000 characters, ~2,900
distinct made-up words) cost it 7-14 s of CPU, every other stream of the process slowed
meanwhile, and the rate limit lets one user send 60 a minute. Round 37 read only a
message's last 32 words within 300 characters, which cut ordinary messages: a question
followed by two sentences of why it is asked (47 words, 263 characters) lost the
question. A word's matching now costs a few look-ups however long the passages are
(``llm.extractive_words.TermIndex``), so the answerer reads up to ``MAX_READ_WORDS``
words and ``MAX_READ_CHARS`` characters: a paragraph of context and its question are
never cut (docs/knowledge-base.md, round 37: the figures). A longer message is read by
the words ending with its last question sentence when the words ending the message would
leave that sentence out (a question, then a long explanation), else by its last words:
a bound a reader can state, not a timeout. A message that was cut says so first in its
answer (``cut_note``), so the reader knows what was read and can ask again with the
question alone. What the knowledge search looks for is the part read, or, past the
search tools' ``MAX_QUERY_CHARS``, what it asks (``search_text``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llm.extractive_subject import asking_spans

#: The most words (runs of non-space characters) of a message the answerer reads.
MAX_READ_WORDS = 250
#: The most characters it reads (names and code spans cost more per word than words do).
MAX_READ_CHARS = 1_500
#: The longest query the knowledge search tools take (their schemas' ``maxLength``).
MAX_QUERY_CHARS = 500
_WORD = re.compile(r"\S+")
#: The end of a question sentence: its question mark(s), then a space or the message's end.
_QUESTION_END = re.compile(r"\?+[\"'\u201d)\]]*(?=\s|$)")
#: Where a sentence ends, its closing quotes or brackets included.
_SENTENCE_BREAK = re.compile(r"[.!?]+[\"'\u201d)\]]*(?=\s|$)")
#: Where one sentence of a message ends and the next begins (also how
#: ``llm.extractive_followup`` finds a message's last sentence).
SENTENCE_GAP = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass(frozen=True, slots=True)
class ReadPart:
    """The part of a message the answerer reads (``text``), and how many words and
    characters the whole message has; ``cut`` when that part is not all of it, and
    ``at_question`` when it ends with the message's last question rather than its end."""

    text: str
    words: int
    chars: int
    cut: bool
    at_question: bool = False


def read_part(message: str) -> ReadPart:
    """The whole message when it is within ``MAX_READ_WORDS`` words and ``MAX_READ_CHARS``
    characters; else the most words within both ending at the message's end, unless
    those leave out the start of its last question sentence: then ending with that
    sentence. Its spaces around are left out."""
    text = message.strip()
    if len(text) <= MAX_READ_CHARS and len(text.split(None, MAX_READ_WORDS)) <= MAX_READ_WORDS:
        return ReadPart(message, len(text.split()), len(message), cut=False)
    starts = [m.start() for m in _WORD.finditer(text)]
    last = _window(text, starts, len(text))
    questions = list(_QUESTION_END.finditer(text))
    if questions:
        question = questions[-1]
        ended = max((m.end() for m in _SENTENCE_BREAK.finditer(text, 0, question.start())), default=0)
        opened = ended + len(text[ended:]) - len(text[ended:].lstrip())
        if opened < last:  # the last words leave out the start of the last question sentence
            end = question.end()
            return ReadPart(text[_window(text, starts, end) : end], len(starts), len(message), True, True)
    return ReadPart(text[last:], len(starts), len(message), cut=True)


def _window(text: str, starts: list[int], end: int) -> int:
    """Where the most words within both bounds ending at ``end`` begin (at a word's
    start, unless one word is longer than ``MAX_READ_CHARS``)."""
    within = [s for s in starts if s < end]
    begin = within[-MAX_READ_WORDS] if len(within) >= MAX_READ_WORDS else 0
    floor = end - MAX_READ_CHARS
    if begin < floor:
        later = [s for s in within if s >= floor]
        begin = later[0] if later else floor
    return begin


def search_text(text: str) -> str:
    """What the knowledge search looks for when asked ``text`` (the part read): itself
    within ``MAX_QUERY_CHARS``; past that, what it asks (its question sentences,
    ``llm.extractive_subject.asking_spans``), as many of the last sentences as fit, not its
    first characters, which are the context a question follows."""
    if len(text) <= MAX_QUERY_CHARS:
        return text
    asked = [
        " ".join(sentence.split())
        for begin, end in asking_spans(text)
        for sentence in SENTENCE_GAP.split(text[begin:end])
        if sentence.strip()
    ]
    kept: list[str] = []
    size = -1
    for sentence in reversed(asked):
        if size + 1 + len(sentence) > MAX_QUERY_CHARS:
            break
        kept.insert(0, sentence)
        size += 1 + len(sentence)
    if kept:
        return " ".join(kept)
    # One question longer than a query: its first words, up to a word's end.
    head = (asked[-1] if asked else " ".join(text.split()))[:MAX_QUERY_CHARS]
    return head.rsplit(None, 1)[0] if len(head.split()) > 1 else head


def cut_note(part: ReadPart) -> str:
    """What an answer to a cut message says first: how much of it was read, and how to
    be answered on the rest."""
    read = f"{_count(len(part.text.split()), 'word')} ({_count(len(part.text), 'character')})"
    which = f"the {read} ending with its last question" if part.at_question else f"its last {read}"
    return (
        f"_Your message is long ({_count(part.words, 'word')}, {_count(part.chars, 'character')}): I read only "
        f"{which}. To ask about anything else in it, send that question by itself._"
    )


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


__all__ = [
    "MAX_QUERY_CHARS",
    "MAX_READ_CHARS",
    "MAX_READ_WORDS",
    "SENTENCE_GAP",
    "ReadPart",
    "cut_note",
    "read_part",
    "search_text",
]
