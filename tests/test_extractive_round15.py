"""Offline answers (issue 20 item 3/4), round 15 of the answerer: a reader's phrasal verb
meets the one verb the documentation writes, and an identifier the question names is
met only where a text writes it whole. Each rule is tested on the passages the real
search returned for a round15 question (tests/data/extractive_round15_passages.json) or
on small passages of its own, and each test fails without its rule.

* "turn on" / "switch on" is "enable" and "turn off" / "switch off" is "disable", in the
  question and in the text alike (``_ONE_VERB``): a reader asks how to "turn on
  two-factor authentication", the page's item says "enable-2fa: Enables two-factor
  authentication" beside "disable-2fa: Disables two-factor authentication", which shares
  every other word. Without the rule the shorter "disable" item was quoted.
* An identifier written with underscores (``search_text``) is one name: its words are
  met only where a text writes it whole (``Question.split_names``). "``knowledge_base_search``
  searches … and returns … ``text``" says "search" and "text" but nothing about
  ``search_text``.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question, coverage, stems
from tests.support.offline_answers import assert_clean, captured_passages

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round15_passages.json"


def _captured(question: str) -> list[Passage]:
    return captured_passages(CAPTURED, question)


def test_turn_on_is_enable_on_the_captured_profile_page() -> None:
    question = "How do I turn on two-factor authentication for my npm account?"
    answer, sources, _ = compose_answer(question, _captured(question))
    assert_clean(answer)
    first = answer.split("\n\n", 1)[0]
    assert "enable-2fa" in first and "disable-2fa" not in first, answer
    assert sources[0].startswith("npm-profile-")


def test_a_phrasal_verb_reads_as_its_one_verb_both_ways() -> None:
    assert stems("turn on the cache") == stems("enable the cache")
    assert stems("Switching off the logs") == stems("disable the logs")
    # "stop" and "disable" are one action (SYNONYMS): "turn off logs" meets "stop … logs".
    assert coverage(stems("stop logs"), stems("To turn off logs completely set --logs-max=0.")) == 1.0
    # A particle that is no verb's stays a word apart: "on" is a stop word, "turn" a word.
    assert "turn" in stems("Take a turn at the top")


def test_turn_off_meets_disable_and_not_enable() -> None:
    passages = [
        Passage(
            "profile#1",
            "profile",
            "* `enable-cache`: Enables the shared cache for every project on the machine.\n"
            "* `disable-cache`: Disables the shared cache for every project.",
            0.7,
        )
    ]
    answer, _, _ = compose_answer("How do I turn off the shared cache?", passages)
    assert_clean(answer)
    assert "disable-cache" in answer and "enable-cache`:" not in answer, answer
    answer, _, _ = compose_answer("How do I switch on the shared cache?", passages)
    assert "enable-cache" in answer and "disable-cache" not in answer, answer


def test_an_identifier_is_met_only_where_it_is_written_whole() -> None:
    passages = [
        Passage(
            "tools#0",
            "The RAG tools",
            "## knowledge_base_search\n\n"
            "`knowledge_base_search(query, top_k=5)` searches the internal knowledge base and "
            "returns chunks, each with a title and the text of the chunk.",
            0.6,
        ),
        Passage(
            "tools#2",
            "The RAG tools",
            "## Search tools for large corpora\n\n"
            "- `search_text(bucket, query, top_k=10)`: keyword search (BM25) within a bucket.\n"
            "- `search_semantic(bucket, query, top_k=10)`: vector search within a bucket.",
            0.4,
        ),
    ]
    answer, sources, _ = compose_answer("What kind of search does search_text run?", passages)
    assert_clean(answer)
    assert sources[0] == "tools#2" and "BM25" in answer, answer
    q = Question.of("What kind of search does search_text run?")
    # "search" is also asked apart from the name: a text without the name keeps it.
    assert q.split_names("searches the knowledge base and returns the text") == stems("text")
    assert q.split_names("`search_text(bucket, query)`") == frozenset()


def test_an_identifier_inside_a_longer_one_is_not_it() -> None:
    q = Question.of("What does top_k set?")
    assert q.split_names("AGENT_RAG_TOP_K (default 6)") == stems("top k")
    assert q.split_names("search_text(bucket, query, top_k=10)") == frozenset()
