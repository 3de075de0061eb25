"""Offline answers (issue 20 item 3/4), round 17 of the answerer: the examples a question
gives (", like alpha or beta,", "such as 1.2.0-5") show what it means and are not words
an answer must say. Tested on the passages the real search returned for a round17
question (tests/data/extractive_round17_passages.json) and on small passages of its own;
each test fails without the rule. (Round 17's search-side change, the page-scoped read
of a page the question names as written, is tests/test_extractive_page_read.py's.)
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from tests.support.offline_answers import assert_clean, captured_passages

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round17_passages.json"


def test_the_examples_of_a_question_are_not_words_it_asks_for() -> None:
    asked = Question.of("How do I choose the identifier, like alpha or beta, used in a prerelease version?")
    assert {"alpha", "beta"}.isdisjoint(asked.stems) and {"identifier", "prereleas"} <= asked.stems
    assert "1.2.0" not in " ".join(Question.of("What does npm version patch do to a version such as 1.2.0-5?").stems)
    # "like" as a verb is a word of the question; only ", like …" gives an example.
    assert "configur" in Question.of("Which settings would I like to configure first?").stems
    # A question that is nothing but its example keeps its words.
    assert Question.of("Such as prerelease tags?").stems == Question.of("prerelease tags").stems


def test_an_example_the_question_goes_on_after_without_a_comma_is_left_in() -> None:
    # Where "such as npm ci" ends is unknown: taking it to the question mark dropped
    # every word the question asks about after it.
    asked = Question.of("Which tools such as npm ci fail when the lock file is out of date?").stems
    assert {"fail", "lock", "file"} <= asked, asked
    assert {"version", "exact"} <= Question.of("How do I pin a dependency such as lodash to one exact version?").stems
    # Closed by a comma, or the question's last few words, it is still an example.
    assert "registry" not in Question.of("How do I set a value, for example the registry, for one project?").stems
    assert "latest" not in Question.of("What happens to tags such as latest or next?").stems


def test_the_identifier_answers_not_the_sentence_saying_the_examples_on_the_captured_passages() -> None:
    question = "How do I choose the identifier, like alpha or beta, used in a prerelease version?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    first = answer.split("\n\n", 1)[0]
    assert "preid" in first and "prerelease identifier" in first, answer
    assert sources[0].startswith("npm-version")


def test_a_passage_saying_only_the_examples_gives_way() -> None:
    examples = Passage("streams#1", "streams", "Each stream of work can choose its own tag, e.g. alpha or beta.", 0.9)
    identifier = Passage(
        "semver#4", "semver", "The prerelease identifier is the label a version gets after its hyphen.", 0.6
    )
    answer, sources, _ = compose_answer(
        "How do I choose the identifier, like alpha or beta, of a prerelease?", [examples, identifier]
    )
    assert_clean(answer)
    assert sources[0] == "semver#4", answer
