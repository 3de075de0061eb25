"""Offline answers (issue 20 item 4), round 35: questions in the words newcomers write.
A name in a greeting, a sentence or clause of context, an aside or a sign-off ("Hello
from Berlin!", "My team uses Slack; how do I …", "Cheers, Maria") is not what the
question asks, so it no longer declines it ("I could not find anything about Slack …");
a German question's capitalised nouns and a Spanish one's "¿Qué" are no names; and an
FAQ's "Yes, npm ci …" is no longer quoted "Npm ci …" for a question asking no yes or no.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.extractive import not_found_message
from llm.extractive_answer import Passage, compose
from llm.extractive_quote import without_answer_word
from llm.extractive_subject import ask_of, declined, names
from llm.extractive_words import Words
from tests.support.offline_answers import carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: Questions of the round35 set the sample KB answers, each declined before for a name
#: outside what it asks, and the fact its answer carries.
ANSWERED = [
    ("My team uses Slack; how do I add an MCP server?", "AGENT_MCP_SERVERS"),
    ("We run Postgres 16 in production. How do I move my existing SQLite data to PostgreSQL?", "migrate-db"),
    ("Using VS Code on Windows, how do I run the tests?", "make test"),
    ("I'm on Ubuntu 22.04 with Python 3.12. How do I run the tests?", "make test"),
    ("Which embedder works with no network? Cheers, Maria", "hashing"),
    (
        "Context: we're a small team at Acme Corp using GitHub Actions for CI. "
        "How do I run the test suite without network access?",
        "make test",
    ),
    ("Muss ich nach einem Update meiner Dokumente agentchat ingest erneut laufen lassen?", "skipped"),
    ("¿Qué significa el error replica_busy?", "Retry-After"),
]
#: Questions about what the sample KB never mentions, declined naming only that: before,
#: "Cómo or AWS Lambda", "Jenkins or Sentry".
DECLINED = [
    ("¿Cómo despliego el servicio en AWS Lambda?", ("AWS Lambda",)),
    ("We use Jenkins. How do I send Sentry alerts when a run fails?", ("Sentry",)),
    ("Hi! How do I set up Slack notifications for finished runs?", ("Slack",)),
]


@pytest.mark.slow
async def test_newcomers_questions_are_answered_or_declined_by_what_they_ask(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": ""} for q, _ in ANSWERED + DECLINED]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    for question, fact in ANSWERED:
        answer = results[question]["answer"]
        assert "could not find" not in answer and carries(answer, fact), (question, answer)
    for question, missing in DECLINED:
        assert results[question]["answer"] == not_found_message(missing), (question, results[question]["answer"])


def test_a_name_outside_the_ask_declines_nothing() -> None:
    """Only a name in the question's ask declines it (``declined``): not one in a
    greeting, a sentence or clause of context before the question, an aside or a
    sign-off after it. Whether the rest is answered well no longer matters for those."""
    for question, name in [
        ("Hello from Berlin! How do I cancel a run?", "Berlin"),
        ("My team uses Slack; how do I add an MCP server?", "Slack"),
        ("Using VS Code on Windows, how do I run the tests?", "Windows"),
        ("We run Postgres 16 in production. How do I move my data to PostgreSQL?", "Postgres"),
        ("Which embedder works with no network? Cheers, Maria", "Maria"),
        ("Hi Maria, how do I cancel a run?", "Maria"),
        ("How do I start the service (I use Podman)?", "Podman"),
    ]:
        assert name in names(question), question
        assert declined(question, [name], answered=False) == (), question
    # In the ask: declined when it is what is asked about, or the rest is not answered.
    assert declined("How do I restart a Kubernetes pod? It keeps crashing.", ["Kubernetes"], True) == ("Kubernetes",)
    assert declined("Can I deploy the service on AWS Lambda?", ["AWS Lambda"], answered=False) == ("AWS Lambda",)
    assert declined("Can I deploy the service on AWS Lambda?", ["AWS Lambda"], answered=True) == ()
    # A question saying too little to ask alone asks with the sentence before it.
    assert declined("I want Slack notifications for finished runs. Is that possible?", ["Slack"], False) == ("Slack",)
    # Only the name asked about is named, not the context's.
    jenkins = "We use Jenkins. How do I send Sentry alerts when a run fails?"
    assert declined(jenkins, names(jenkins), answered=True) == ("Sentry",)


def test_the_answer_is_chosen_for_what_the_message_asks() -> None:
    """``ask_of``: the message less the greeting, context and sign-off naming what no
    passage says (``unsaid``), for the answerer to score passages by (the name, said by
    no passage, diluted every score: "My team uses Slack; how do I add an MCP server?"
    quoted the MCP page's first line)."""
    assert ask_of("My team uses Slack; how do I add an MCP server?", ["Slack"]) == "how do I add an MCP server?"
    assert ask_of("Hello from Berlin! How do I cancel a run?", ["Berlin"]) == "How do I cancel a run?"
    signed = "Which embedder works with no network? Cheers, Maria"
    assert ask_of(signed, ["Maria"]) == "Which embedder works with no network?"
    # All ask: a qualifying clause, two questions, a message with no question mark.
    for whole in [
        "If I open the events of a finished run, what do I get?",
        "On my Mac, how do I run the tests?",
        "How do I cancel a run? And can I resume its stream later?",
        "how do i ingest my own markdown files",
    ]:
        assert ask_of(whole, names(whole)) == whole
    # A question saying too little alone keeps what it refers back to.
    assert ask_of("need help pls: my stream ended early, what happened?", ["pls"]) == (
        "need help pls: my stream ended early, what happened?"
    )
    assert ask_of("I want Slack alerts. Is that possible?", ["Slack"]) == "I want Slack alerts. Is that possible?"
    assert ask_of("How do I cancel a run? Is that possible?") == "How do I cancel a run? Is that possible?"
    # Context writing no name stays: its words are the documents' ("replicas").
    replicas = "I run three replicas. How many database connections does each one keep?"
    assert ask_of(replicas, names(replicas)) == replicas


def test_context_naming_what_the_passages_say_is_kept() -> None:
    """Context whose names the passages say is the documents' own words, often the very
    subject: only a context naming something unsaid is left out of the ask."""
    for question in [
        "The `Idempotency-Key` header confuses me. How long does the server remember it?",
        "Using PostgreSQL with pgvector. How do I move my SQLite data over?",
        "Quick question about AGENT_RUN_LEASE_S: what happens when it expires?",
    ]:
        assert names(question), question
        assert ask_of(question, unsaid=()) == question
        assert ask_of(question, unsaid=["Grafana"]) == question
    # The same context naming something no passage says as well is left out.
    grafana = "My Grafana board shows agentchat_runs_resumed_total rising. What does that mean for my runs?"
    assert ask_of(grafana, ["Grafana"]) == "What does that mean for my runs?"


#: Questions the sample KB answers whose context names what its pages say - the subject -
#: answered without it when every context writing a name was left out of the ask: the
#: MCP servers' settings for the key, the 400 codes for the rate limit, no migration.
CONTEXT_IS_THE_SUBJECT = [
    (
        "The `Idempotency-Key` header confuses me. How long does the server remember it?",
        "a repeat of the key streams the run",
    ),
    ("We set AGENT_REQUESTS_PER_MINUTE to 60. What status do clients get over it?", "rate_limited"),
    ("Using PostgreSQL with pgvector. How do I move my SQLite data over?", "migrate-db"),
]


@pytest.mark.slow
async def test_context_naming_the_documents_words_is_what_is_answered(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": ""} for q, _ in CONTEXT_IS_THE_SUBJECT]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    for question, fact in CONTEXT_IS_THE_SUBJECT:
        answer = results[question]["answer"]
        assert carries(answer, fact), (question, answer)


#: Messages without a question mark whose first sentence greets or says the writer's
#: setting, declined for its name when every sentence was taken for the ask.
IMPERATIVE_AFTER_GREETING = [
    ("Hello from Berlin! Explain how to cancel a run.", "/cancel"),
    ("Hi, I'm on Ubuntu. tell me how to run the tests", "make test"),
]


@pytest.mark.slow
async def test_an_imperative_after_a_greeting_is_what_is_asked(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": ""} for q, _ in IMPERATIVE_AFTER_GREETING]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    for question, fact in IMPERATIVE_AFTER_GREETING:
        answer = results[question]["answer"]
        assert "could not find" not in answer and carries(answer, fact), (question, answer)


def test_what_a_message_without_a_question_mark_asks() -> None:
    """With no "?", the sentences not greeting, signing off or saying the writer's own
    setting are the ask; a message all of those, or imperatives, asks whole."""
    assert ask_of("Hello from Berlin! Explain how to cancel a run.", ["Berlin"]) == "Explain how to cancel a run."
    assert declined("Hi, I'm on Ubuntu. tell me how to run the tests", ["Ubuntu"], answered=False) == ()
    assert declined("Explain how to cancel a run. Best, Johan", ["Johan"], answered=False) == ()
    for whole in ["Explain Kubernetes pods. Keep it short.", "Best practices for Kubernetes. Keep it short."]:
        assert declined(whole, ["Kubernetes"], answered=False) == ("Kubernetes",), whole
    assert declined("I need to run it on Kubernetes", ["Kubernetes"], answered=False) == ("Kubernetes",)


def test_a_tag_question_asks_with_the_sentence_before_it() -> None:
    """A tag question ("Any tips?") says nothing of what is asked: the sentence before it
    is the ask, and a name there is asked about (it was context, and the answer was
    chosen for "any" and "tips" alone)."""
    okta = "I need to rotate the JWT key in Okta. Any tips?"
    assert ask_of(okta, ["Okta"]) == okta
    assert declined(okta, ["Okta"], answered=False) == ("Okta",)
    for tag in ["Any ideas?", "Thoughts?", "Any advice?", "Any suggestions or pointers?"]:
        assert declined(f"We want Slack alerts for failed runs. {tag}", ["Slack"], answered=False) == ("Slack",), tag
    # A question of its own after the context still stands alone.
    slack = "We use Slack and Teams. Any way to get notified when a run finishes?"
    assert ask_of(slack, ["Slack", "Teams"]) == "Any way to get notified when a run finishes?"


def test_a_german_questions_nouns_and_a_spanish_opening_are_no_names() -> None:
    assert names("Muss ich nach einem Update meiner Dokumente agentchat ingest erneut laufen lassen?") == []
    assert names("Hallo! Wie kann ich einen MCP Server konfigurieren?") == []
    assert names("Welche Variable setzt den Port des Servers?") == []
    assert names("¿Qué significa el error replica_busy?") == ["replica_busy"]
    assert names("¿Cómo despliego el servicio en AWS Lambda?") == ["AWS Lambda"]
    # A German question's name without an article is still one; English keeps its capitals.
    assert names("Hallo, wie installiere ich Kubernetes?") == ["Kubernetes"]
    assert names("Does the Update event carry a Document id?") == ["Update", "Document"]


def test_a_dropped_yes_leaves_a_command_name_as_written() -> None:
    how = "How do I install exactly what the lock file says?"
    # A command or identifier after "Yes,": the sentence as written, not "Npm ci installs".
    assert without_answer_word(["Yes, npm ci installs exactly what the lock file says."], how) == [
        "Yes, npm ci installs exactly what the lock file says."
    ]
    assert without_answer_word(["No, package-lock.json is read."], how) == ["No, package-lock.json is read."]
    # Prose after it stands alone with its capital; a code span keeps its case.
    assert without_answer_word(["No, the lock file is read first."], how) == ["The lock file is read first."]
    assert without_answer_word(["Yes, `npm ci` installs it."], how) == ["`npm ci` installs it."]
    # Through the answerer.
    text = "Yes, npm ci installs exactly what the lock file says, and fails when it and package.json disagree."
    faq = [Passage("ci#0", "Clean installs", text, 0.6)]
    answer = compose(how, faq, Words()).answer
    assert answer.startswith("Yes, npm ci installs exactly"), answer
