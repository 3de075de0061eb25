"""Offline answers: a question to the assistant itself ("What can you do?") is answered
with what it can do, as a greeting is (``llm/extractive_greeting.py``). A newcomer's
first question to ``make run`` is often that one; it was searched as a question and
answered "I could not find an answer to that in the knowledge base. Try rephrasing ...",
a dead end on the first try. A question about something else that starts the same way
("What can you do with buckets?") is still searched, and a thanks for the help is still
a thanks."""

from __future__ import annotations

import pytest

from llm.extractive_greeting import (
    GREETING_REPLY,
    NOT_HELPED_REPLY,
    SAMPLE_KB_GREETING_REPLY,
    THANKS_REPLY,
    greeting_reply,
)

ABOUT_THE_ASSISTANT = [
    "What can you do?",
    "what can you do",
    "Hi! What can you do?",
    "Who are you?",
    "What can I ask?",
    "How can you help me?",
    "What can you help with?",
]
#: Questions that begin like one but ask about something: searched as ever.
QUESTIONS = [
    "What can you do with buckets?",
    "How can you help me cancel a run?",
    "What can I ask the reference backend?",
    "Who are you logged in as on the backend?",
]


@pytest.mark.parametrize("message", ABOUT_THE_ASSISTANT)
def test_a_question_to_the_assistant_is_answered_with_what_it_does(message: str) -> None:
    assert greeting_reply(message, sample_kb=True) == SAMPLE_KB_GREETING_REPLY
    assert greeting_reply(message) == GREETING_REPLY


@pytest.mark.parametrize("message", QUESTIONS)
def test_a_question_about_something_else_is_searched(message: str) -> None:
    assert greeting_reply(message, sample_kb=True) is None


def test_a_thanks_for_the_help_is_still_a_thanks() -> None:
    assert greeting_reply("thanks for the help") == THANKS_REPLY
    assert greeting_reply("thanks for the help :(") == NOT_HELPED_REPLY
