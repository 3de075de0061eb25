"""Offline answers (issue 20 item 4), round 50.

- A question's form ("how do I …", "what is …", "where …", a yes/no question) is read
  from the clause that asks it (``llm.extractive_forms.asking_clause``), not only from
  the message's first word: "I upgraded Node.js; how do I recompile my native add-ons?"
  was no how-to, so its answer quoted npm rebuild's description without the command
  (``with_synopsis`` adds a page's synopsis to a how-to's quote), and "Good evening.
  Where do I put my Gemini API key?" was read otherwise than the same question without
  the greeting.
- The sample KB says which statuses a finished run ends with, where it says what
  ``GET /v1/agent/runs/{run_id}`` returns (``storage.records.RunStatus``: ``completed``,
  ``failed``, ``cancelled`` are its endings): "Which statuses can a finished run end
  with?" (round11) was answered with that paragraph, which named none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.extractive_answer import compose
from llm.extractive_forms import asking_clause
from llm.extractive_question import Question
from tests.support.offline_answers import assert_clean, captured_passages, carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

PASSAGES = Path(__file__).parent / "data" / "extractive_round50_passages.json"
AFTER_A_STATEMENT = "I upgraded Node.js; how do I recompile my native add-ons?"


def test_a_questions_form_is_read_from_the_clause_that_asks_it() -> None:
    assert asking_clause(AFTER_A_STATEMENT) == "how do I recompile my native add-ons?"
    assert Question.of(AFTER_A_STATEMENT).how_to
    assert Question.of("Quick question: what is a bucket?").definition
    assert Question.of("In npm outdated's output, what are the columns?").enumeration
    greeted = Question.of("Good evening. Where do I put my Gemini API key?")
    assert greeted.asks == "where" and greeted.wants == Question.of("Where do I put my Gemini API key?").wants
    assert Question.of("I run three replicas. Can they share one database?").after_auxiliary[:1] == ("they",)
    # A message opening with its question word is read whole, as before.
    both = "How do I cancel a run, and what event do I get then?"
    assert asking_clause(both) == both
    # A statement without a question word asks nothing by its form.
    assert not Question.of("I upgraded Node.js, recompile my add-ons").how_to


def test_a_how_to_after_a_statement_shows_the_command() -> None:
    answer = compose(AFTER_A_STATEMENT, captured_passages(PASSAGES, AFTER_A_STATEMENT)).answer
    assert carries(answer, "npm rebuild"), answer
    assert "recompile all your C++ add-ons" in answer
    assert_clean(answer)


@pytest.mark.slow
async def test_the_sample_kb_names_a_finished_runs_statuses(tmp_path: Path) -> None:
    questions = [{"question": "Which statuses can a finished run end with?", "fact": "cancelled"}]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        (result,) = await ask(questions, None)
    assert carries(result["answer"], "cancelled") and carries(result["answer"], "completed"), result["answer"]
    assert_clean(result["answer"])
