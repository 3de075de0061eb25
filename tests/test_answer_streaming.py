"""The final answer streams token by token when the model writes it as a
``generate_response`` call (``app/agent/answer_stream.py``), and shows once on every face.

A real ``openai`` provider talks to the loopback OpenAI fake, which streams the call's
arguments in one-character pieces with every non-ASCII character as a ``\\uXXXX`` escape,
so each escape (``\\"``, ``\\n``, ``\\\\``, ``\\u00e9``, a surrogate pair) is cut inside.
The native stream, the OpenAI-compatible face (SDK, streamed and not) and the AI SDK UI
stream are read from a real uvicorn server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from app.agent.answer_stream import AnswerReader, ShownText
from app.config import Settings
from tests.conftest import collect_sse, running_app
from tests.fakes import Hold, Text, ToolCall, running_fake
from tests.fakes._script import Turn, TurnLike
from tests.fakes.openai import FakeOpenAI
from tests.support.sse import iter_sse

ANSWER = 'Résumé: reconnect with "Last-Event-ID".\nThe server replays 😀 every event\\missed\ttoo.'
DRAFT = "Let me look that up."
DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect with "
        "the Last-Event-ID header and the server replays every event you missed.",
    }
]
QUESTION = "How do I resume a stream after a disconnect?"
GUARD_S = 30.0


def answer_call(answer: str = ANSWER) -> ToolCall:
    # The answer after other fields: the reader must find it wherever it comes.
    return ToolCall(
        "generate_response",
        {"sources": [], "confidence_score": 0.5, "answer": "  " + answer + "\n", "used_internal_kb": False,
         "used_external_kb": False},
    )


def scripted(*after_search: TurnLike) -> Callable[[dict[str, Any]], TurnLike]:
    """Every run: a search, then the turns of ``after_search`` (by how many turns the run had)."""

    def turn(body: dict[str, Any]) -> TurnLike:
        messages = body.get("messages") or []
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user" and not _reminder(m)),
                        default=0)
        done = sum(1 for m in messages[last_user:] if m.get("role") == "assistant")
        if done == 0:
            return [ToolCall("knowledge_base_search", {"query": "resume a stream after a disconnect"})]
        return after_search[min(done - 1, len(after_search) - 1)]

    return turn


def _reminder(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and "generate_response" in content


@asynccontextmanager
async def served(tmp_path: Path, script: Callable[[dict[str, Any]], TurnLike]) -> AsyncIterator[str]:
    fake = FakeOpenAI(script, split_arguments=100_000, ascii_arguments=True)
    async with running_fake(fake.app) as url:
        settings = Settings.from_env({
            "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"),
            "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_ADMIN_OPEN": "true",
            "AGENT_LLM_PROVIDER": "openai",
            "AGENT_EMBEDDER": "hashing",
            "OPENAI_BASE_URL": url + "/v1",
            "OPENAI_API_KEY": "sk-test",
            "OLLAMA_HOST": "http://127.0.0.1:9",
        })
        async with running_app(settings) as (base, _app):
            async with httpx.AsyncClient(base_url=base, timeout=GUARD_S) as http:
                r = await http.post("/v1/kb/documents", json={"documents": DOCS})
                assert r.status_code == 200, r.text
            yield base


async def native(base: str) -> list[Any]:
    async with httpx.AsyncClient(timeout=GUARD_S) as http:
        return await collect_sse(http, "POST", f"{base}/v1/agent/chat",
                                 json={"message": QUESTION, "context_type": "knowledge"})


def chunks(events: list[Any]) -> list[str]:
    return [e.json()["chunk"] for e in events if e.event == "content_chunk"]


async def openai_text(base: str) -> tuple[list[str], str]:
    """The streamed content deltas, and the non-streamed completion's content."""
    messages: Any = [{"role": "user", "content": QUESTION}]
    async with openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="sk-local", max_retries=0) as client:
        stream = await client.chat.completions.create(model="agentchat-knowledge", messages=messages, stream=True)
        deltas = [c.choices[0].delta.content async for c in stream if c.choices and c.choices[0].delta.content]
        whole = await client.chat.completions.create(model="agentchat-knowledge", messages=messages)
    return deltas, whole.choices[0].message.content or ""


