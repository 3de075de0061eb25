"""Offline answers (issue 20 item 4), round 47: a message that only greets or thanks.

A newcomer's first message to ``make run`` (no model: the extractive answerer over the
sample KB) is often "hi" or "good morning"; it was searched as a question and answered
"I could not find an answer to that in the knowledge base". It is answered now with what
the service can answer and how (from the knowledge base, quoting passages), citing no
source, through the usual events (one ``response``, one ``message_complete``), and the
same text on the OpenAI-compatible and AI SDK faces. A greeting with a question is still
the question (round35's greetings).

The greeting named a sample-KB question even with ``AGENT_INGEST_SAMPLE_KB=false``, where
the knowledge base cannot answer it; it then said how to see and add documents in every
configuration, so ``make run``'s browser newcomer read CLI commands first. It now depends
on the configuration (round 49): with the sample knowledge base it suggests a question
the service answers, without it how to see and add documents. A thanks that says the
answer missed ("thanks :(", "thanks, but that didn't help") was told "You're welcome!"
(or searched as a question); it gets ``NOT_HELPED_REPLY``, and "no, thank you"
``NO_THANKS_REPLY``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import orjson
import pytest
import pytest_asyncio

from app.config import Settings
from llm.extractive_greeting import (
    GREETING_REPLY,
    NO_THANKS_REPLY,
    NOT_HELPED_REPLY,
    SAMPLE_KB_GREETING_REPLY,
    THANKS_REPLY,
    greeting_reply,
)
from tests.conftest import collect_sse, running_app
from tests.support.offline_answers import carries
from tests.test_offline_answers import ONE_SERVICE, defaults

GREETINGS = ["hi", "Hello!", "Hallo", "hey there", "Good morning :)", "hi all, good afternoon"]
THANKS = ["thanks", "Thank you so much!", "ok thanks", "thx", "thanks, that helped", "Got it, thank you!"]
#: Greetings around a question, and messages that only look like one: searched as ever.
NOT_ONLY_GREETINGS = [
    "Hi, how do I cancel a run?",
    "Hello from Berlin! How do I cancel a run?",
    "thanks, and how do I resume a stream?",
    "Hi, I'm Priya",
    "hey",  # a greeting
    "Thanks, but how do I resume a stream?",
]
#: A thanks that says the answer missed: never "You're welcome!".
NOT_PLAIN_THANKS = [
    "thanks :(",
    "Thank you 🙁",
    "thanks, but that didn't help",
    "Thanks, but that did not work",
    "thanks anyway",
    "thank you, that's not what I asked",
    "Hi, that didn\u2019t help",
]


def test_only_a_greeting_or_thanks_is_one() -> None:
    assert {m: greeting_reply(m) for m in GREETINGS} == dict.fromkeys(GREETINGS, GREETING_REPLY)
    assert {m: greeting_reply(m) for m in THANKS} == dict.fromkeys(THANKS, THANKS_REPLY)
    assert [greeting_reply(m) for m in NOT_ONLY_GREETINGS] == [None, None, None, None, GREETING_REPLY, None]
    assert {m: greeting_reply(m) for m in NOT_PLAIN_THANKS} == dict.fromkeys(NOT_PLAIN_THANKS, NOT_HELPED_REPLY)
    assert greeting_reply("hi :(") == GREETING_REPLY and greeting_reply("thanks :D") == THANKS_REPLY
    # Review of 7910ca6: "no, thank you" after "Ask me anything else…" was told "Sorry that
    # did not help"; a declining thanks gets a reply true whichever it means.
    declining = ["no thanks", "No, thank you.", "nope, thanks", "nah thanks!"]
    assert {m: greeting_reply(m) for m in declining} == dict.fromkeys(declining, NO_THANKS_REPLY)
    assert "sorry" not in NO_THANKS_REPLY.lower() and "welcome" not in NO_THANKS_REPLY.lower()
    assert greeting_reply("") is None and greeting_reply("What is the hello world example?") is None
    sample = {m: greeting_reply(m, sample_kb=True) for m in [*GREETINGS, *THANKS, *NOT_PLAIN_THANKS]}
    assert sample == {
        **dict.fromkeys(GREETINGS, SAMPLE_KB_GREETING_REPLY),
        **dict.fromkeys(THANKS, THANKS_REPLY),
        **dict.fromkeys(NOT_PLAIN_THANKS, NOT_HELPED_REPLY),
    }


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def base(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The default configuration, no model reachable, served until its sample KB is in."""
    tmp_path: Path = tmp_path_factory.mktemp("greeting")
    async with running_app(Settings.from_env({**defaults(tmp_path), **ONE_SERVICE})) as (url, _):
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(600):
                if (await client.get(f"{url}/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
        yield url


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def empty(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The defaults with ``AGENT_INGEST_SAMPLE_KB=false``: a knowledge base of nothing yet."""
    tmp_path: Path = tmp_path_factory.mktemp("greeting-no-sample")
    env = {**defaults(tmp_path), **ONE_SERVICE, "AGENT_INGEST_SAMPLE_KB": "false"}
    async with running_app(Settings.from_env(env)) as (url, _):
        yield url


async def ask(base: str, message: str) -> list[object]:
    async with httpx.AsyncClient(timeout=60) as client:
        events = await collect_sse(
            client, "POST", f"{base}/v1/agent/chat", json={"message": message, "context_type": "knowledge"}
        )
    return list(events)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    ("message", "reply"),
    [("hi", SAMPLE_KB_GREETING_REPLY), ("Good morning!", SAMPLE_KB_GREETING_REPLY), ("thanks!", THANKS_REPLY)],
)
async def test_a_greeting_is_answered_with_what_the_service_answers(base: str, message: str, reply: str) -> None:
    events = await ask(base, message)
    names = [e.event for e in events]  # type: ignore[attr-defined]
    assert names.count("response") == 1 and names.count("message_complete") == 1 and names[-1] == "message_complete"
    [response] = [e.json() for e in events if e.event == "response"]  # type: ignore[attr-defined]
    assert response["answer"] == reply and response["sources"] == []
    assert events[-1].json()["status"] == "completed"  # type: ignore[attr-defined]
    assert "knowledge base" in response["answer"] and "could not find" not in response["answer"]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_greeting_with_a_question_answers_the_question(base: str) -> None:
    events = await ask(base, "Hi, how do I cancel a run?")
    [response] = [e.json() for e in events if e.event == "response"]  # type: ignore[attr-defined]
    assert carries(response["answer"], "/cancel") and response["sources"]


@pytest.mark.asyncio(loop_scope="module")
async def test_a_thanks_in_a_follow_up_is_one(base: str) -> None:
    """A follow-up that greets and thanks for an earlier answer asks nothing: it was
    searched as a question and answered with an unrelated passage (or "could not find")."""
    first = await ask(base, "How do I cancel a run?")
    [started] = [e.json() for e in first if e.event == "run_started"]  # type: ignore[attr-defined]
    body = {"message": "Hi there, thanks for the help earlier", "context_type": "knowledge",
            "conversation_id": started["conversation_id"]}
    async with httpx.AsyncClient(timeout=60) as client:
        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
    [response] = [e.json() for e in events if e.event == "response"]  # type: ignore[attr-defined]
    assert response["answer"] == THANKS_REPLY and response["sources"] == []


@pytest.mark.asyncio(loop_scope="module")
async def test_the_other_faces_say_the_same(base: str) -> None:
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0) as client:
        completion = await client.chat.completions.create(
            model="agentchat-knowledge",
            messages=[{"role": "user", "content": "hello"}],
        )
    assert completion.choices[0].message.content == SAMPLE_KB_GREETING_REPLY
    message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": "hey there"}]}
    body = {"id": "chat-hi", "messages": [message], "trigger": "submit-message", "context_type": "knowledge"}
    async with httpx.AsyncClient(timeout=60) as http:
        events = await collect_sse(http, "POST", f"{base}/v1/agent/ui-stream", json=body)
    chunks = [orjson.loads(e.data) for e in events if e.data != "[DONE]"]
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == SAMPLE_KB_GREETING_REPLY
    assert not [c for c in chunks if c["type"] in ("source-url", "source-document", "error")]


def answer_of(events: list[object]) -> dict[str, object]:
    [response] = [e.json() for e in events if e.event == "response"]  # type: ignore[attr-defined]
    assert isinstance(response, dict)
    return response


async def suggests_only_what_it_answers(url: str, greeting: str) -> list[str]:
    """The service greets with ``greeting``, and every question it suggests is answered
    by that same service; the questions suggested."""
    said = answer_of(await ask(url, "hi"))
    assert said["answer"] == greeting and said["sources"] == []
    suggested = re.findall(r"[\"“]([^\"”]+\?)[\"”]", greeting)
    for question in suggested:
        answered = answer_of(await ask(url, question))
        assert answered["sources"], (question, answered["answer"])
    return suggested


@pytest.mark.asyncio(loop_scope="module")
async def test_without_the_sample_kb_the_greeting_suggests_no_sample_question(empty: str) -> None:
    """It suggested "How do I resume a stream after a disconnect?", which a service
    without the sample knowledge base answers "I could not find an answer"; it says how
    to see and add documents instead."""
    assert await suggests_only_what_it_answers(empty, GREETING_REPLY) == []
    assert "agentchat docs list" in GREETING_REPLY and "agentchat ingest" in GREETING_REPLY


@pytest.mark.asyncio(loop_scope="module")
async def test_with_the_sample_kb_the_greeting_suggests_a_question_it_answers(base: str) -> None:
    """``make run``'s default (the sample knowledge base ingested): a browser newcomer's
    first answer suggests a question to try - not CLI commands - and the service answers
    it with its sources."""
    assert await suggests_only_what_it_answers(base, SAMPLE_KB_GREETING_REPLY)
    assert "agentchat" not in SAMPLE_KB_GREETING_REPLY


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("message", ["thanks :(", "thanks anyway", "thanks, but that didn't help"])
async def test_a_thanks_that_says_the_answer_missed_is_not_welcomed(base: str, message: str) -> None:
    """After an answer, a thanks that is not a plain one is told how to ask again, citing
    nothing - not "You're welcome!" ("thanks :("), not an unrelated passage."""
    first = await ask(base, "How do I cancel a run?")
    [started] = [e.json() for e in first if e.event == "run_started"]  # type: ignore[attr-defined]
    body = {"message": message, "context_type": "knowledge", "conversation_id": started["conversation_id"]}
    async with httpx.AsyncClient(timeout=60) as client:
        events = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)
    response = answer_of(list(events))
    assert response["answer"] == NOT_HELPED_REPLY and response["sources"] == []
    assert "welcome" not in NOT_HELPED_REPLY.lower()
