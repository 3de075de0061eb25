"""A tool result that names a conversation's attachment bucket can be followed with it.

Before, ``knowledge_base_search`` found an attached file (its hit's bucket ``att_…``) and
the offline answerer's page read — ``search_text(bucket="att_…", doc_id=…)`` — failed
"unknown bucket 'att_…'; available buckets: default": ``search_text``,
``search_semantic`` and ``get_document_metadata`` never got the conversation's own
private bucket. They take it now, decided by the run's user and conversation
(``agenttools.rag.own_buckets``), never by the name: another conversation's bucket of
the same user, and another user's, stay a bucket that does not exist, in the same words.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import orjson

from agenttools.core.executor import ToolExecutor
from agenttools.core.validation import validate_arguments
from app.cli.kb_file import open_kb_file
from app.config import Settings
from knowledge.attachments import attachment_bucket
from knowledge.types import DocumentIn
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, ToolCalls, running_fake
from tests.test_compat_faces_owners import bearer, env
from tests.test_corpus_tools import Harness, build_registry
from tests.test_keyword_reuse_e2e import chat_bodies, tool_results
from toolindex.hashing import HashingEmbedder

FACT = "The Quillfeather lighthouse keeper rings the brass bell at seven minutes past dawn."
NOTE = f"# Quillfeather lighthouse\n\n{FACT}\n\nThe keeper's logbook is kept in the lamp room.\n"
QUESTION = "When does the Quillfeather lighthouse keeper ring the brass bell?"


async def attach(http: httpx.AsyncClient, conversation: str, head: dict[str, str] | None = None) -> dict[str, Any]:
    files = {"file": ("lighthouse notes.md", NOTE.encode(), "text/markdown")}
    up = await http.post(f"/v1/agent/conversations/{conversation}/attachments", files=files, headers=head or {})
    assert up.status_code == 201, up.text
    return up.json()  # type: ignore[no-any-return]


async def run_events(http: httpx.AsyncClient, conversation: str, head: dict[str, str] | None = None) -> list[Any]:
    body = {"message": QUESTION, "context_type": "knowledge", "conversation_id": conversation}
    started = await http.post("/v1/agent/runs", json=body, headers=head or {})
    assert started.status_code == 201, started.text
    url = f"/v1/agent/runs/{started.json()['run_id']}/events"
    events = await collect_sse(http, "GET", url, headers=head or {})
    assert events[-1].event == "message_complete", [e.event for e in events]
    return events


async def test_the_offline_answerers_follow_up_reads_the_attachment(settings: Settings) -> None:
    """The default configuration (offline answerer): the page read of the attached file
    succeeds and returns its text."""
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=60) as http:
        note = await attach(http, "c-one")
        events = await run_events(http, "c-one")
    calls = [e.json() for e in events if e.event == "tool_call_result"]
    assert [(c["name"], c["is_error"]) for c in calls][:2] == [
        ("knowledge_base_search", False),
        ("search_text", False),
    ], calls
    assert not any(c["is_error"] for c in calls), calls
    read = calls[1]["arguments"]
    assert read["bucket"].startswith("att_") and read["doc_id"] == note["id"], read
    assert "Quillfeather" in calls[1]["summary"], calls[1]
    [response] = [e.json() for e in events if e.event == "response"]
    assert "seven minutes past dawn" in response["answer"], response


ALICE, BOB = bearer("alice"), bearer("bob")
SHARED = "handbook, hr"
NO_DOC = "att-0123456789abcdef0123"  # an attachment's id that names no document


def follow_ups(bucket: str, doc_id: str) -> ToolCalls:
    """The calls a model makes following a hit of ``bucket`` (the mandatory search first)."""
    return ToolCalls([
        ToolCall("knowledge_base_search", {"query": "brass bell"}),
        ToolCall("search_text", {"bucket": bucket, "query": "brass bell", "doc_id": doc_id}),
        ToolCall("search_semantic", {"bucket": bucket, "query": "when is the bell rung"}),
        ToolCall("get_document_metadata", {"doc_id": doc_id}),
        ToolCall("knowledge_base_search", {"query": "brass bell", "kb_id": bucket}),
    ])


def named_and_nope(bucket: str, doc_id: str) -> list[Any]:
    """Follow-ups naming ``bucket`` and ``doc_id``, then the same naming no bucket and no document."""
    return [ToolCalls([*follow_ups(bucket, doc_id).calls, *follow_ups("nope", NO_DOC).calls[1:]])]


ANSWER = ToolCall("generate_response", {
    "answer": "The bell is rung at dawn.", "sources": [], "confidence_score": 0.5,
    "used_internal_kb": False, "used_external_kb": False,
})


def results(body: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    names = ("knowledge_base_search", "search_text", "search_semantic", "get_document_metadata")
    return {name: tool_results(body, name) for name in names}


def without(name: str, outcome: dict[str, Any]) -> str:
    return str(outcome).replace(name, "<named>")


async def test_only_the_runs_own_conversation_follows_its_attachment_bucket(tmp_path: Path) -> None:
    """Alice follows her conversation's bucket with every tool; from her other
    conversation, and Bob from his conversation of the same id, naming it gets exactly
    what naming a bucket (and a document) that does not exist gets."""
    fake = FakeOllama()
    async with running_fake(fake.app) as ollama_url:
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with (
            running_app(Settings.from_env(env(tmp_path, AGENT_MAX_TOOL_CALLS="20")), provider=provider) as (base, app),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            kb = app.state.services.rooms.named("knowledge").kb
            for shared in ("hr", "handbook"):
                await kb.create_bucket(shared)
            note = await attach(http, "a-one", ALICE)
            await attach(http, "a-two", ALICE)  # her other conversation has a private bucket too
            own, doc_id = attachment_bucket("alice", "a-one"), note["id"]
            for conversation, head in (("a-one", ALICE), ("a-two", ALICE), ("a-one", BOB)):
                fake.add_turn(named_and_nope(own, doc_id) if head is BOB or conversation == "a-two"
                              else [follow_ups(own, doc_id)])
                fake.add_turn([ANSWER])
                events = await run_events(http, conversation, head)
                assert events[-1].event == "message_complete"
    bodies = chat_bodies(fake)
    mine, other_conversation, bobs = (results(bodies[i]) for i in (1, 3, 5))

    # Her own conversation: every follow-up succeeds and reads the attachment.
    [_, by_name] = mine["knowledge_base_search"]
    [text], [semantic], [meta] = mine["search_text"], mine["search_semantic"], mine["get_document_metadata"]
    for outcome in (text, semantic, meta, by_name):
        assert "error" not in outcome, outcome
    assert text["bucket"] == own and FACT in str(text["results"]), text
    assert [r["doc_id"] for r in text["results"]] == [doc_id], text
    assert FACT in str(semantic["results"]), semantic
    assert meta["bucket"] == own and meta["doc_id"] == doc_id and meta["title"], meta
    assert FACT in str(by_name["chunks"]), by_name

    # Her other conversation, and Bob: what a bucket and a document that do not exist get.
    for outcomes in (other_conversation, bobs):
        [_, kb_named, kb_nope] = outcomes["knowledge_base_search"]
        [text_named, text_nope] = outcomes["search_text"]
        [sem_named, sem_nope] = outcomes["search_semantic"]
        [meta_named, meta_nope] = outcomes["get_document_metadata"]
        assert f"unknown bucket 'nope'; available buckets: {SHARED}" in text_nope["error"], text_nope
        assert f"unknown bucket 'nope'; available buckets: {SHARED}" in sem_nope["error"], sem_nope
        assert f"unknown bucket 'nope'; available buckets: {SHARED}" in kb_nope["error"], kb_nope
        assert meta_nope["reason"] == "unknown_document", meta_nope
        assert without(own, text_named) == without("nope", text_nope)
        assert without(own, sem_named) == without("nope", sem_nope)
        assert without(own, kb_named) == without("nope", kb_nope)
        assert without(doc_id, meta_named) == without(NO_DOC, meta_nope)
        for outcome in (text_named, sem_named, kb_named, meta_named):
            assert "att_" not in without(own, outcome), outcome  # no private bucket's name, hers or another
            assert FACT not in str(outcome)


async def test_a_file_part_on_the_ai_sdk_face_is_followed_without_a_failed_tool(settings: Settings) -> None:
    """The AI SDK face attaches a ``file`` part to the chat's conversation: the offline
    answerer's page read of it is no failed tool there either."""
    encoded = base64.b64encode(NOTE.encode()).decode()
    part = {"type": "file", "mediaType": "text/markdown", "filename": "notes.md",
            "url": f"data:text/markdown;base64,{encoded}"}
    message = {"id": "m1", "role": "user", "parts": [part, {"type": "text", "text": QUESTION}]}
    body = {"id": "chat-file", "messages": [message], "trigger": "submit-message", "messageId": None}
    async with running_app(settings) as (base, _app), httpx.AsyncClient(base_url=base, timeout=60) as http:
        streamed = await http.post("/v1/agent/ui-stream", json=body)
    assert streamed.status_code == 200, streamed.text
    chunks = [orjson.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    tools = [(c["type"], c.get("toolName")) for c in chunks if c["type"].startswith("tool-")]
    assert ("tool-input-available", "search_text") in tools, tools
    assert not [c for c in chunks if c["type"] in ("tool-output-error", "tool-input-error")], chunks
    assert "seven minutes past dawn" in streamed.text


async def test_a_filtered_search_of_the_own_bucket_that_matches_nothing_counts_it(tmp_path: Path) -> None:
    """The "nothing matched" clarification of a filtered search counts the documents of the
    bucket searched: in the run's own attachment bucket they are the owner's to count
    (three notes without the condition), where they used to fail as an unknown bucket."""
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        own = attachment_bucket("u1", "c1")  # the Harness's run: user u1, conversation c1
        notes = [DocumentIn(text=f"lighthouse bell note {i}", title=f"note {i}", id=f"n{i}", source="notes.md")
                 for i in range(3)]
        await kb.ingest_documents(notes, bucket=own, private=True)
        async with httpx.AsyncClient() as http:
            registry = build_registry(kb, conversation_attachments=True)
            tools = Harness(kb, ToolExecutor(registry, validator=validate_arguments), http)
            args = {"bucket": own, "query": "lighthouse bell", "filters": {"source": "elsewhere.md"}}
            outcome, _ = await tools.call("search_text", args)
    finally:
        await kb.aclose()
    assert not outcome.is_error, outcome.content
    assert outcome.content["unmatched_conditions"] and outcome.content["documents_without_them"] == 3, outcome.content
