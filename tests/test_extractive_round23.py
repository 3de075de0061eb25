"""Offline answers (issue 20 item 4), round 23 of the answerer: a word of the question
that the passages write apart as two words ("agentchat" / "the agent chat service") is
met by those two words side by side, in a unit and in a page's title, as the knowledge
search splits such a word. Tested on the passages the real search returned
(tests/data/extractive_round23_passages.json) and on small passages of their own.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round23_passages.json"


def test_a_name_the_pages_write_apart_names_the_page_that_defines_it() -> None:
    # Before: three chunks of the CLI page ("`agentchat docs list` …", "filled with
    # `agentchat ingest`") said the word as the question writes it and led; the
    # overview, titled "What the agent chat service is", was never named by the question.
    question = "What is agentchat?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert answer.startswith("The agent chat service is an asynchronous Python service"), answer
    assert carries(answer, "asynchronous Python service") and sources[0] == "agentchat-overview#0", sources


_TOOL = "# The rowcount tool\n\n`rowcount ingest` adds files; `rowcount list` lists them."
_OVERVIEW = "# Row count\n\nRow count is a service counting the rows of uploaded tables."


def test_a_joined_word_meets_its_parts_side_by_side_only() -> None:
    passages = [
        Passage("tool#0", "The rowcount tool", _TOOL, 0.9),
        Passage("overview#0", "Row count", _OVERVIEW, 0.3),
    ]
    answer, sources, _ = compose_answer("What is rowcount?", passages)
    assert_clean(answer)
    assert sources[0] == "overview#0" and answer.startswith("Row count is a service"), answer
    question = Question.of("What is rowcount?").written_apart([_OVERVIEW])
    assert question.apart == {("row", "count"): "rowcount"}
    assert "rowcount" in question.terms("a row count service")
    assert "rowcount" not in question.terms("a count of each row")  # apart, but not side by side
    # Parts too short to be words of their own are no split ("a" + "gentchat").
    assert Question.of("What is rowcount?").written_apart(["ro wcount"]).apart == {}
