"""Offline answers (issue 20 item 4), round 31: a question naming something the knowledge
base does not mention is answered by saying so, not with a passage that shares only its
common words ("What does npm ci do differently from npm install?" over the sample KB
quoted the list of HTTP error codes). ``llm.extractive_subject`` reads what the question
names; the service, with its defaults, declines where no passage found says it, and still
answers readers' paraphrases whose other words the documents do not use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.extractive import not_found_message
from llm.extractive_answer import Passage, compose
from llm.extractive_subject import asked_about, names
from llm.extractive_words import Words
from tests.support.offline_answers import carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: Questions naming a tool, product or term the sample KB never mentions, beside common
#: words it does ("install", "restart", "configure", "port"), and the name declined.
OFF_TOPIC = [
    ("What does npm ci do differently from npm install?", "npm ci"),
    ("How do I configure webpack's dev server port?", "webpack"),
    ("How do I restart a Kubernetes pod?", "Kubernetes"),
    ("Does Django's ORM support async queries?", "Django's ORM"),
    ("Can I deploy the service on AWS Lambda?", "AWS Lambda"),
    ("How do I install Terraform providers offline?", "Terraform"),
    ("Can I use Elasticsearch instead of SQLite?", "Elasticsearch"),
    ("What does the `--verbose-dns` flag do?", "`--verbose-dns`"),
]
#: Answerable questions in a reader's words (some the documents do not use: "talk",
#: "going", "CPU"), or naming what the sample KB does mention, and a fact each must carry.
ANSWERABLE = [
    ("Can I talk to it with the OpenAI SDK?", "OpenAI SDK"),
    ("How do I cancel a run that is going?", "/cancel"),
    ("Which embedder works with no network?", "Hashing"),
    ("How do I make one server use all the CPU cores of my machine?", "--workers"),
    ("Can LibreChat use the agent?", "LibreChat"),
    ("How do I put nginx in front of several replicas?", "nginx"),
    ("Why does my browser's EventSource reconnect?", "EventSource"),
    ("What does `AGENT_DB_PATH` set?", "SQLite"),
    # A name the KB never mentions, given only as the question's setting: the rest is
    # answered (each was declined by the name alone before).
    ("I'm on Ubuntu, how do I start the service?", "make run"),
    ("How do I resume a stream in Chrome after a disconnect?", "Last-Event-ID"),
    ("On my Mac, how do I run the tests?", "make test"),
    # A name set in a sentence before the question, or in an aside (review of 531a526:
    # both declined, "I could not find anything about Podman").
    ("I use Podman. How do I start the service?", "make run"),
    ("How do I start the service (I use Podman)?", "make run"),
]


@pytest.mark.slow
async def test_questions_about_what_the_sample_kb_never_mentions_are_declined(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": ""} for q, _ in OFF_TOPIC + ANSWERABLE]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    for question, name in OFF_TOPIC:
        answer = results[question]["answer"]
        assert answer == not_found_message((name,)), (question, answer)
        assert results[question]["sources"] == [], (question, results[question]["sources"])
    for question, fact in ANSWERABLE:
        answer = results[question]["answer"]
        assert "could not find" not in answer and carries(answer, fact), (question, answer)


def test_what_a_question_writes_as_a_name() -> None:
    assert names("How do I restart a Kubernetes pod?") == ["Kubernetes"]
    assert names("Can I deploy the service on AWS Lambda?") == ["AWS Lambda"]
    assert names("Does Django's ORM support async queries?") == ["Django's ORM"]
    assert names("How do I configure webpack's dev server port?") == ["webpack"]
    assert names("What does npm ci do differently from npm install?") == ["npm ci"]
    assert names("What is package-lock.json for?") == ["package-lock.json"]
    # An acronym alone is a common noun of technical prose; a question's first word and
    # "I" are capitalised whatever they are.
    assert names("How do I make one server use all the CPU cores of my machine?") == []
    assert names("Where is my data stored?") == []
    # A sentence inside the question starts with a capital too.
    assert names("I restarted it. Now what happens to my runs?") == []


def _guide(position: int, text: str) -> Passage:
    return Passage(f"guide#{position}", "Deployment guide", text, 0.5)


def test_a_name_no_passage_says_declines_and_one_a_passage_says_answers() -> None:
    passages = [
        _guide(0, "Restart the service after changing its configuration: runs resume from their checkpoints."),
        _guide(1, "The container image is built from the Dockerfile and listens on port 8000."),
    ]
    words = Words()
    declined = compose("How do I restart a Kubernetes pod?", passages, words)
    assert declined.answer == "" and declined.unmentioned == ("Kubernetes",), declined
    answered = compose("How do I restart the service?", passages, words)
    assert "Restart the service" in answered.answer and answered.unmentioned == (), answered
    # Named and said by a passage (its title counts): answered.
    named = compose("Which port does the Dockerfile image listen on?", passages, words)
    assert "port 8000" in named.answer, named
    # A passage saying any word of a name of several mentions it.
    assert compose("Which port does the Docker Dockerfile image use?", passages, words).unmentioned == ()


def test_a_name_the_question_is_about_and_one_it_is_only_set_in() -> None:
    assert asked_about("How do I restart a Kubernetes pod?") == ["Kubernetes"]
    assert asked_about("Does Django's ORM support async queries?") == ["Django's ORM"]
    assert asked_about("How do I configure webpack's dev server port?") == ["webpack"]
    # Where or with what the question is set: after a preposition, or in an earlier clause.
    assert asked_about("How do I resume a stream in Chrome after a disconnect?") == []
    assert asked_about("On my Mac, how do I run the tests?") == []
    assert asked_about("My team uses Slack; how do I add an MCP server?") == []
    # ... or in a sentence before the question, or an aside (review of 531a526); a name in
    # the question itself, a remark after it, is still what it is about.
    assert asked_about("I use Podman. How do I start the service?") == []
    assert asked_about("How do I start the service (I use Podman)?") == []
    assert asked_about("How do I restart a Kubernetes pod? It keeps crashing.") == ["Kubernetes"]


def test_a_question_opening_with_spaces_names_nothing_by_its_first_word() -> None:
    """Review of 1ff6623: the question's first word is no name, but a question sent with
    a space or blank lines before it ("  Summarize …", pasted) had its capitalised first
    word read as one, never mentioned by the passages and asked about, so it was declined
    ("I could not find anything about Summarize …")."""
    passages = [
        Passage(
            "ingest#0",
            "Filling the knowledge base",
            "The ingest command reads every file of a folder into the knowledge base: run `agentchat ingest ./docs`.",
            0.5,
            section="Knowledge base › Ingest",
        )
    ]
    for question in [" Explain the ingest command.", "\n\nSummarize the ingest command"]:
        assert names(question) == [], question
        composed = compose(question, passages)
        assert composed.unmentioned == (), (question, composed.unmentioned)
        assert "agentchat ingest" in composed.answer, (question, composed.answer)
