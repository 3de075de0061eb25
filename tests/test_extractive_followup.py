"""Issue 20 item 4, round 24: the offline answerer keeps a follow-up's topic.

A person asks "How do I add a file to one conversation?", then "How big can it be?":
the second question is about the first one's attachment. The extractive answerer reads
the whole conversation the agent sends it (``llm.extractive_followup``): a follow-up
(referring back, elliptical, too short to stand alone) is searched with the previous
question's words after its own, and once alone, and answered with the topic's words
weighed below its own; a question that stands alone is read as in a new conversation.

Unit tests for the detection, the topic and the query; one end to end over a real
uvicorn server with the default configuration (offline, fresh database, the sample KB
ingested at start-up, the flow mandatory in ``knowledge``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from llm.extractive_answer import Passage, compose_answer
from llm.extractive_followup import (
    FollowUp,
    earlier_questions,
    elliptical,
    follow_up_of,
    is_follow_up,
    refers_back,
    too_short,
)
from llm.types import ChatRequest, Message, ToolDefinition, ToolResult, ToolUseInput, ToolUseStart
from tests.conftest import collect_sse, running_app
from tests.support.deadline import within
from tests.support.offline_answers import load_questions


@pytest.mark.parametrize(
    "question",
    [
        "And on the AI SDK face?",
        "What about PostgreSQL?",
        "how about with several workers?",
        "But with --reload?",
    ],
)
def test_an_elliptical_opening_is_a_follow_up(question: str) -> None:
    assert elliptical(question) and is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        "How big can it be?",
        "What happens to its keywords?",
        "Does that work with --reload?",
        "How long may its connection attempt take?",
        "Which header do I send for that?",
        "Are they kept after a restart?",
        # a bare plural demonstrative, and a demonstrative before a stand-in for a noun
        "Are these kept after a restart?",
        "Is this one any faster?",
        "What are those ones for?",
        "How do I change that default?",
    ],
)
def test_a_word_referring_to_what_came_before_is_a_follow_up(question: str) -> None:
    assert refers_back(question) and is_follow_up(question)


@pytest.mark.parametrize(
    "question",
    [
        # the pronoun's thing is said before it, in the question
        "Where does npm store its cache?",
        "How do users change their password?",
        "My plugin needs a host library installed next to it. How do I declare that?",
        # "it" standing for nothing, "that" joining a clause
        "Is it possible to run the service on PostgreSQL?",
        "How long does it take to ingest a folder?",
        "How do I make sure that a tool call never runs twice?",
        # one word, named as a thing of its own
        "What is agentchat?",
        "How many workers should I use?",
        "How do I resume a stream after a disconnect?",
    ],
)
def test_a_question_that_stands_alone_is_no_follow_up(question: str) -> None:
    assert not is_follow_up(question)
    assert follow_up_of(question, ["How do I add a file to one conversation?"]) is None


def test_too_few_words_to_stand_alone() -> None:
    assert too_short("Why?") and too_short("How long?") and too_short("What is the default?")
    assert too_short("How big can it be?")  # only the words of a form
    assert not too_short("What is agentchat?") and not too_short("Which header carries the run id?")
    # one noun of its own, spoken of with "the", is a question of its own
    assert not too_short("What is the license?") and not too_short("What's the timeout?")


#: Ordinary questions a person asks first, or at any point of a conversation (review 39):
#: "this"/"those" before a noun name the question's own thing, a bare "this" is the
#: project asked about, one noun with "the" is a question of its own.
STAND_ALONE = [
    "What is this service?",
    "Is this project open source?",
    "How do I use this with PostgreSQL?",
    "Does this work on Windows?",
    "What are those 503 responses during shutdown?",
    "What is the license?",
    "Where is the config?",
    "What's the timeout?",
]


@pytest.mark.parametrize("question", STAND_ALONE)
def test_a_demonstrative_naming_the_questions_own_thing_is_no_follow_up(question: str) -> None:
    assert not is_follow_up(question)
    assert follow_up_of(question, ["How do I resume a stream after a disconnect?"]) is None


def test_every_question_of_the_measured_sets_stands_alone() -> None:
    """The question sets' questions were each written to be asked alone: none is read
    as a follow-up (the rule is about English, not about these questions). A question
    marked ``first`` says "it" of the service as a newcomer's first question does ("Can
    it read my PDF manuals?", round53): asked first, as every set's questions are, it has
    nothing to follow; after another question it would refer back, as English reads it."""
    from tests.support.offline_answers import SETS

    follow_ups = 0
    for name in SETS:
        for corpus in load_questions(name=name).values():
            for item in corpus:
                if item.get("first"):
                    assert not item.get("before") and is_follow_up(item["question"]), item["question"]
                    continue
                assert is_follow_up(item["question"]) == bool(item.get("before")), item["question"]
                follow_ups += bool(item.get("before"))
    assert follow_ups == 10  # the followup set's, every one still read as one
    assert not [q for q in STAND_ALONE if is_follow_up(q)]


def test_the_topic_is_the_previous_question_and_the_query_adds_its_words() -> None:
    follow = follow_up_of("How big can it be?", ["How do I add a file to one conversation?", "What is agentchat?"])
    assert follow == FollowUp("How big can it be?", "How do I add a file to one conversation?", False)
    assert follow.search_query() == "How big can it be? add file conversation"
    # a follow-up of a follow-up reaches back to the question that set the topic
    chained = follow_up_of("And its limit?", ["What about PostgreSQL?", "Where is my data stored?", "Why?"])
    assert chained is not None and chained.elliptical
    assert chained.topic == "What about PostgreSQL?\nWhere is my data stored?"
    assert chained.search_query() == "And its limit? postgresql data stored"
    assert follow_up_of("How big can it be?", []) is None  # nothing to lean on


def test_earlier_questions_are_the_users_not_tool_results_or_reminders() -> None:
    messages = [
        Message("user", "How do I add a file to one conversation?"),
        Message("assistant", "", tool_calls=[]),
        Message("user", "", tool_results=[ToolResult("c1", "knowledge_base_search", "{}")]),
        Message("user", "Call knowledge_base_search first.", reminder=True),
        Message("assistant", "You post it to the attachments route."),
        Message("user", "How big can it be?"),
    ]
    assert earlier_questions(messages, 5) == ["How do I add a file to one conversation?"]


_ATTACHMENTS = [
    Passage(
        "conv#1",
        "Conversations",
        "`POST /v1/agent/conversations/{id}/attachments` with a part named `file` adds a file to one "
        "conversation. The file is read by the same loaders as `agentchat ingest`.",
        0.6,
    ),
    Passage(
        "conv#2",
        "Conversations",
        "An attachment may be at most `AGENT_ATTACHMENT_MAX_BYTES` (5 MiB); a larger one is refused with 413.",
        0.5,
    ),
    Passage("tools#1", "Tools", "A tool result is capped at 16 KiB; a bigger one is cut.", 0.4),
]


def test_a_follow_up_asking_only_by_its_form_is_answered_by_what_the_form_wants() -> None:
    """Alone, "How big can it be?" meets nothing; of the file its topic is about, the
    size; the topic's own sentence (which says every topic word) does not lead."""
    alone, _, _ = compose_answer("How big can it be?", _ATTACHMENTS)
    follow = FollowUp("How big can it be?", "How do I add a file to one conversation?", False)
    answer, sources, _ = compose_answer("How big can it be?", _ATTACHMENTS, None, follow)
    assert "5 MiB" not in alone
    assert answer.startswith("An attachment may be at most") and sources[0] == "conv#2", answer


