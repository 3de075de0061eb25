"""Offline answers (issue 20 item 4), round 20 of the answerer: a reader's "each" is a
reference page's "every", and a second passage may come from another part of the page
already quoted when it answers nearly as well (never the chunk quoted, nor the one
continuing it); and a sentence opening with the negated case a question asks about
("If no … is provided, …") answers it. Tested on the passages the real search returned
(tests/data/extractive_round20_passages.json) and on small passages of their own; each
test fails without its change.
"""

from __future__ import annotations

from pathlib import Path

from llm.extractive_answer import Passage, compose_answer
from llm.extractive_question import Question
from tests.support.offline_answers import assert_clean, captured_passages, carries

CAPTURED = Path(__file__).resolve().parent / "data" / "extractive_round20_passages.json"


def test_each_meets_every() -> None:
    asked = Question.of("In what format is the data of each SSE event written?")
    assert asked.covers(asked.terms("Every event has `data: <compact JSON>`."), frozenset())[0] >= 0.5
    both = Question.of("What does every event carry?")
    assert both.words.match(next(iter(both.words.stems("every"))), both.words.stems("each")) == 1.0


def test_the_sentence_saying_every_event_answers_each_event() -> None:
    # Before: a row of the events table ("after each tool") said the question's "each"
    # and was quoted; "Every event has … `data: <compact JSON>`" did not.
    question = "In what format is the data of each SSE event written?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert carries(answer, "compact JSON"), answer
    assert sources[0] == "agentchat-sse-events#0", sources


def test_a_second_part_of_the_page_answers_too() -> None:
    # The knowledge-base page says both: its search section (scored first) and its
    # storage section ("kept in sync by triggers", "a float32 vector"), which used to be
    # left out because the second passage had to come from another page.
    for question, fact in (
        ("How does the full-text index stay in step with the documents?", "triggers"),
        ("In which number format is a chunk's vector stored?", "float32"),
    ):
        answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
        assert_clean(answer)
        assert carries(answer, fact), answer
        assert len(sources) == 2 and all(s.startswith("agentchat-knowledge-base#") for s in sources), sources


def test_the_chunk_continuing_the_first_passage_is_not_the_second() -> None:
    # developers#11 and #12 are one passage read on (#12 continues #11): one of them is
    # quoted, never both as two parts of the page; the second place stays package.json's
    # optionalDependencies.
    question = "How do I add a dependency my package can still work without if it fails to install?"
    answer, sources, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert carries(answer, "optionalDependencies"), answer
    assert not {"developers-4228d759#11", "developers-4228d759#12"} <= set(sources), sources
    assert sources[1] == "package-json-8d61b93e#45", sources


def _page(chunk: int, text: str, score: float = 0.5) -> Passage:
    return Passage(f"guide#{chunk}", "Guide", text, score)


def test_same_page_rules_on_small_passages() -> None:
    question = "How are the widgets stored and indexed?"
    first = _page(0, "Widgets are stored in one table and indexed by name.", 0.9)
    far = _page(4, "The widgets are stored compressed and indexed nightly.", 0.8)
    answer, sources, _ = compose_answer(question, [first, far])
    assert sources == ["guide#0", "guide#4"], answer  # another part of the page, as good
    assert_clean(answer)
    next_chunk = _page(1, "Widgets are stored compressed and indexed nightly.", 0.8)
    _, sources, _ = compose_answer(question, [first, next_chunk])
    assert sources == ["guide#0"], sources  # the chunk right after the first continues it
    weak = _page(4, "Widgets have a name.", 0.8)
    _, sources, _ = compose_answer(question, [first, weak])
    assert sources == ["guide#0"], sources  # well below the first: not a second answer


def test_a_sentence_opening_with_the_negated_case_answers_it() -> None:
    # Before: npm init's "If you want npm to use the latest version …" (its examples
    # list) was quoted; "If the initializer is omitted …, init will fall back to legacy
    # init behavior" shared the negation only as one more word.
    question = "What happens when npm init is run without an initializer?"
    answer, _, _ = compose_answer(question, captured_passages(CAPTURED, question))
    assert_clean(answer)
    assert carries(answer, "legacy init"), answer
    assert answer.startswith("If the initializer is omitted"), answer


def test_negated_condition_on_small_passages() -> None:
    question = "What happens if I run the tool without a config file?"
    aside = Passage("a#0", "Running", "The tool reads its config file without network access.", 0.6)
    case = Passage("b#0", "Defaults", "If no config file is found, the tool uses its defaults.", 0.6)
    _, sources, _ = compose_answer(question, [aside, case])
    assert sources[0] == "b#0", sources
