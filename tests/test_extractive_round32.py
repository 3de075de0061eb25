"""Offline answers (issue 20 item 4), round 32: three first-contact questions a newcomer
asked the default service and read wrong. "Where does the service keep its data?" was
answered with the SSE heartbeat paragraph (no sentence of the overview's "Where data
lives" said "keep"), "How can I pick up an answer again after my connection dropped?"
with the outbound-connection pools (the search never found durable runs' "resume"), and
"How do I put my own files into the knowledge base?" opened with an FAQ answer's bare
"Yes." (``llm.extractive_quote.without_answer_word``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from knowledge.query_terms import related_terms
from knowledge.word_forms import reader_terms
from llm.extractive_answer import Passage, compose
from llm.extractive_quote import asks_yes_no
from llm.extractive_words import Words
from tests.support.offline_answers import carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: The three questions, each with the fact its answer must carry.
FIRST_CONTACT = [
    ("Where does the service keep its data?", "AGENT_DB_PATH"),
    ("How can I pick up an answer again after my connection dropped?", "Last-Event-ID"),
    ("How do I put my own files into the knowledge base?", "agentchat ingest"),
]
#: A paragraph of the answer opening with a bare yes or no.
_OPENS_WITH_ANSWER_WORD = re.compile(r"^(?:\*\*|__)?(?:yes|no)\b", re.IGNORECASE | re.MULTILINE)


@pytest.mark.slow
async def test_first_contact_questions_carry_their_facts(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": f} for q, f in FIRST_CONTACT]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    for question, fact in FIRST_CONTACT:
        answer = results[question]["answer"]
        assert carries(answer, fact), (question, answer)
        assert _OPENS_WITH_ANSWER_WORD.search(answer) is None, (question, answer)


def _faq(text: str) -> list[Passage]:
    return [
        Passage("scaling#0", "PostgreSQL and replicas", text, 0.7, section="PostgreSQL and replicas › PostgreSQL"),
        Passage("ingest#1", "Filling the knowledge base", "Files are read by the ingest command.", 0.3),
    ]


def test_a_bare_answer_word_is_quoted_only_for_a_yes_no_question() -> None:
    words = Words()
    faq = _faq(
        "Yes. By default everything durable lives in one SQLite file, which is right for one machine. "
        "Set the database URL to put every store on PostgreSQL instead."
    )
    how = compose("How do I put every store on PostgreSQL?", faq, words).answer
    assert how.startswith("By default everything durable lives in one SQLite file"), how
    asked = compose("Can I put every store on PostgreSQL?", faq, words).answer
    assert asked.startswith("Yes. By default"), asked
    # "No," before a clause: the clause stands alone, with its capital.
    comma = compose("How do I put every store on PostgreSQL?", _faq("No, every store can be put on PostgreSQL."), words)
    assert comma.answer.startswith("Every store can be put on PostgreSQL."), comma.answer
    # A word that only begins like one is no answer word.
    kept = compose("How do I put every store on PostgreSQL?", _faq("Nobody has to put every store on PostgreSQL."))
    assert kept.answer.startswith("Nobody has to"), kept.answer


def test_which_questions_ask_for_a_yes_or_no() -> None:
    assert asks_yes_no("Can I use PostgreSQL?")
    assert asks_yes_no("Is there a limit on uploads?")
    assert asks_yes_no("On my Mac, does the service run?")
    assert not asks_yes_no("How do I put my own files into the knowledge base?")
    assert not asks_yes_no("Where does the service keep its data?")
    assert not asks_yes_no("Which events does a run send?")


def test_a_readers_pick_up_is_searched_as_resume() -> None:
    assert reader_terms("How can I pick up an answer again after my connection dropped?") == {"resume": "pick"}
    assert related_terms("Can I pick up where I left off?")["resume"] == "pick"
    # A name is no phrasal verb; a pick-up truck picks nothing up.
    assert "resume" not in reader_terms("the pick-up truck")
    assert "resume" not in reader_terms("pick the up-to-date version")


def test_what_a_reader_asks_the_service_to_keep_is_what_it_stores_or_holds() -> None:
    passages = [
        Passage("sse#3", "SSE events", "Clients tell the two apart by the presence of `data` in the event.", 0.45),
        Passage(
            "overview#2",
            "What the agent chat service is",
            "Everything durable lands in one SQLite file named by `AGENT_DB_PATH`. "
            "It holds conversations, runs and the knowledge base.",
            0.67,
            section="What the agent chat service is › Where data lives",
        ),
    ]
    answer = compose("Where does the service keep its data?", passages).answer
    assert "AGENT_DB_PATH" in answer.split("\n\n")[0], answer


def test_a_closed_question_without_an_auxiliary_first_keeps_the_answer_word() -> None:
    """Review of f715e61: only an auxiliary opening the question or a clause after a
    comma counted, so a yes/no question set after a sentence, a greeting or a dash, a
    "can't", or one phrased without an auxiliary lost the FAQ's "No." it asks for."""
    no = _faq("No. The service needs a database for its runs; set the database URL to use PostgreSQL instead.")
    for question in [
        "I run three replicas. Can I run every store without a database?",
        "Hi! Is it possible to run every store without a database?",
        "Quick question - can I run every store without a database?",
        "Can't I run every store without a database?",
        "Any way to run every store without a database?",
        "Possible to run every store without a database?",
    ]:
        assert asks_yes_no(question), question
        answer = compose(question, no).answer
        assert answer.startswith("No. The service needs a database"), (question, answer)
    # A plainly open question still loses the word, even after a sentence of its setting.
    assert not asks_yes_no("I run three replicas. How do I put every store on PostgreSQL?")
    assert not asks_yes_no("Which store, and where does it live?")


def test_a_pick_up_that_resumes_nothing_is_not_read_as_resume() -> None:
    """Review of f715e61: every "pick up" was "resume", searched and read so, so "Which
    settings does the service pick up at start?" was answered with durable runs' resume
    paragraph, where nothing was quoted before. Only "pick up … again" and "pick up
    where …" resume."""
    for question in [
        "Which settings does the service pick up at start?",
        "Does the worker pick up tools file changes?",
    ]:
        assert "resume" not in reader_terms(question), question
    assert reader_terms("Can I pick up from where the stream stopped?") == {"resume": "pick"}
    passages = [
        Passage(
            "runs#1",
            "Durable runs",
            "To resume a run's stream after a reload, send the Last-Event-ID header: the events after it come again.",
            0.5,
            section="Durable runs › Resuming",
        ),
        Passage(
            "auth#0", "Authentication", "Your API key is shown once, on the account page, when you create it.", 0.5
        ),
    ]
    answer = compose("Which settings does the service pick up at start?", passages).answer
    assert "Last-Event-ID" not in answer, answer
    again = compose("How can I pick up an answer again after a reload?", passages).answer
    assert "Last-Event-ID" in again, again
