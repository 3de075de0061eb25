"""Another user's private bucket is no bucket at all, in every word the service answers.

Two JWT users on one served app: Alice attaches a file to her conversation (a private
bucket ``att_…``). Carol then names buckets that do not exist and Alice's private one in
a chat's ``context.buckets`` (native, OpenAI-compatible and AI SDK faces) and in the
tools' arguments (``knowledge_base_search``'s ``kb_id``, ``search_text``'s ``bucket``):
every answer is the same ``unknown_bucket`` for both, listing the shared buckets only,
so neither the list nor the status tells that Alice's bucket exists. A shared bucket
named in the context starts the run (201). The model is the Ollama fake, scripted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from app.config import Settings
from knowledge.attachments import attachment_bucket
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, ToolCall, ToolCalls, running_fake
from tests.test_compat_faces_owners import bearer, env
from tests.test_keyword_reuse_e2e import chat_bodies, tool_results

ALICE, CAROL = bearer("alice"), bearer("carol")
QUESTION = "When does the lighthouse keeper ring the bell?"
NOTE = b"# Lighthouse\n\nThe keeper rings the brass bell at dawn.\n"
ALICES = attachment_bucket("alice", "a-one")  # made by her upload below
NEVER = attachment_bucket("alice", "never-used")  # a private name that is no bucket
SHARED = "handbook, hr"


def tool_turn() -> list[Any]:
    """Carol's run: each tool names Alice's private bucket, then one that does not exist."""
    return [ToolCalls([
        ToolCall("knowledge_base_search", {"query": "bell", "kb_id": ALICES}),
        ToolCall("knowledge_base_search", {"query": "bell", "kb_id": "nope"}),
        ToolCall("search_text", {"bucket": ALICES, "query": "bell"}),
        ToolCall("search_text", {"bucket": "nope", "query": "bell"}),
    ])]


def answer_turn() -> list[Any]:
    return [ToolCall("generate_response", {
        "answer": "I could not search those buckets.", "sources": [], "confidence_score": 0.1,
        "used_internal_kb": False, "used_external_kb": False,
    })]


def without(name: str, outcome: dict[str, Any]) -> str:
    """The outcome's words with the named bucket's name taken out."""
    return str(outcome).replace(name, "<named>")


async def refusals(http: httpx.AsyncClient, named: str) -> list[httpx.Response]:
    """Carol's chat naming ``named`` in its context, on each face that takes one."""
    context = {"buckets": ["hr", named]}
    ui_message = {"id": "m1", "role": "user", "parts": [{"type": "text", "text": QUESTION}]}
    return [
        await http.post("/v1/agent/runs", headers=CAROL,
                        json={"message": QUESTION, "context_type": "knowledge", "context": context}),
        await http.post("/v1/agent/runs", headers=CAROL,
                        json={"message": QUESTION, "context_type": "knowledge", "context": {"bucket": named}}),
        await http.post("/v1/chat/completions", headers=CAROL, json={
            "model": "agentchat-knowledge", "messages": [{"role": "user", "content": QUESTION}], "context": context,
        }),
        await http.post("/v1/agent/ui-stream", headers=CAROL, json={
            "id": f"ui-{named}", "messages": [ui_message], "context_type": "knowledge", "context": context,
        }),
    ]


async def test_private_bucket_names_never_cross_users(tmp_path: Path) -> None:
    fake = FakeOllama([tool_turn(), answer_turn()])
    async with running_fake(fake.app) as ollama_url:
        settings = Settings.from_env(env(tmp_path))
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=10)
        async with (
            running_app(settings, provider=provider) as (base, app),
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            kb = app.state.services.rooms.named("knowledge").kb
            for shared in ("hr", "handbook"):
                await kb.create_bucket(shared)
            files = {"file": ("lighthouse.md", NOTE, "text/markdown")}
            up = await http.post("/v1/agent/conversations/a-one/attachments", files=files, headers=ALICE)
            assert up.status_code == 201, up.text
            assert ALICES in await kb.index.bucket_schemas()  # her private bucket exists

            answers = {name: await refusals(http, name) for name in ("nope", ALICES, NEVER)}
            # Alice's own private bucket is not a context's to name either (it is searched
            # in her conversation without being named): the same 400, same words.
            own = await http.post("/v1/agent/runs", headers=ALICE, json={
                "message": QUESTION, "context_type": "knowledge", "context": {"buckets": [ALICES]},
                "conversation_id": "a-one",
            })

            started = await http.post("/v1/agent/runs", headers=CAROL, json={
                "message": QUESTION, "context_type": "knowledge", "context": {"buckets": ["hr"]},
            })
            assert started.status_code == 201, started.text
            events = await collect_sse(http, "GET", f"/v1/agent/runs/{started.json()['run_id']}/events",
                                       headers=CAROL)
            assert events[-1].event == "message_complete", [e.event for e in events]

    for name, responses in answers.items():
        assert [r.status_code for r in responses] == [400] * 4, [r.text for r in responses]
        native, single, openai, ui = (r.json() for r in responses)
        assert [native["error"], single["error"], openai["error"]["code"], ui["error"]] == ["unknown_bucket"] * 4
        details = [native["detail"], single["detail"], openai["error"]["message"], ui["detail"]]
        assert details[0] == f"context.buckets: unknown bucket {name!r}; available buckets: {SHARED}", details
        assert details[1] == f"context.bucket: unknown bucket {name!r}; available buckets: {SHARED}", details
        for detail in details:
            assert f"unknown bucket {name!r}; available buckets: {SHARED}" in detail, detail
            assert "att_" not in detail.replace(name, "")
    assert own.status_code == 400 and own.json() == {
        "error": "unknown_bucket",
        "detail": f"context.buckets: unknown bucket {ALICES!r}; available buckets: {SHARED}",
    }

    # The tools' arguments: Alice's bucket and a name that is no bucket, answered alike.
    answered = chat_bodies(fake)[1]
    kb_private, kb_nope = tool_results(answered, "knowledge_base_search")
    text_private, text_nope = tool_results(answered, "search_text")
    assert f"unknown bucket 'nope'; available buckets: {SHARED}" in kb_nope["error"], kb_nope
    assert without(ALICES, kb_private) == without("nope", kb_nope)
    assert text_nope["reason"] == "unknown_bucket", text_nope
    assert f"unknown bucket 'nope'; available buckets: {SHARED}" in text_nope["error"], text_nope
    assert [b["bucket"] for b in text_nope["available_buckets"]] == ["handbook", "hr"]
    assert without(ALICES, text_private) == without("nope", text_nope)
    for outcome in (kb_nope, text_nope):
        assert ALICES not in str(outcome)
