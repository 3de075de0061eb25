"""Issue 20 item 4, round 26: two rules of the offline answerer's choice of sentence,
each gaining later-written questions it missed with the fact among its passages.

* A unit saying a run of the question's own words in a row, function words included
  (three content words or more), says what the question says: "where is the per-user
  config file?" is the npmrc page's "per-user config file (`~/.npmrc`)", and "how do I
  set a value in the npm configuration from the command line?" npm set's summary "Set a
  value in the npm configuration" (``llm.extractive_signals.run_bonus``).
* A yes/no question is answered by a sentence about its subject: "can an unscoped
  package be made private?" is "Unscoped packages are *always public*", not "To publish
  a private scoped package …" (``llm.extractive_about.says_of_subject``).

Tested on the passages the real search returned (tests/data/extractive_round26_passages.json)
and on small passages of their own.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_about import says_of_subject
from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from llm.extractive_signals import MIN_RUN_WORDS, RUN_WEIGHT, run_bonus
from llm.extractive_words import folded_words, said_in_a_row
from tests.support.offline_answers import assert_clean, captured_passages, carries

PASSAGES = Path(__file__).parent / "data" / "extractive_round26_passages.json"


def test_the_per_user_config_file_is_the_list_item_saying_it_in_a_row() -> None:
    # Before: the config page's list ("per-user configuration file (defaults to
    # `$HOME/.npmrc` …)") was the second passage; the npmrc page's own list, whose item
    # says "per-user config file" as the question does, was not quoted.
    question = "Where is the per-user config file?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert_clean(answer)
    assert carries(answer, "~/.npmrc"), answer
    assert "* per-user config file (`~/.npmrc`)" in answer and "npmrc-9f36123a#0" in sources, answer


def test_setting_a_value_from_the_command_line_shows_npm_set() -> None:
    # Before: two units holding the question's words here and there ("… can be set via
    # command line flags …", "Command line switches: Set a config with `--key val`").
    question = "How do I set a value in the npm configuration from the command line?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert_clean(answer)
    assert carries(answer, "npm set <key>=<value>"), answer
    assert "npm-set-4cc523a6#0" in sources, sources


def test_a_yes_no_question_is_answered_by_a_sentence_about_its_subject() -> None:
    # Before: "To publish a private scoped package to the npm registry, you must have an
    # npm Private Modules account." led, and "always public" was not said.
    question = "Can an unscoped package be made private?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert_clean(answer)
    assert carries(answer, "always public"), answer
    assert "To publish a private scoped package" not in answer and "npm-access-fce30b8a#1" in sources, answer


def test_a_run_is_the_questions_words_in_a_row_with_three_content_words() -> None:
    asked = folded_words("Where is the per-user config file?")
    assert said_in_a_row(asked, "* per-user config file (`~/.npmrc`)", 3) == 4
    assert said_in_a_row(asked, "the config file of each user", 3) == 0  # its words, not in a row
    remove = folded_words("How do I remove a package from my project?")
    # "remove a package from" is four words in a row but holds two content words only.
    assert said_in_a_row(remove, "Remove a package from the registry.", 3) == 0
    assert said_in_a_row(remove, "Remove a package from the registry.", 2) == 4
    question = Question.of("How do I set a value in the npm configuration from the command line?")
    assert question.said_in_a_row("Set a value in the npm configuration") == 7
    assert run_bonus(question, "Set a value in the npm configuration") == RUN_WEIGHT * (7 - MIN_RUN_WORDS + 1)
    assert run_bonus(question, "A value can be set in the configuration from the npm command line") == 0.0


def test_the_subject_is_what_the_question_opens_with() -> None:
    private = Question.of("Can an unscoped package be made private?")
    assert private.after_auxiliary[:2] == ("unscoped", "package")
    assert says_of_subject(private, "Unscoped packages are *always public*.")
    assert says_of_subject(private, "Unscoped packages cannot be set to `restricted`.")
    assert not says_of_subject(private, "To publish a private scoped package, you need an account.")
    assert not says_of_subject(private, "Scoped packages are private by default.")  # another subject
    # "npm" alone is the subject of "Does npm send …?": "The npm registry" is another thing.
    send = Question.of("Does npm send any information about me to the registry?")
    assert not says_of_subject(send, "The npm registry does not try to correlate the information.")
    # Only a yes/no question has a subject to open with.
    assert not says_of_subject(Question.of("Why are unscoped packages public?"), "Unscoped packages are public.")


def test_small_passages_yes_no() -> None:
    passages = [
        Passage("publish#0", "Publishing", "To publish a private scoped package, you need a paid account.", 0.6),
        Passage("access#1", "Access", "Unscoped packages are always public.", 0.4),
    ]
    answer, _, _ = compose_answer("Can an unscoped package be made private?", passages)
    assert_clean(answer)
    assert answer.startswith("Unscoped packages are always public."), answer


def test_small_passages_said_in_a_row() -> None:
    passages = [
        Passage("flags#1", "Flags", "From the command line, the npm configuration takes a value set as a flag.", 1.0),
        Passage(
            "set#0", "Set", "To set a value in the npm configuration from the command line, give it as a flag.", 0.1
        ),
    ]
    answer, _, _ = compose_answer("How do I set a value in the npm configuration from the command line?", passages)
    assert_clean(answer)
    assert answer.startswith("To set a value in the npm configuration from the command line"), answer
