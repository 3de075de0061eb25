"""The Vercel AI SDK UI message stream, read by the ``ai`` package itself (npm, pinned in
``tests/js/package.json``) against a live server: ``parseJsonEventStream`` with the SDK's
``uiMessageChunkSchema`` validates every chunk and ``readUIMessageStream`` assembles the
message; a ``Chat`` over ``DefaultChatTransport`` does what ``useChat`` does, including
``resumeStream()`` after a real dropped connection (a loopback proxy cuts it while the
model is parked at a gate, so "mid-run" is a fact, not a timing guess).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import events
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from llm.extractive import ExtractiveProvider
from llm.provider import ProviderHealth
from llm.scripted import ScriptedCall, ScriptedProvider, ScriptedTurn
from llm.types import ChatRequest, MessageStart, StreamError, StreamEvent, ToolDefinition, ToolUseStart
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.node import NodeScript, npm_ci
from tests.test_sse_clients import DroppingProxy, port_of

JS_DIR = Path(__file__).parent / "js"
SCRIPT = JS_DIR / "ai_sdk_client.mjs"
DOCS = [
    {
        "id": "doc-resume",
        "title": "Resuming a run",
        "url": "https://docs.example.com/resume",
        "text": "Runs outlive their connections. To resume a stream after a disconnect, reconnect with the "
        "Last-Event-ID header and the server replays every event you missed.",
    },
    {
        "id": "doc-browser",
        "title": "Resuming in a browser",
        "text": "A browser resumes a stream after a disconnect by itself: its EventSource reconnects and "
        "sends the Last-Event-ID header.",
    },
]
QUESTION = "How do I resume a stream after a disconnect?"


@pytest.fixture(scope="module")
def node() -> str:
    return npm_ci(JS_DIR)


@contextlib.asynccontextmanager
async def js(node: str, **spec: Any) -> AsyncIterator[NodeScript]:
    proc = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), orjson.dumps(spec).decode(), cwd=JS_DIR,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    client = NodeScript(proc)
    try:
        yield client
    finally:
        if proc.returncode is None:
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 10)


def of(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == kind]


def ui_body(chat_id: str, text: str, **extra: Any) -> dict[str, Any]:
    """The body useChat's DefaultChatTransport posts for a first message."""
    message = {"id": "msg-user-1", "role": "user", "parts": [{"type": "text", "text": text}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", "messageId": None, **extra}


def texts(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message["parts"] if p["type"] == "text")


def assistant_of(state: dict[str, Any]) -> dict[str, Any]:
    return next(m for m in state["messages"] if m["role"] == "assistant")


async def test_the_sdk_reader_assembles_text_tool_and_source_parts(node: str, offline: Settings) -> None:
    async with running_app(offline, provider=ExtractiveProvider()) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            assert (await http.post("/v1/kb/documents", json={"documents": DOCS})).status_code == 200
        async with js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=ui_body("chat-kb-1", QUESTION)) as c:
            records = await c.finish()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            replay = await http.get("/v1/agent/ui-stream/chat-kb-1/stream")
        [message] = [r["message"] for r in of(records, "message")]
        stored = await app.state.services.run_store.get(message["id"])
    [response] = of(records, "response")
    assert response["status"] == 200 and response["headers"]["x-vercel-ai-ui-message-stream"] == "v1"
    assert response["headers"]["content-type"].startswith("text/event-stream")
    assert not of(records, "error"), records  # every chunk passed the SDK's schema
    chunks = [r["chunk"] for r in of(records, "chunk")]
    types = [c["type"] for c in chunks]
    assert types[0] == "start" and types[-1] == "finish" and chunks[-1]["finishReason"] == "stop"
    # Three model turns: the search, the found page read again (search_text), the answer.
    assert types.count("start-step") == types.count("finish-step") == 3
    run_id = message["id"]
    assert stored is not None and stored.conversation_id == "chat-kb-1" and stored.status == "completed"
    assert message["role"] == "assistant" and "Last-Event-ID" in texts(message)
    assert message["metadata"]["run_id"] == run_id and message["metadata"]["status"] == "completed"
    tools = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert [(t["toolName"], t["state"]) for t in tools] == [
        ("knowledge_base_search", "output-available"),
        ("search_text", "output-available"),
        ("generate_response", "output-available"),
    ]
    assert all(t["providerExecuted"] and t["output"]["duration_ms"] >= 0 for t in tools)
    # Each tool part holds what the call ran with and what came back, in the stream's line.
    search, read, answered = tools
    assert search["input"]["query"] and isinstance(read["input"]["doc_id"], str)
    assert "Last-Event-ID" in answered["input"]["answer"]
    assert re.match(r"\d+ passages? from \d+ documents?: \u201c", search["output"]["summary"]), search["output"]
    assert answered["output"]["summary"].startswith("answer delivered, citing 2 sources: \u201c")
    # The input arrives once, after the call's start: the part is input-streaming until then.
    starts = [c for c in chunks if c["type"] == "tool-input-start"]
    inputs = [c for c in chunks if c["type"] == "tool-input-available"]
    assert len(starts) == len(inputs) == 3 and all(c["input"] for c in inputs)
    urls = [p for p in message["parts"] if p["type"] == "source-url"]
    documents = [p for p in message["parts"] if p["type"] == "source-document"]
    assert [(p["sourceId"], p["url"]) for p in urls] == [("doc-resume#0", "https://docs.example.com/resume")]
    assert [(p["sourceId"], p["title"]) for p in documents] == [("doc-browser#0", "Resuming in a browser")]
    # The answer is shown once: streamed as text, not repeated when generate_response delivers it.
    [answer] = [p for p in message["parts"] if p["type"] == "text"]
    assert answer["state"] == "done"
    # Within AGENT_FINISHED_RUN_MEMORY_S the chat's stream can be read again, identically.
    assert replay.status_code == 200 and replay.text.endswith("data: [DONE]\n\n")
    assert [orjson.loads(ln[6:]) for ln in replay.text.split("\n") if ln.startswith("data: {")] == chunks


async def test_use_chat_resumes_a_dropped_stream_from_the_run_log(node: str, settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Part one. ", "Still part one. ", gate, "Part two."])])
    # The client comes back well within the re-attach window; keep-alives flow while parked.
    cfg = settings.with_(chat_reattach_s=30, heartbeat_s=0.2)
    async with running_app(cfg, provider=provider, embedder=None) as (base, app):
        proxy = DroppingProxy(port_of(base))
        async with proxy as via, js(
            node, mode="chat", api=f"{via}/v1/agent/ui-stream", chatId="chat-drop-1",
            text="Tell me a two-part story.", body={"context_type": "workflow"},  # a plain answer: no flow owed
        ) as client:
            await within(gate.reached.wait(), "the model turn to reach its gate")
            await client.until(
                lambda recs: any(r["text"] == "Part one. Still part one. " for r in of(recs, "update")),
                "the text before the gate",
            )
            [run] = list(app.state.services.runs._runs.values())
            proxy.drop()  # the network fails mid-run
            await client.until(lambda recs: of(recs, "state"), "the failed request to settle")
            assert of(client.records, "state")[0]["status"] == "error"
            assert not run.finished
            await client.send("resume")  # what useChat({resume: true}) does on the next mount
            async with asyncio.timeout(30):
                while not (proxy.connections == 2 and run.followers == 1):
                    await asyncio.sleep(0.02)
            gate.open()
            await client.until(lambda recs: len(of(recs, "state")) == 2, "the resumed stream to end")
            records = await client.finish()
        assert len(app.state.services.runs._runs) == 1 and run.status == "completed"
    state = of(records, "state")[-1]
    assert state["status"] == "ready" and state["error"] is None
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]  # one answer, not two
    answer = assistant_of(state)
    assert answer["id"] == run.id and texts(answer) == "Part one. Still part one. Part two."
    assert of(records, "finish")[-1]["finishReason"] == "stop"


async def test_resume_is_204_without_a_run_and_a_reload_replays_a_just_finished_one(
    node: str, settings: Settings
) -> None:
    provider = ScriptedProvider([ScriptedTurn(chunks=["All ", "done."])])
    async with running_app(settings, provider=provider, embedder=None) as (base, app):
        api = f"{base}/v1/agent/ui-stream"
        async with js(node, mode="chat", api=api, chatId="chat-none") as client:
            await client.send("resume")
            await client.until(lambda recs: of(recs, "state"), "the resume to settle")
            nothing = await client.finish()
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            ran = await http.post(  # workflow: a plain answer owes no knowledge flow
                "/v1/agent/ui-stream", json=ui_body("chat-reload", "Finish it.", context_type="workflow")
            )
            assert ran.status_code == 200 and ran.text.endswith("data: [DONE]\n\n")
        user = ui_body("chat-reload", "Finish it.")["messages"]
        async with js(node, mode="chat", api=api, chatId="chat-reload", messages=user) as client:
            await client.send("resume")
            await client.until(lambda recs: of(recs, "state"), "the replay to end")
            reloaded = await client.finish()
        [run] = list(app.state.services.runs._runs.values())
    assert of(nothing, "state") == [{"kind": "state", "status": "ready", "error": None, "messages": []}]
    assert not of(nothing, "finish")  # 204: no request was streamed
    state = of(reloaded, "state")[0]
    assert [m["role"] for m in state["messages"]] == ["user", "assistant"]
    assert assistant_of(state)["id"] == run.id and texts(assistant_of(state)) == "All done."


def preview_registry() -> ToolRegistry:
    no_args = {"type": "object", "properties": {}, "additionalProperties": False}
    reg = ToolRegistry(
        [ToolSpec(ToolDefinition("draft_workflow", "Drafts a workflow.", no_args), frozenset({"workflow"}))]
    )

    async def draft(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        preview = events.WorkflowPreview(description="Email on low stock", workflow={"nodes": []}, is_update=False)
        return ToolOutcome({"preview_sent": True}, events=[preview])

    reg.set_handler("draft_workflow", draft)
    return reg


async def test_previews_are_data_parts_and_errors_reach_the_sdk(node: str, settings: Settings) -> None:
    provider = ScriptedProvider(
        lambda request, index: ScriptedTurn(calls=[ScriptedCall("draft_workflow", {})])
        if index == 0
        else ScriptedTurn(chunks=["Here is the draft. "], error="the model went away")
    )
    async with running_app(settings, provider=provider, registry=preview_registry(), embedder=None) as (base, _):
        body = ui_body("chat-preview", "Email me when stock is low.", context_type="workflow")
        async with js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=body) as client:
            records = await client.finish()
    [message] = [r["message"] for r in of(records, "message")]
    [preview] = [p for p in message["parts"] if p["type"] == "data-workflow-preview"]
    assert preview["data"] == {"description": "Email on low stock", "workflow": {"nodes": []}, "is_update": False}
    [tool] = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    assert (tool["toolName"], tool["state"]) == ("draft_workflow", "output-available")
    assert texts(message) == "Here is the draft. "
    assert [r["message"] for r in of(records, "error")] == ["the model went away"]
    chunks = [r["chunk"] for r in of(records, "chunk")]
    assert chunks[-1] == {"type": "finish", "finishReason": "error", "messageMetadata": message["metadata"]}


async def test_a_cancelled_run_ends_with_abort(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Started. ", gate, "Never sent."])])
    lines: list[str] = []
    async with (
        running_app(settings.with_(heartbeat_s=0.1), provider=provider, embedder=None) as (base, _),
        httpx.AsyncClient(base_url=base, timeout=30) as http,
        http.stream("POST", "/v1/agent/ui-stream", json=ui_body("chat-stop", "Go.")) as response,
    ):
        async for line in response.aiter_lines():
            lines.append(line)
            if line.startswith('data: {"type":"start"'):
                run_id = orjson.loads(line[6:])["messageId"]
            if line == ": ping" and any("Started. " in ln for ln in lines):  # parked: keep-alives flow
                await gate.reached.wait()
                assert (await http.post(f"/v1/agent/runs/{run_id}/cancel")).status_code == 200
    chunks = [orjson.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]
    assert chunks[-1] == {"type": "abort", "reason": "the run was cancelled"}
    assert "finish" not in [c["type"] for c in chunks] and ": ping" in lines  # a comment: no chunk
    assert [ln for ln in lines if ln][-1] == "data: [DONE]"


async def test_bad_bodies_are_refused_before_anything_streams(settings: Settings) -> None:
    assistant = {"id": "a", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        no_id = await http.post("/v1/agent/ui-stream", json={"messages": ui_body("x", "hi")["messages"]})
        assistant_last = await http.post("/v1/agent/ui-stream", json={"id": "c1", "messages": [assistant]})
        context = await http.post("/v1/agent/ui-stream", json=ui_body("c2", "hi", context_type="billing"))
    assert (no_id.status_code, no_id.json()["error"]) == (400, "invalid_field")
    assert assistant_last.status_code == 400 and "must be a user message" in assistant_last.json()["detail"]
    assert (context.status_code, context.json()["error"]) == (400, "unknown_context_type")


@pytest.mark.parametrize("text", [5, ["What is a bucket?"], {"text": "hi"}], ids=["number", "array", "object"])
async def test_a_text_part_whose_text_is_not_a_string_is_refused(settings: Settings, text: Any) -> None:
    """A text part's ``text`` of another type was turned into its Python repr (``5``,
    ``['What is a bucket?']``) and answered, the chat titled with it: in the question and
    in an earlier turn alike, it is a 400 naming the part."""
    earlier = {"id": "m0", "role": "user", "parts": [{"type": "text", "text": text}]}
    answer = {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "An answer."}]}
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        question = ui_body("c-text", "ignored")
        question["messages"][0]["parts"][0]["text"] = text
        last = await http.post("/v1/agent/ui-stream", json=question)
        history = ui_body("c-text-2", "What is a bucket?")
        history["messages"][:0] = [earlier, answer]
        first = await http.post("/v1/agent/ui-stream", json=history)
        chats = (await http.get("/v1/agent/conversations")).json()["conversations"]
    assert (last.status_code, last.json()["error"]) == (400, "invalid_field"), last.text
    assert last.json()["detail"] == "messages[0].parts[0].text must be a string"
    assert (first.status_code, first.json()["error"]) == (400, "invalid_field"), first.text
    assert first.json()["detail"] == "messages[0].parts[0].text must be a string"
    assert chats == []  # nothing started



async def test_a_chat_id_the_post_refuses_is_a_400_on_the_resume_too(settings: Settings) -> None:
    """The resume (``GET …/{chat_id}/stream``) answered 204 ("no live run") for an id the
    POST refuses with 400: a client with a broken id was told all is well."""
    long_id = "c" * 3000
    async with running_app(settings) as (base, _), httpx.AsyncClient(base_url=base, timeout=30) as http:
        posted = await http.post("/v1/agent/ui-stream", json=ui_body(long_id, "hi"))
        resumed = await http.get(f"/v1/agent/ui-stream/{long_id}/stream")
        odd = await http.get("/v1/agent/ui-stream/a%20b/stream")
        fine = await http.get("/v1/agent/ui-stream/no-such-chat/stream")
    assert (posted.status_code, posted.json()["error"]) == (400, "invalid_field")
    assert (resumed.status_code, resumed.json()["error"]) == (400, "invalid_field"), resumed.text
    assert "chat id" in resumed.json()["detail"]
    assert odd.status_code == 400, odd.text
    assert fine.status_code == 204  # a well-formed id with nothing live: still the SDK's 204

class CutCallProvider:
    """A model that begins a tool call and never finishes it: after ``tool_use_start`` its
    stream fails, or it parks at ``gate`` until the run is cancelled."""

    name = "cut"
    model = "cut"

    def __init__(self, gate: Gate | None = None) -> None:
        self.gate = gate

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        yield ToolUseStart("call_cut", "knowledge_base_search", 0)
        if self.gate is not None:
            self.gate.reached.set()
            await self.gate.opened.wait()
        yield StreamError("the model stream broke", "provider_error")

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "cut")

    async def aclose(self) -> None:
        return None


