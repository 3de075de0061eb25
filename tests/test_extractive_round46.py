"""Offline answers (issue 20 item 4), round 46: round45's everyday questions the default
service answered wrong because the sample KB did not say what they ask (or said it in
no reader's words, or only in a list the answerer passed over). Each is asked of the
default service (the sample KB alone, as ``make run`` serves it; the extractive
answerer; a real loopback server) and must carry its fact, as docs/ and the code say it:

- the longest message: the message length section says "the longest message you can
  send", and the 400 per face (``invalid_field`` on the native and AI SDK routes, OpenAI's
  ``string_above_max_length`` on ``/v1/chat/completions``; it said ``invalid_field`` alone,
  untrue of the OpenAI-compatible face);
- ``storage_unavailable``: a section says what it means (the database could not be
  reached or written) and that it is a 503 (the answer was the run-error paragraph);
- 403 ``cross_origin_request``: never named in the sample KB; the codes list and
  ``AGENT_CORS_ORIGINS``' line say which requests get it and what to set;
- a load balancer's readiness check: ``/readyz`` is said to be it (a busy replica's
  "stays ready" sentence was the answer);
- OpenAI, vLLM and LM Studio: a section says how to connect an OpenAI-compatible server
  (the answer was MCP's settings, or a decline naming LM Studio);
- other machines on the network: ``AGENT_HOST``'s default (this machine only) and
  ``0.0.0.0`` (the answer was ``make dev``);
- OpenTelemetry: a traces section names it (a decline naming OpenTelemetry);
- requiring a log-in: ``AGENT_AUTH=jwt`` is said to do it (the answer was the logs
  paragraph, "log");
- an image: the 415 sentence names images among the binary content it refuses;
- a buffering proxy: a troubleshooting section (the AI SDK's resume was the answer);
- a run taking too long: the cancel route is said to stop one (the restart paragraph was
  the answer);
- saved web answers: a section says whose they are and ``AGENT_SHARED_WEB_ANSWERS``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.offline_answers import assert_clean, carries
from tests.test_offline_answers import ONE_SERVICE, defaults, service

#: round45's questions (written before any answer to them was read), each with the facts
#: its answer must carry.
SAMPLE_KB_GAPS = [
    ("Hi, Tom here. What's the longest message I can send?", ("AGENT_MAX_MESSAGE_CHARS", "string_above_max_length")),
    ("What does the storage_unavailable error mean?", ("503",)),
    ("Why does my web app get 403 cross_origin_request?", ("AGENT_CORS_ORIGINS",)),
    ("Which endpoint tells a load balancer the service is ready?", ("/readyz",)),
    ("How do I connect it to OpenAI?", ("OPENAI_API_KEY",)),
    ("Does the service work with LM Studio or vLLM?", ("OPENAI_BASE_URL",)),
    ("How do I make the service reachable from other machines on my network?", ("AGENT_HOST",)),
    ("Does the service support OpenTelemetry tracing?", ("AGENT_OTEL",)),
    ("How do I require users to log in?", ("AGENT_AUTH",)),
    ("Can I attach an image to my question?", ("415",)),
    ("Why does the answer show up all at once behind my proxy?", ("buffer",)),
    ("How do I stop a run that is taking too long?", ("/cancel",)),
    ("Are my saved web answers shared with other users?", ("AGENT_SHARED_WEB_ANSWERS",)),
]


@pytest.mark.slow
async def test_round45_questions_the_sample_kb_now_answers(tmp_path: Path) -> None:
    questions = [{"question": q, "fact": facts[0]} for q, facts in SAMPLE_KB_GAPS]
    async with service({**defaults(tmp_path), **ONE_SERVICE}) as ask:
        results = {r["question"]: r for r in await ask(questions, None)}
    missed = [
        (question, results[question]["answer"])
        for question, facts in SAMPLE_KB_GAPS
        if not all(carries(results[question]["answer"], fact) for fact in facts)
    ]
    assert missed == []
    for question, _ in SAMPLE_KB_GAPS:
        assert_clean(results[question]["answer"])
