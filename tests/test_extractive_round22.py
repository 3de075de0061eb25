"""Offline answers (issue 20 item 4), round 22 of the answerer: for a how-to, the
paragraph opening a setting's section (after its "Default: …" / "Type: …" properties,
under a heading saying a word of the question) names the setting to use, as a unit
naming it in code does: its quote carries the name as its label. Tested on the passages
the real search returned (tests/data/extractive_round22_passages.json) and on small
passages of their own.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round22_passages.json"


def test_the_setting_that_does_it_leads() -> None:
    # Before: the workspaces page's paragraphs on running commands (more of the
    # question's words, no setting that does it) led, and include-workspace-root,
    # 0.80 of the best, was left out.
    question = "How do I also run a command in the root project when using --workspaces?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert answer.startswith("**`include-workspace-root`:**"), answer
    assert carries(answer, "include-workspace-root"), answer


_SETTING = (
    "### Configuration\n\n#### `retry-count`\n\n* Default: 2\n* Type: Number\n\n"
    "How many times a failed download is tried again before the install gives up."
)
_GUIDE = "When a download fails, the install reports it; retry once the network is back."


def _passages() -> list[Passage]:
    return [Passage("tool#3", "tool", _SETTING, 0.9), Passage("guide#0", "Downloads", _GUIDE, 0.1)]


def test_a_how_to_saying_a_word_of_the_setting_is_answered_by_its_section() -> None:
    # The guide says every word of the question; the setting's paragraph names no
    # setting and says "failed", "download", "install", but its heading is the setting
    # to use: for a how-to it leads (without the signal the guide did, by 0.007).
    answer, sources, _ = compose_answer("How do I retry a download when the install fails?", _passages())
    assert_clean(answer)
    assert sources[0] == "tool#3", (sources, answer)
    assert answer.startswith("**`retry-count`:** How many times"), answer