def cut_part(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The one tool part the SDK's reader assembled; every chunk passed its schema."""
    assert not [r for r in of(records, "error") if "schema" in r["message"].lower()], records
    [message] = [r["message"] for r in of(records, "message")]
    [part] = [p for p in message["parts"] if p["type"] == "dynamic-tool"]
    return part


async def test_a_call_the_model_stream_broke_off_ends_as_an_error(node: str, settings: Settings) -> None:
    """2287d5a sends a call's input with its result; without a result the part stayed
    ``input-streaming`` for ever, a tool a useChat UI shows running after the run failed."""
    async with running_app(settings, provider=CutCallProvider(), embedder=None) as (base, _):
        body = ui_body("chat-cut", "Search the docs.")
        async with js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=body) as client:
            records = await client.finish()
    part = cut_part(records)
    assert (part["toolName"], part["state"], part["input"]) == ("knowledge_base_search", "output-error", None)
    assert part["errorText"]
    chunks = [r["chunk"] for r in of(records, "chunk")]
    types = [c["type"] for c in chunks]
    assert "tool-input-error" in types and types.index("tool-input-error") < types.index("error")
    assert chunks[-1]["type"] == "finish" and chunks[-1]["finishReason"] == "error"


async def test_a_call_of_a_cancelled_run_ends_as_an_error(node: str, settings: Settings) -> None:
    gate = Gate()
    async with running_app(settings, provider=CutCallProvider(gate), embedder=None) as (base, _):
        body = ui_body("chat-cut-stop", "Search the docs.")
        async with (
            js(node, mode="reader", url=f"{base}/v1/agent/ui-stream", body=body) as client,
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            await within(gate.reached.wait(), "the model to begin its call")
            await client.until(
                lambda recs: any(r["chunk"]["type"] == "tool-input-start" for r in of(recs, "chunk")),
                "the call's part",
            )
            run_id = next(r["chunk"]["messageId"] for r in of(client.records, "chunk") if r["chunk"]["type"] == "start")
            assert (await http.post(f"/v1/agent/runs/{run_id}/cancel")).status_code == 200
            records = await client.finish()
    part = cut_part(records)
    assert (part["state"], part["input"], part["errorText"]) == ("output-error", None, "the run was cancelled")
    assert [r["chunk"] for r in of(records, "chunk")][-1]["type"] == "abort"
