"""``bench/offline_answers.py --replay`` says what the live provider says. Every change to
the answerer is tried first by replaying a capture (the passages each question's searches
gave the provider) over every question set, so a replayed answer must be the provider's,
word for word: a decline too. It composed the answer and dropped the decline ("I could
not find anything about X in the knowledge base…", which the provider says when the
composition names what no passage mentions), so round35's ten declines replayed as no
answer at all and the set scored 31/42 where the service gave 40/42.

The capture here is the bench's own (``capturing``) of the real provider answering from a
knowledge search's result, then replayed from the file it was written to.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import llm.extractive as extractive
from bench import offline_answers
from llm.extractive import SEARCH_TOOL, ExtractiveProvider, not_found_message
from llm.extractive_words import Words
from llm.types import ChatRequest, ContentDelta, Message, ToolDefinition, ToolResult, ToolUseInput

MCP = (
    "Set `AGENT_MCP_SERVERS` to a TOML or JSON file that names the servers, for example "
    "`AGENT_MCP_SERVERS=/etc/agentchat/mcp-servers.toml`; `deploy/mcp-servers.example.toml` is a "
    "commented example. Each server is a `[servers.<name>]` table."
)
RESUME = (
    "A client that lost its connection reconnects with the `Last-Event-ID` header: the server "
    "replays every event after that id, then follows the run live."
)
CHUNKS = [
    {"source_id": "mcp#1", "doc_id": "mcp", "chunk_id": "mcp#1", "title": "MCP servers", "text": MCP, "score": 0.6},
    {"source_id": "sse#2", "doc_id": "sse", "chunk_id": "sse#2", "title": "Resuming", "text": RESUME, "score": 0.5},
]
#: Answered from a chunk; declined for what no chunk mentions; found nothing at all.
ANSWERED = "How do I resume a stream after a disconnect?"
DECLINED = "How do I send alerts to PagerDuty?"
NOTHING = "Which colour is the sky?"


async def _said_live(provider: ExtractiveProvider, question: str) -> tuple[str, str]:
    """What the provider streams and passes to ``generate_response`` for ``question``,
    once its knowledge search returned ``CHUNKS``."""
    result = ToolResult("c1", SEARCH_TOOL, orjson.dumps({"chunks": CHUNKS}).decode())
    history = [Message("user", question), Message("user", "", tool_results=[result])]
    tools = [ToolDefinition(t, "", {}) for t in (SEARCH_TOOL, "generate_response")]
    events = [ev async for ev in provider.stream_chat(ChatRequest("system", history, tools))]
    streamed = "".join(e.text for e in events if isinstance(e, ContentDelta))
    call = orjson.loads(next(e.partial_json for e in events if isinstance(e, ToolUseInput)))
    return streamed, str(call["answer"])


async def test_a_replayed_capture_says_what_the_provider_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extractive, "compose", extractive.compose)  # capturing replaces it: put back after
    store: dict[str, object] = {}
    offline_answers.capturing(store)
    provider = ExtractiveProvider()
    live = {}
    for question in (ANSWERED, DECLINED, NOTHING):
        streamed, called = await _said_live(provider, question)
        assert streamed == called, question
        live[question] = called
    assert "Last-Event-ID" in live[ANSWERED]
    assert live[DECLINED] == not_found_message(("PagerDuty",))
    assert live[NOTHING] == not_found_message()
    capture = tmp_path / "capture.json"
    capture.write_bytes(orjson.dumps(store))

    questions = [{"question": q, "fact": ""} for q in live]
    replayed = offline_answers.replay_answers(orjson.loads(capture.read_bytes()), questions, Words())
    assert {r["question"]: r["answer"] for r in replayed} == live
