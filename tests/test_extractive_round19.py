"""Offline answers (issue 20 item 4), round 19 of the answerer: what counts as the
amount "how long / how much time …" asks for ("20 s" with its unit's symbol, not
"HTTP 204 on reconnect"), and the answerer's word memo owned by the provider instead of
module-level caches. Tested on the passages the real search returned
(tests/data/extractive_round19_passages.json) and on small passages of their own; each
test fails without its change.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import llm
from llm.extractive import ExtractiveProvider
from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from llm.extractive_words import MEET_MEMO, STEM_MEMO, TEXT_MEMO, Words
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round19_passages.json"


def test_a_unit_symbol_states_an_amount_and_a_status_code_does_not() -> None:
    asked = Question.of("How much time do runs that are still going get to finish when I stop the server?")
    assert asked.holds_wanted("lets live runs go on for the grace period (`--grace` or `AGENT_SHUTDOWN_GRACE_S`, 20 s)")
    assert asked.holds_wanted("An attachment may be at most `AGENT_ATTACHMENT_MAX_BYTES` (5 MiB).")
    assert asked.holds_wanted("its event-loop lag stays above `AGENT_MAX_LOOP_LAG_MS` (250 ms)")
    assert asked.holds_wanted("chunks of about 800 characters")  # a number and its unit in words, as before
    # A number followed by a function word counts nothing: a status code.
    assert not asked.holds_wanted("A finished run answers HTTP 204 on reconnect so the browser stops retrying.")
    assert not asked.holds_wanted("A response that is not HTTP 200 with the `text/event-stream` content type stops it.")


def test_the_grace_period_answers_how_much_time_runs_get_at_a_stop() -> None:
    # Before: "20 s" was no amount (one letter after the number) while "HTTP 204 on
    # reconnect" was one, so the troubleshooting paragraph about a browser that "stops"
    # after a "finished" run was quoted instead of the SIGTERM paragraph.
    question = "How much time do runs that are still going get to finish when I stop the server?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert "AGENT_SHUTDOWN_GRACE_S" in answer.split("\n\n", 1)[0], answer
    assert sources[0] == "agentchat-durable-runs#4", sources
    for question, fact in (
        ("How big a file can I attach to a conversation?", "5 MiB"),
        ("How large are the knowledge base chunks?", "800 characters"),
    ):
        answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
        assert_clean(answer)
        assert carries(answer, fact), answer


def test_a_stated_amount_wins_over_a_status_code_on_small_passages() -> None:
    status = Passage("troubleshooting#1", "Troubleshooting", "A finished run answers HTTP 204 on reconnect.", 0.9)
    grace = Passage("restarts#4", "Restarts", "Finished runs go on for the grace period (20 s).", 0.5)
    answer, sources, _ = compose_answer("How much time do finished runs get?", [status, grace])
    assert_clean(answer)
    assert sources[0] == "restarts#4", answer


def _answerer_modules() -> list[object]:
    return [
        importlib.import_module(f"llm.{m.name}")
        for m in pkgutil.iter_modules(llm.__path__)
        if m.name.startswith("extractive")
    ]


def test_no_answerer_module_keeps_a_memo_of_its_own() -> None:
    # The project keeps no module-level mutable state: the word memo is an object the
    # provider owns (built with it in the app factory), not a module's functools cache.
    modules = _answerer_modules()
    assert len(modules) >= 10
    for module in modules:
        for name, value in vars(module).items():
            assert not hasattr(value, "cache_info"), f"{module.__name__}.{name} is a module-level memo"


def test_the_provider_owns_a_bounded_memo_its_answers_share() -> None:
    one, two = ExtractiveProvider(), ExtractiveProvider()
    assert isinstance(one._words, Words) and one._words is not two._words
    words = one._words
    assert words.stem.cache_parameters()["maxsize"] == STEM_MEMO  # type: ignore[attr-defined]
    assert words.meets.cache_parameters()["maxsize"] == MEET_MEMO  # type: ignore[attr-defined]
    assert words.stems.cache_parameters()["maxsize"] == TEXT_MEMO  # type: ignore[attr-defined]
    question = "How big a file can I attach to a conversation?"
    passages = captured_passages(CAPTURED, question)
    fresh = compose_answer(question, passages)  # its own memo, dropped with the answer
    assert compose_answer(question, passages, words) == fresh
    first = words.stem.cache_info()  # type: ignore[attr-defined]
    assert first.currsize > 0
    # The same answer again reads the same words: met from the memo, nothing new stemmed.
    assert compose_answer(question, passages, words) == fresh
    again = words.stem.cache_info()  # type: ignore[attr-defined]
    assert again.misses == first.misses and again.hits > first.hits
    assert two._words.stem.cache_info().currsize == 0  # type: ignore[attr-defined]
