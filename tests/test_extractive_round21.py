"""Offline answers (issue 20 item 4), round 21 of the answerer: another part of the page
already quoted joins the answer, even when it scores well under the first, if it says
every word of the question the answer has not said yet. Tested on the passages the real
search returned (tests/data/extractive_round21_passages.json) and on small passages of
their own.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round21_passages.json"


def test_the_part_of_the_page_naming_the_variables_joins_the_opening() -> None:
    # Before: only the configuration page's opening ("configured through environment
    # variables"), its item naming AGENT_DB_PATH and AGENT_DATABASE_URL 0.73 of it,
    # under the 0.85 a second part of the same page needed.
    question = "What environment variables configure the database?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert carries(answer, "AGENT_DATABASE_URL") and carries(answer, "AGENT_DB_PATH"), answer
    assert len(sources) == 2 and all(s.startswith("agentchat-configuration#") for s in sources), sources


def _page(position: int, text: str, score: float) -> Passage:
    return Passage(f"guide#{position}", "Guide", text, score)


def test_a_part_adding_nothing_the_answer_lacks_still_needs_to_answer_nearly_as_well() -> None:
    # Both parts of the page say "cache"; the second says no word of the question the
    # first has not said, so at well under the first's score it stays out.
    first = _page(0, "The cache folder keeps downloaded packages so that the next install reads them locally.", 0.9)
    other = _page(5, "A cache entry is checked against its integrity hash when it is read.", 0.5)
    answer, sources, _ = compose_answer("Where does the cache folder keep downloaded packages?", [first, other])
    assert sources == ["guide#0"], (sources, answer)


def test_a_part_saying_the_rest_of_the_question_joins() -> None:
    # The item scores 0.75 of the opening, under the 0.85 another part of the same page
    # needs, but says "database", the word of the question the opening does not.
    title = "Configuration variables"
    opening = Passage(
        "conf#0", title, "# Configuration variables\n\nThe service is configured through environment variables.", 0.5
    )
    storage = "## Storage\n\n- `APP_STORE_URL`: the database everything is written to.\n- `APP_LOG`: logs."
    items = Passage("conf#3", title, storage, 0.6)
    answer, sources, _ = compose_answer("What environment variables configure the database?", [opening, items])
    assert_clean(answer)
    assert sources == ["conf#0", "conf#3"], (sources, answer)
