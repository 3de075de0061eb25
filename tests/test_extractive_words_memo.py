"""The offline answerer's memoised word work (``llm.extractive_words.Words``) gives the
answers of the plain functions it stands in for, only faster (the CPU cut of 2026-11-29: the
answerer's ~20 ms per answer of string work):

- ``said_in_a_row`` visits only the pairs of words the question and the text share,
  and says the run the full dynamic programme over every pair says;
- ``Words.blocks`` parses a passage once and hands out copies, so no two reads share a
  block they might change;
- ``Question.terms`` keeps what it read per question object, and a question changed by
  ``replace`` (``written_apart``) reads afresh;
- ``beginnings`` finds the question words a name in code clips
  (``llm.extractive_about.clipped_terms``) in one look-up per part;
- ``TermIndex`` built from memoised ``term_keys`` meets a stem as ``_match`` does.
"""

from __future__ import annotations

import itertools

from llm.extractive_about import clipped_terms
from llm.extractive_code_names import MIN_CLIPPED_CHARS, beginnings
from llm.extractive_question import Question
from llm.extractive_words import (
    TermIndex,
    Words,
    _content_count,
    _match,
    folded_words,
    said_in_a_row,
    stems,
)
from llm.markdown_blocks import parse_passage


def _every_pair_run(asked: tuple[str, ...], text: str, min_content: int) -> int:
    """The longest qualifying run by the full dynamic programme over every pair of words
    (what ``said_in_a_row`` computed before it visited only the shared words)."""
    said = folded_words(text)
    best = 0
    previous = [0] * (len(said) + 1)
    for i, word in enumerate(asked):
        current = [0] * (len(said) + 1)
        for j, other in enumerate(said):
            if word == other:
                length = current[j + 1] = previous[j] + 1
                if length > best and _content_count(asked[i + 1 - length : i + 1]) >= min_content:
                    best = length
        previous = current
    return best


QUESTIONS = [
    "Where is the per-user config file?",
    "How do I set a value in the npm configuration from the command line?",
    "how do I set the the config file in the config file of npm",
    "What does the per-user config do when the config file is missing?",
]
TEXTS = [
    "The per-user config file (`~/.npmrc`) is read first; the global config file after it.",
    "Set a value in the npm configuration: `npm config set key=value`. Set a value in the file.",
    "config file config file the config file of npm, the the config file in the config",
    "Nothing the question says.",
    "",
]


def test_said_in_a_row_gives_the_run_of_the_full_programme() -> None:
    words = Words()
    for question, text in itertools.product(QUESTIONS, TEXTS):
        asked = folded_words(question)
        for min_content in (0, 1, 2, 3):
            expected = _every_pair_run(asked, text, min_content)
            assert said_in_a_row(asked, text, min_content) == expected, (question, text, min_content)
            assert words.said_in_a_row(asked, text, min_content) == expected, (question, text, min_content)
    # Of runs repeated in both texts, the longest: "the the config file in the config".
    assert said_in_a_row(folded_words(QUESTIONS[2]), TEXTS[2], 2) == 7


def test_blocks_are_parsed_once_and_handed_out_as_copies() -> None:
    words = Words()
    text = "Intro sentence here. Second one.\n\n- item one\n- item two\n\n```\ncode\n```"
    first = words.blocks(text, first_of_document=True)
    assert first == parse_passage(text, first_of_document=True)
    first[0].units.pop()  # a caller changing what it was given
    first.pop()
    again = words.blocks(text, first_of_document=True)
    assert again == parse_passage(text, first_of_document=True)
    assert all(a is not b for a, b in zip(first, again, strict=False))
    # Not the start of its document: the cut first sentence goes, as parse_passage says.
    cut = "continued from before. Then a sentence."
    assert words.blocks(cut, first_of_document=False) == parse_passage(cut, first_of_document=False)
    assert words.blocks(cut, first_of_document=True) == parse_passage(cut, first_of_document=True)


def test_terms_are_kept_per_question_and_read_afresh_after_replace() -> None:
    q = Question.of("What is agentchat?", Words())
    text = "The agent chat service answers from the knowledge base."
    before = q.terms(text)
    assert q.terms(text) is before  # kept, not read again
    apart = q.written_apart([text])
    assert apart is not q and apart.apart
    # The question changed by replace meets "agent chat" as its "agentchat"; the kept
    # terms of the first question do not leak into it.
    assert stems("agentchat") <= apart.terms(text)
    assert not stems("agentchat") <= before
    assert q.terms(text) == before


def test_beginnings_say_the_words_a_name_in_code_clips() -> None:
    question_stems = stems("authentication configuration repository max")
    table = beginnings(question_stems)
    for q in question_stems:
        for k in range(len(q) + 2):
            expected = frozenset(s for s in question_stems if len(s) > k and s.startswith(q[:k]))
            part = q[:k]
            assert table.get(part, frozenset()) == (expected if k >= MIN_CLIPPED_CHARS else frozenset()), part
    q = Question.of("How do I turn on authentication for the repository configuration?")
    assert clipped_terms(q, "`AGENT_AUTH` and `REPO_CONFIG` and `npm config`") == stems(
        "authentication repository configuration"
    )
    assert clipped_terms(q, "the auth config in prose") == frozenset()


def test_term_index_from_memoised_keys_meets_as_match_does() -> None:
    words = Words()
    vocabulary = stems(
        "configuration configure configured config disconnect reconnect reconnecting connect store stored "
        "dependencies dependency retries retry delete remove list show install installed uninstall "
        "authentication authenticate unpublish publish"
    )
    for terms in (vocabulary, frozenset(list(vocabulary)[:5]), frozenset({"conf"})):
        plain, memoised = TermIndex(terms), words.index(terms)
        for q in vocabulary | {"configur", "connecting", "remov", "dependenc", "zzzzz"}:
            assert plain.match(q) == _match(q, terms), (q, terms)
            assert memoised.match(q) == _match(q, terms), (q, terms)
