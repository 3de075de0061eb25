"""Offline answers (issue 20 item 4), round 51: two of walkthrough50's plain newcomer
questions the default service answered without their fact because the sample KB said it
in no reader's words. Each is asked of the default service (the sample KB alone, as
``make run`` serves it; the extractive answerer; a real loopback server) and must carry
its fact, as the code does it:

- turning authentication on: the ``AGENT_AUTH`` section said "`jwt` verifies a bearer
  token …" without the setting as it is set, so "How do I turn on authentication?" quoted
  it without ``AGENT_AUTH=jwt`` (``app/config.py``: ``none``, the default, or ``jwt``,
  which verifies a bearer token); it now says ``AGENT_AUTH=jwt`` turns authentication on;
- clearing a chat's history: deleting the conversation removes its messages, runs and
  event logs (``DELETE /v1/agent/conversations/{id}``), but the page never said so in a
  newcomer's words, and "How do I clear my chat history?" quoted the section on sending
  a title; the delete sentence now opens with "To clear a chat's history, delete its
  conversation".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.offline_answers import assert_clean, carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: walkthrough50's questions, each with the fact its answer must carry.
SAMPLE_KB_WORDS = [
    ("How do I turn on authentication?", "AGENT_AUTH=jwt"),
    ("How do I clear my chat history?", "DELETE /v1/agent/conversations/{id}"),
]


@pytest.mark.slow
async def test_walkthrough50_questions_the_sample_kb_now_answers(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": fact} for q, fact in SAMPLE_KB_WORDS]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    missed = [(q, results[q]["answer"]) for q, fact in SAMPLE_KB_WORDS if not carries(results[q]["answer"], fact)]
    assert missed == []
    for question, _ in SAMPLE_KB_WORDS:
        assert_clean(results[question]["answer"])
