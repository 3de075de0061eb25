"""Round 37: a long message costs the offline answerer a bounded amount of work, and says so.

The answerer is pure Python and holds the GIL while it composes: a message of
``AGENT_MAX_MESSAGE_CHARS`` made of thousands of made-up words cost it 30 s of CPU,
every other stream of the process slowed meanwhile. It reads at most
``MAX_READ_WORDS`` words and ``MAX_READ_CHARS`` characters of a message
(``llm.extractive_long``): its last, or those ending with its last question when the
last would leave that question out; it searches for what they ask and answers them,
and the answer says the message was cut. Round 37 read only 32 words within 300
characters, which cut a question followed by two sentences of why it was asked: such a
message is read whole now. What is asserted is that rule (what is searched and composed
for), never a time.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest

from app.config import Settings
from llm.extractive import ExtractiveProvider
from llm.extractive_answer import Passage, compose
from llm.extractive_long import MAX_QUERY_CHARS, MAX_READ_CHARS, MAX_READ_WORDS, cut_note, read_part, search_text
from llm.extractive_words import Words
from tests.conftest import running_app
from tests.support.offline_answers import SETS, load_questions
from tests.test_extractive_offline import DOCS, chat

#: The largest message the service accepts.
MAX_CHARS = Settings.from_env({}).max_message_chars
QUESTION = "How do I resume a stream after a disconnect?"
#: A question, then why it is asked: an ordinary message (47 words, 263 characters),
#: whose question round 37's 32 words cut away.
WITH_ITS_REASON = (
    f"{QUESTION} I'm asking because our users are on flaky mobile networks and we see the "
    "EventSource connection drop every few minutes, and each time they lose the half-written "
    "answer and have to ask again, which is annoying for them."
)
#: A paragraph of context (no question in it) of about 1,000 characters.
CONTEXT = " ".join(
    ["Our users are on flaky mobile networks and the EventSource connection drops every few minutes."] * 11
)


def _made_up(rng: random.Random) -> str:
    return "".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(rng.randint(3, 6)))


def long_message(ending: str, opening: str = "", seed: int = 37) -> str:
    """``opening``, then distinct made-up words and capitalised names in sentences, then
    ``ending``: ``MAX_CHARS`` at most in all."""
    rng = random.Random(seed)
    words: list[str] = [opening] if opening else []
    size = len(opening) + len(ending)
    while size < MAX_CHARS - 40:
        word = _made_up(rng)
        word = word.capitalize() if rng.random() < 0.3 else word
        word += "." if rng.random() < 0.1 else ""
        words.append(word)
        size += len(word) + 1
    return " ".join(words) + " " + ending


def test_no_question_of_any_set_is_cut() -> None:
    """The bound is above every question the answerer is measured on (the longest is 23
    words, 121 characters), earlier questions of a conversation included."""
    asked = [
        q
        for name in SETS
        for items in load_questions(name=name).values()
        for item in items
        for q in [item["question"], *item.get("before", ())]
    ]
    assert len(asked) >= 465
    for question in asked:
        part = read_part(question)
        assert not part.cut and part.text == question, question


@pytest.mark.parametrize("message", [WITH_ITS_REASON, f"{CONTEXT} {QUESTION}", f"{QUESTION} {CONTEXT}"])
def test_a_paragraph_of_context_and_its_question_are_read_whole(message: str) -> None:
    assert not read_part(message).cut


@pytest.mark.parametrize("ending", [f"{QUESTION}", "x" * 2000, "?" * 2000, "a " * 1000])
def test_a_message_at_the_maximum_is_read_by_its_last_words(ending: str) -> None:
    message = long_message(ending)[-MAX_CHARS:]
    part = read_part(message)
    assert part.cut and message.rstrip().endswith(part.text)
    assert len(part.text.split()) <= MAX_READ_WORDS and len(part.text) <= MAX_READ_CHARS
    assert part.words == len(message.split()) and part.chars == len(message)
    if ending == QUESTION:
        assert part.text.endswith(QUESTION) and not part.at_question


def test_a_long_message_whose_question_comes_first_is_read_with_its_question() -> None:
    """A question, then more explanation than is read: the part read ends with the
    question (not the explanation's last words), and the note says so."""
    message = f"Hello! {QUESTION} " + " ".join([CONTEXT] * 4)
    part = read_part(message)
    assert part.cut and part.at_question and part.text == f"Hello! {QUESTION}"
    assert "ending with its last question" in cut_note(part)
    assert (
        "Last-Event-ID" in compose(message, [Passage(f"{d['id']}#0", d["title"], d["text"], 1.0) for d in DOCS]).answer
    )


def test_a_long_part_is_searched_for_what_it_asks() -> None:
    """Past the search tools' 500 characters, the query is the question sentences, not
    the context opening the message."""
    assert search_text(QUESTION) == QUESTION
    assert search_text(f"{CONTEXT} {QUESTION} Thanks!") == QUESTION
    many = " ".join(f"How do I resume stream {n} after a disconnect?" for n in range(40))
    searched = search_text(many)
    assert len(searched) <= MAX_QUERY_CHARS and searched.endswith("stream 39 after a disconnect?")
    assert searched.startswith("How do I resume stream")


def test_compose_reads_only_the_last_words() -> None:
    """``compose`` answers a long message as it answers its last words: what comes
    before them (here a question another passage answers) is not read."""
    passages = [Passage(f"{d['id']}#0", d["title"], d["text"], 1.0) for d in DOCS]
    message = long_message(QUESTION, opening="Which variables does the shell environment list?")
    assert len(message) <= MAX_CHARS
    words = Words()
    whole = compose(message, passages, words)
    assert whole == compose(read_part(message).text, passages, words)
    assert "Last-Event-ID" in whole.answer and "PATH" not in whole.answer


def _calls(events: list[Any], name: str) -> list[dict[str, Any]]:
    return [e.json() for e in events if e.event == "tool_call_result" and e.json()["name"] == name]

async def _asked(offline: Settings, message: str) -> list[Any]:
    """``message`` asked of a real offline service over ``DOCS``, in the knowledge context;
    its events, the run completed."""
    async with (
        running_app(offline, provider=ExtractiveProvider()) as (base, _),
        httpx.AsyncClient(timeout=120) as client,
    ):
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        events = await chat(client, base, message, "knowledge")
    assert events[-1].json()["status"] == "completed"
    return events



@pytest.mark.slow
async def test_a_maximum_size_message_is_searched_and_answered_by_its_last_words(offline: Settings) -> None:
    """Through the service: the search is for the message's last words, the answer
    answers them and says first that the message was cut."""
    message = long_message(QUESTION)
    assert len(message) <= offline.max_message_chars
    part = read_part(message)
    events = await _asked(offline, message)
    searched = [call["arguments"]["query"] for call in _calls(events, "knowledge_base_search")]
    # The question's sentence (after the made-up words' last full stop), not the first
    # 500 characters of the part read.
    assert len(part.text) > MAX_QUERY_CHARS and searched == [search_text(part.text)]
    assert searched[0].endswith(QUESTION) and len(searched[0]) < 200
    read = part.text.casefold()
    for call in _calls(events, "search_text"):  # a page read: the last words' words only
        assert all(word in read for word in call["arguments"]["query"].split()), call["arguments"]
    answer = next(e.json() for e in events if e.event == "response")["answer"]
    assert answer.startswith(cut_note(part)) and "Last-Event-ID" in answer


@pytest.mark.parametrize("message", [WITH_ITS_REASON, f"{CONTEXT} {QUESTION}"])
async def test_a_question_with_a_paragraph_of_context_is_answered_whole(offline: Settings, message: str) -> None:
    """Through the service: a question with why it is asked, or after a paragraph of
    context, is read whole (no note that it was cut), searched for by its question, and
    answered."""
    events = await _asked(offline, message)
    searched = [call["arguments"]["query"] for call in _calls(events, "knowledge_base_search")]
    assert searched == [message if len(message) <= MAX_QUERY_CHARS else QUESTION]
    answer = next(e.json() for e in events if e.event == "response")["answer"]
    assert "Last-Event-ID" in answer and "Your message is long" not in answer