async def ui_chunks(base: str, chat_id: str) -> list[dict[str, Any]]:
    body = {"id": chat_id, "trigger": "submit-message", "messageId": None,
            "messages": [{"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}]}
    out: list[dict[str, Any]] = []
    async with (
        asyncio.timeout(GUARD_S),
        httpx.AsyncClient(timeout=GUARD_S) as http,
        http.stream("POST", f"{base}/v1/agent/ui-stream", json=body) as r,
    ):
        assert r.status_code == 200, await r.aread()
        async for ev in iter_sse(r.aiter_lines()):
            if ev.data and ev.data != "[DONE]":
                out.append(orjson.loads(ev.data))
    return out


def ui_text(parts: list[dict[str, Any]]) -> str:
    return "".join(p["delta"] for p in parts if p["type"] == "text-delta")


# --- the answer streams while the call is written ------------------------------------------


async def test_the_answer_streams_as_content_chunks_before_the_model_ends_its_call(tmp_path: Path) -> None:
    release = asyncio.Event()
    answering = Turn([answer_call(), Hold(release)])  # the model has not ended its turn
    async with served(tmp_path, scripted(answering)) as base:
        seen: list[Any] = []
        async with (
            asyncio.timeout(GUARD_S),
            httpx.AsyncClient(timeout=GUARD_S) as http,
            http.stream("POST", f"{base}/v1/agent/chat", json={"message": QUESTION, "context_type": "knowledge"}) as r,
        ):
            assert r.status_code == 200
            async for ev in iter_sse(r.aiter_lines()):
                seen.append(ev)
                if not release.is_set() and "".join(chunks(seen)) == ANSWER:
                    # The whole answer arrived while the model still holds its turn open.
                    names = [e.event for e in seen]
                    assert "response" not in names and names.count("tool_call_result") == 1
                    release.set()
    names = [e.event for e in seen]
    assert release.is_set(), f"the answer never streamed: {names}"
    pieces = chunks(seen)
    assert "".join(pieces) == ANSWER and len(pieces) >= 40  # token by token, not whole
    first_chunk = names.index("content_chunk")
    assert names[first_chunk - 1] == "tool_call_start" and names[-1] == "message_complete"
    response = next(e.json() for e in seen if e.event == "response")
    assert response["answer"] == ANSWER  # the stored contract: the same answer, whole


async def test_each_face_shows_the_streamed_answer_once(tmp_path: Path) -> None:
    async with served(tmp_path, scripted([answer_call()])) as base:
        deltas, whole = await openai_text(base)
        parts = await ui_chunks(base, "chat-once")
    assert "".join(deltas) == ANSWER and len(deltas) >= 40
    assert whole == ANSWER
    assert ui_text(parts) == ANSWER and [p["type"] for p in parts].count("text-start") == 1
    assert len([p for p in parts if p["type"] == "text-delta"]) >= 40


# --- one answer on screen ---------------------------------------------------------------------


async def test_an_answer_repeating_the_turns_text_is_not_shown_again(tmp_path: Path) -> None:
    """The offline answerer's way (and a model's): the text, then the same in the call."""
    async with served(tmp_path, scripted([Text(ANSWER[:30]), Text(ANSWER[30:]), answer_call()])) as base:
        events = await native(base)
        deltas, whole = await openai_text(base)
        parts = await ui_chunks(base, "chat-repeat")
    assert "".join(chunks(events)) == ANSWER
    assert "".join(deltas) == ANSWER and whole == ANSWER
    assert ui_text(parts) == ANSWER


async def test_a_retry_that_repeats_the_streamed_text_is_not_shown_again(tmp_path: Path) -> None:
    """Plain text (the flow reminds the model), then the same answer through the tool."""
    async with served(tmp_path, scripted([Text(ANSWER)], [answer_call()])) as base:
        events = await native(base)
        deltas, whole = await openai_text(base)
        parts = await ui_chunks(base, "chat-retry")
    assert [e.event for e in events].count("message_start") == 3 and "response" in [e.event for e in events]
    assert "".join(chunks(events)) == ANSWER
    assert "".join(deltas) == ANSWER and whole == ANSWER
    assert ui_text(parts) == ANSWER


async def test_a_draft_before_a_different_answer_stays_and_the_answer_shows_once(tmp_path: Path) -> None:
    async with served(tmp_path, scripted([Text(DRAFT), answer_call()])) as base:
        events = await native(base)
        deltas, whole = await openai_text(base)
        parts = await ui_chunks(base, "chat-draft")
    shown = DRAFT + "\n\n" + ANSWER  # no stream can take the draft back; the answer is a paragraph of its own
    assert "".join(chunks(events)) == shown
    assert "".join(deltas) == shown and whole == shown
    assert ui_text(parts) == shown


# --- the reader and the hold, alone --------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_the_reader_decodes_escapes_cut_anywhere(size: int) -> None:
    raw = orjson.dumps({"sources": ["a \"b\""], "answer": "\n " + ANSWER + " \n", "x": {"answer": "no"}}).decode()
    raw = raw.replace("é", "\\u00e9").replace("😀", "\\ud83d\\ude00").replace("\":", "\" : ")
    reader = AnswerReader()
    out = [reader.feed(raw[i : i + size]) for i in range(0, len(raw), size)]
    assert "".join(out) == ANSWER and orjson.loads(raw)["answer"].strip() == ANSWER


def test_a_second_answer_field_stops_the_reading() -> None:
    reader = AnswerReader()
    assert reader.feed('{"answer": "first", ') == "first"
    assert reader.feed('"answer": "second"}') == "" and reader.stopped


def test_shown_text_holds_a_repeat_and_releases_a_new_answer() -> None:
    shown = ShownText()
    shown.text("The answer is 42.")
    shown.answer_begins()
    assert [shown.answer(p) for p in ["The ", "answer  is", " 42."]] == ["", "", ""]
    shown.new_turn()
    shown.answer_begins()
    assert shown.answer("The answer") == "" and shown.answer(" was wrong") == "The answer was wrong"
    assert shown.answer(": 43.") == ": 43."
