"""Offline answers (issue 20 item 4), round 48: round45's to round48's misses and the
sample KB's sentences a review found untrue.

- A name between the reader's "my" / "our" and a common noun ("Which URL should my
  Kubernetes liveness probe hit?") says what the reader's own thing is set in, not what
  is asked about (``llm.extractive_subject._is_object``): the question was declined for
  Kubernetes, which the sample KB never names, though it says which URL a liveness probe
  hits. "How do I restart a Kubernetes pod?" (an article) still asks about Kubernetes.
- The sample KB says, each checked against the code: which event says the answer is
  finished (``message_complete``, with its three statuses) and which one a tool call
  (``tool_call_result``); that a computer that slept mid-answer gets the rest with
  ``Last-Event-ID``; the playground's address and that it is the root path; that a SQLite
  file replaced under a running server needs a restart (``storage/sqlite/file_guard.py``:
  the loss is sticky until then); the ``otel`` extra as ``pip install '.[otel]'`` from a
  checkout (no package is published under the name); the run error ``max_loops``
  (``app/agent/loop.py``); ``AGENT_LLM_TIMEOUT_S`` as the wait for a reply to start too
  (``app/agent/turn.py``'s idle watch starts before the first event);
  ``AGENT_MAX_ANSWER_CHARS``; Python 3.11 (``requires-python``); that the search fuses
  min-max normalised scores, not reciprocal ranks; ``/healthz`` as the endpoint saying
  whether the service is alive; the conversation retention as automatic.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.extractive_subject import asked_about, declined, names
from tests.support.offline_answers import assert_clean, carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: Questions of the later-written sets and round45 to round48 (each written before any
#: answer to it was read) the default service answers since round 48, with their facts.
GAINED = [
    ("Which event tells me the answer is finished?", "message_complete"),
    ("My laptop went to sleep mid-answer. Can I get the rest of it?", "Last-Event-ID"),
    ("Which URL should my Kubernetes liveness probe hit?", "/healthz"),
    ("Hey! Which address do I open in my browser to try the playground?", "127.0.0.1:8000"),
    (
        "I replaced the SQLite file while the server was running and now every request fails "
        "with storage_unavailable. What do I do?",
        "restart",
    ),
    ("How do I install the OpenTelemetry extra from a checkout?", ".[otel]"),
    ("What does the error max_loops mean?", "AGENT_MAX_LOOPS"),
    ("Which event tells me a tool call has finished?", "tool_call_result"),
    ("My model takes ages before it starts replying and the run times out. What do I raise?", "AGENT_LLM_TIMEOUT_S"),
    ("Which Python version do I need?", "3.11"),
    ("Can I cap how many characters the model's answer may have?", "AGENT_MAX_ANSWER_CHARS"),
    ("Which endpoint tells whether the service is alive?", "/healthz"),
    ("What constant does the reciprocal rank fusion use?", "min-max normalised"),
    ("What is served at the root path of the service?", "playground"),
    (
        "How do I get conversations nobody has touched for a while deleted automatically?",
        "AGENT_CONVERSATION_RETENTION_DAYS",
    ),
]


def test_a_name_qualifying_the_readers_own_thing_is_its_setting() -> None:
    probe = "Which URL should my Kubernetes liveness probe hit?"
    assert "Kubernetes" in names(probe)
    assert asked_about(probe) == []
    # Answered when a passage answers the rest well; declined when none does.
    assert declined(probe, ["Kubernetes"], answered=True) == ()
    assert declined(probe, ["Kubernetes"], answered=False) == ("Kubernetes",)
    assert asked_about("Can our Jenkins job start a run?") == []
    # An article, or the name as the head of what is asked, keeps it asked about.
    assert asked_about("How do I restart a Kubernetes pod?") == ["Kubernetes"]
    assert asked_about("How do I deploy it to my Kubernetes?") == ["Kubernetes"]
    assert declined("How do I restart a Kubernetes pod?", ["Kubernetes"], answered=True) == ("Kubernetes",)


def test_a_name_followed_by_what_is_said_of_it_is_still_asked_about() -> None:
    """Review of 1683547: any lower-case word after "my X" made X the reader's setting, so
    "Why is my Redis slow?" stopped asking about Redis and was answered with an unrelated
    passage instead of declined. A verb or adjective said of the name keeps it asked about."""
    assert asked_about("Why is my Redis slow?") == ["Redis"]
    assert asked_about("Why does my Grafana show no data?") == ["Grafana"]
    assert asked_about("How do I make my Redis use less memory?") == ["Redis"]
    assert declined("Why is my Redis slow?", ["Redis"], answered=True) == ("Redis",)


@pytest.mark.slow
async def test_round48_questions_the_default_service_now_answers(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": fact} for q, fact in GAINED]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    missed = [(q, results[q]["answer"]) for q, fact in GAINED if not carries(results[q]["answer"], fact)]
    assert missed == []
    for question, _ in GAINED:
        assert_clean(results[question]["answer"])
