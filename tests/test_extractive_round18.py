"""Offline answers (issue 20 item 4), round 18 of the answerer: the question's words
weighed by their rarity among the passages being answered from, a duration written in
words ("a day") as the amount "how long" asks for, and "turn on" read as the action it
is. Tested on the passages the real search returned (tests/data/extractive_round18_passages.json)
and on small passages of their own; each test fails without its rule.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import RARITY_WEIGHT, Question
from llm.extractive_words import stems
from tests.support.offline_answers import assert_clean, captured_passages

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round18_passages.json"


def test_a_word_fewer_passages_say_weighs_more() -> None:
    asked = Question.of("Which model names does the OpenAI-compatible face list?")
    said = [
        stems("The OpenAI-compatible face sends chunks."),
        stems("The OpenAI-compatible face lists one model per context."),
        stems("The AI SDK face and the OpenAI-compatible face share runs."),
    ]
    weighed = asked.weighed_by(said).rarity
    assert weighed["face"] == 1.0  # every passage says it: it tells none apart
    assert weighed["model"] == weighed["list"] == 1.0 + RARITY_WEIGHT * (1 - 1 / 3)
    assert "name" not in weighed  # no passage says it: it keeps its weight
    assert asked.weighed_by(said[:1]).rarity == {}  # one passage: nothing to tell apart


def test_the_rarer_words_choose_the_unit_on_the_captured_passages() -> None:
    # Every passage is about the OpenAI-compatible face; the approvals page's "the
    # OpenAI-compatible face ends with an `approval_required` error" shared as many of
    # the question's words as GET /v1/models' line, which says the rarer "model" and "list".
    question = "Which model names does the OpenAI-compatible face list?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert "agentchat-workflow" in answer, answer
    question = "How do I refer to a team when changing its members?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert "@org:newteam" in answer, answer


def test_turn_on_is_the_action_of_a_how_to() -> None:
    # "on" opens a how-to's circumstances ("… on the registry"), but after "turn" it is
    # the verb's: the action is to enable, and it counts as the action does.
    asked = Question.of("How do I turn on two-factor authentication for my npm account?")
    assert {"enabl", "authentic"} <= asked.action and "account" not in asked.action
    assert "registry" not in Question.of("How do I change my password on the registry?").action
    # With the rarity weights, npm profile's enable-2fa still answers (npm trust's "2FA
    # enabled on account" says the rarer "account").
    question = "How do I turn on two-factor authentication for my npm account?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert "enable-2fa" in answer.split("\n\n", 1)[0], answer


def test_a_duration_in_words_is_what_how_long_asks_for() -> None:
    asked = Question.of("How long does a tool call wait for a person's approval before the run ends?")
    assert asked.holds_wanted("An approval not decided within the TTL (a day by default) ends the run.")
    assert asked.holds_wanted("It waits half an hour.")
    assert not asked.holds_wanted("A call of a tool that needs approval is not run when the model asks for it.")
    question = "How long does a tool call wait for a person's approval before the run ends?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert "AGENT_APPROVAL_TTL_S" in answer.split("\n\n", 1)[0], answer


def test_a_unit_saying_how_long_gives_way_to_none() -> None:
    waits = Passage(
        "approvals#0", "Approvals", "A tool call waits for the approval of a person before the run goes on.", 0.9
    )
    expiry = Passage("approvals#3", "Approvals", "A tool call waits a day at most for its approval.", 0.6)
    answer, sources, _ = compose_answer("How long does a tool call wait for approval?", [waits, expiry])
    assert_clean(answer)
    assert sources[0] == "approvals#3", answer


def test_a_paragraph_under_an_item_that_is_only_a_name_keeps_the_name() -> None:
    text = (
        "* `npm pkg delete <key>`\n\nDeletes a `key` from your `package.json`.\n\n"
        "* `npm pkg fix`\n\nAuto corrects common errors in your `package.json`. npm already does this during publish."
    )
    page = Passage("npm-pkg#5", "npm-pkg", text, 0.8)
    answer, _, _ = compose_answer("How do I automatically correct common mistakes in my package.json?", [page])
    assert_clean(answer)
    assert answer.startswith("**`npm pkg fix`:** Auto corrects common errors"), answer
    # After a list of several names the paragraph is not the last name's.
    files = Passage(
        "ignore#2",
        "developers",
        "Some files are always ignored:\n\n* `.npmrc`\n* `npm-debug.log`\n\n"
        "Additionally, everything in `node_modules` is ignored when packing a package.",
        0.8,
    )
    answer, _, _ = compose_answer("Is everything in node_modules ignored when packing?", [files])
    assert "npm-debug.log`:**" not in answer and "everything in `node_modules` is ignored" in answer, answer
