"""Offline answers (issue 20 item 4), round 49.

- A definition question whose subject's qualifying word no passage says ("What is the
  zebra launch code?") asks about a thing the knowledge base does not hold: it was
  answered with the list of error codes, which says "code" only. It is declined, naming
  it (``llm.extractive_subject._qualifiers``); the head may still be the reader's own
  word ("the retention window"), and a word that ranks or judges ("the recommended
  database") qualifies nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.extractive import not_found_message
from llm.extractive_answer import Passage, compose
from llm.extractive_words import Words
from tests.support.offline_answers import carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

CODES = Passage(
    "errors#4",
    "Limits and errors",
    "**Error codes by status.** The other codes before a stream starts are 401 `unauthenticated`, "
    "403 `forbidden` and 429 `rate_limited`; each error code names what went wrong.",
    0.5,
)
RETENTION = Passage(
    "conversations#6",
    "Conversations",
    "`AGENT_CONVERSATION_RETENTION_DAYS` deletes conversations idle longer than that many days.",
    0.5,
)


def test_a_definition_whose_qualifier_no_passage_says_is_declined() -> None:
    words = Words()
    for question, name in [
        ("What is the zebra launch code?", "zebra launch code"),
        ("What is the launch code?", "launch code"),
        ("What are the zebra error codes?", "zebra error codes"),
        ("What's the zebra launch code?", "zebra launch code"),  # "what's" is "what is"
    ]:
        composed = compose(question, [CODES, RETENTION], words)
        assert composed.answer == "" and composed.unmentioned == (name,), (question, composed)
    # Every qualifier said: answered, whatever the head is called.
    for question, fact in [
        ("What is the error code?", "unauthenticated"),
        ("What\u2019s the error code?", "unauthenticated"),
        ("What are the status codes?", "unauthenticated"),
        ("What is the conversation retention window?", "AGENT_CONVERSATION_RETENTION_DAYS"),
        # A judging word qualifies nothing; a subject running on into what is asked of it
        # ("… tell the model?") is no noun phrase to qualify.
        ("What is the recommended error code?", "unauthenticated"),
        ("What does the error code tell the client?", "unauthenticated"),
    ]:
        composed = compose(question, [CODES, RETENTION], words)
        assert composed.unmentioned == () and carries(composed.answer, fact), (question, composed)


@pytest.mark.slow
async def test_the_default_service_declines_the_zebra_launch_code(tmp_path: Path) -> None:
    """Found by a walkthrough of the default service (the sample KB alone)."""
    questions = [
        {"question": "What is the zebra launch code?", "fact": ""},
        {"question": "What are the error codes?", "fact": ""},
    ]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        zebra, codes = await ask(questions, None)
    assert zebra["answer"] == not_found_message(("zebra launch code",)) and zebra["sources"] == [], zebra
    assert carries(codes["answer"], "provider_timeout") and codes["sources"], codes