_DELETING = [
    Passage(
        "tools#1",
        "Tools",
        "Keywords must be 2 to 50 characters after trimming; duplicates merge and their usage count goes up.",
        0.6,
    ),
    Passage(
        "conv#1",
        "Conversations",
        "`DELETE /v1/agent/conversations/{id}` answers 204 after removing the conversation with its messages "
        "and runs. Keywords and saved web answers it produced stay the user's, unlinked.",
        0.6,
    ),
]


def test_the_follow_ups_own_words_come_first_and_the_topic_chooses_among_them() -> None:
    """Asked "What happens to its keywords?" after "How do I delete a conversation?": of the
    sentences saying "keywords", the one about a deleted conversation's; the topic's
    own sentence (deleting, without keywords) does not lead."""
    alone, _, _ = compose_answer("What happens to its keywords?", _DELETING)
    follow = FollowUp("What happens to its keywords?", "How do I delete a conversation?", False)
    answer, _, _ = compose_answer("What happens to its keywords?", _DELETING, None, follow)
    assert alone.startswith("Keywords must be"), alone
    lead = answer.split("\n\n")[0]
    assert "stay the user's" in lead and lead.endswith("[conv#1]"), answer


def _turn(provider: ExtractiveProvider, messages: list[Message]) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of one provider turn, with their arguments."""
    tools = [ToolDefinition(n, "", {}) for n in ("knowledge_base_search", "search_text", "generate_response")]

    async def run() -> list[Any]:
        return [ev async for ev in provider.stream_chat(ChatRequest("", messages, tools))]

    events = asyncio.run(run())
    names = {e.id: e.name for e in events if isinstance(e, ToolUseStart)}
    return [(names[e.id], orjson.loads(e.partial_json)) for e in events if isinstance(e, ToolUseInput)]


def test_a_follow_up_searches_with_its_topic_and_alone() -> None:
    history = [
        Message("user", "How do I add a file to one conversation?"),
        Message("assistant", "Post it to the attachments route."),
    ]
    calls = _turn(ExtractiveProvider(), [*history, Message("user", "How big can it be?")])
    assert [(name, args["query"]) for name, args in calls] == [
        ("knowledge_base_search", "How big can it be? add file conversation"),
        ("knowledge_base_search", "How big can it be?"),
    ]
    # a question that stands alone in the same conversation: one search, its own words
    for question in ("How do I resume a stream after a disconnect?", *STAND_ALONE):
        alone = _turn(ExtractiveProvider(), [*history, Message("user", question)])
        assert [(name, args["query"]) for name, args in alone] == [("knowledge_base_search", question)]


# --- end to end: the default configuration over a real uvicorn server -------------------


def _answer(events: list[Any]) -> str:
    assert events[-1].event == "message_complete" and events[-1].json()["status"] == "completed"
    return str(next(e.json() for e in events if e.event == "response")["answer"])


def _searches(events: list[Any]) -> list[str]:
    return [
        e.json()["arguments"]["query"]
        for e in events
        if e.event == "tool_call_result" and e.json().get("name") == "knowledge_base_search"
    ]


@pytest.mark.slow
async def test_a_two_turn_conversation_keeps_its_topic(tmp_path: Path) -> None:
    """Offline with the defaults (the sample KB ingested at start-up): "How big can it
    be?" after "How do I add a file to one conversation?" is answered with the
    attachment's 5 MiB, which only the first question's topic makes findable (asked
    alone, nothing in the knowledge base says "big"). A question that stands alone in
    the same conversation is answered exactly as in a new conversation."""
    settings = Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "OLLAMA_HOST": "http://127.0.0.1:9"}
    )
    async with running_app(settings) as (base, _), httpx.AsyncClient(timeout=120) as client:

        async def ready() -> None:
            while (await client.get(f"{base}/readyz")).status_code != 200:
                await asyncio.sleep(0.1)  # the condition is polled; the guard bounds it

        await within(ready(), "the sample KB ingested at start-up", 240)

        async def ask(message: str, conversation: str | None = None) -> list[Any]:
            body: dict[str, Any] = {"message": message, "context_type": "knowledge"}
            if conversation is not None:
                body["conversation_id"] = conversation
            return await collect_sse(client, "POST", f"{base}/v1/agent/chat", json=body)

        first = await ask("How do I add a file to one conversation?")
        conversation = next(e.json()["conversation_id"] for e in first if e.event == "run_started")
        follow = await ask("How big can it be?", conversation)
        alone_here = await ask("How many streamed runs can one process serve?", conversation)
        fresh = await ask("How many streamed runs can one process serve?")
        lonely = await ask("How big can it be?")

    assert "attachments" in _answer(first)
    answer = _answer(follow)
    assert "5 MiB" in answer, answer
    assert sorted(_searches(follow)) == ["How big can it be?", "How big can it be? add file conversation"]
    assert "5 MiB" not in _answer(lonely)  # the fact only the topic makes findable
    assert _answer(alone_here) == _answer(fresh) and "100 concurrent" in _answer(fresh)
    assert _searches(alone_here) == ["How many streamed runs can one process serve?"]
