"""Issue 20 item 4, round 24: a section whose heading asks the question's own question
answers it.

"Where is my data stored?" (the walkthrough set) was answered by "Buckets and typed
metadata" ("typed fields … stored as real indexed columns") and a checkpoint section
("… stored as one write each"): the section that answers, "Where data lives" ("Everything
durable lands in one database …"), never says "stored", and its heading, which opens with
the question's own "where" and says its "data", counted for nothing more than any
heading word. A heading opening with the question's word of place, time, party, choice
or reason is the section answering it (``llm.extractive_signals.asked_by_heading``).
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from llm.extractive_signals import asked_by_heading
from llm.extractive_words import Words
from tests.support.offline_answers import assert_clean, captured_passages, carries

PASSAGES = Path(__file__).parent / "data" / "extractive_round24_passages.json"


def test_the_walkthrough_question_leads_with_the_section_its_heading_asks() -> None:
    question = "Where is my data stored?"
    answer, sources, _ = compose_answer(question, captured_passages(PASSAGES, question))
    assert answer.startswith("**Where data lives.** Everything durable lands in one database"), answer
    assert sources[0] == "agentchat-overview#2" and carries(answer, "one database")
    assert_clean(answer)


def test_a_heading_asks_the_question_only_with_the_questions_own_word() -> None:
    words = Words()
    where = Question.of("Where is my data stored?", words)
    assert asked_by_heading(where, "Where data lives", words) == 0.5  # says "data", not "stored"
    assert asked_by_heading(where, "How data is kept", words) == 0.0  # another question's word
    assert asked_by_heading(where, "Data and where it lives", words) == 0.0  # not opening with it
    how = Question.of("How do I store data?", words)
    assert asked_by_heading(how, "How data is stored", words) == 0.0  # "how" opens how-tos too


def test_small_passages() -> None:
    passages = [
        Passage("kb#3", "Knowledge base", "## Buckets\n\nTyped fields are stored as real indexed columns.", 0.5),
        Passage("ov#2", "Overview", "## Where data lives\n\nEverything durable lands in one database file.", 0.4),
    ]
    answer, _, _ = compose_answer("Where is my data stored?", passages)
    assert answer.startswith("**Where data lives.** Everything durable lands in one database file."), answer
