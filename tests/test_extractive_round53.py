"""Offline answers (issue 20 item 4), round 53: a newcomer's plain questions on the default
start, on passages the service's search returned for the sample knowledge base alone
(tests/data/extractive_round53_passages.json).

- A word after a causative verb's object ("make", "let") is a verb, so with a particle
  ending the question it is a phrasal verb as after "I" ("how do I log in"): "How do I
  make users log in?" quoted the Logs section ("writes its logs to stderr …", "user" on
  every line of a run) alone, where the JWT settings say "To require users to log in, set
  `AGENT_AUTH=jwt`"; they now follow it.
"""

from __future__ import annotations

import re
from pathlib import Path

from llm.extractive_answer import compose
from llm.extractive_question import Question
from llm.extractive_words import Words
from tests.support.offline_answers import assert_clean, captured_passages, carries

PASSAGES = Path(__file__).resolve().parent / "data" / "extractive_round53_passages.json"
_CITATION = re.compile(r"\[([^\]\s]+)\]")


def test_a_verb_after_a_causative_verbs_object_is_phrasal_with_its_particle() -> None:
    question = "How do I make users log in?"
    composed = compose(question, captured_passages(PASSAGES, question), Words())
    assert_clean(composed.answer)
    cited = _CITATION.findall(composed.answer)
    # The Logs section still leads (the search scored it 0.83, the JWT settings 0.26), but
    # "log" no longer counts there alone, so the JWT settings follow it.
    assert carries(composed.answer, "AGENT_AUTH=jwt"), composed.answer
    assert any(c.startswith("agentchat-authentication") for c in cited), composed.answer


def test_only_a_causative_verb_and_a_particle_ending_the_question_make_it_phrasal() -> None:
    assert Question.of("How do I make users log in?").phrasal == {"log": "in"}
    assert Question.of("How do I let people sign up?").phrasal == {"sign": "up"}
    # "have" takes no bare verb after its object; a particle not ending the question is a
    # preposition ("the logs in JSON").
    assert Question.of("How do I check which of my dependencies have newer versions out?").phrasal == {}
    assert Question.of("How do I make the logs in JSON smaller?").phrasal == {}
