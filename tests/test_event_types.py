"""The SSE contract as code (``events/``): the bytes each class writes, its JSON Schema,
the client-side parser, the TypeScript types generated from it, and every event of real
runs checked against the published schemas.

The real runs go through uvicorn on loopback, parsed as a browser parses them: a
scripted model (workflow previews, a failed tool, malformed calls, a clarification, a
heartbeat while it is parked at a gate), the offline extractive model answering from the
knowledge base (``response``), and a run interrupted at shutdown and carried on by the
next process (``run_resumed``). Together they must emit every event class there is.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

import events
from agenttools.core.previews import (
    table_config_preview_outcome,
    table_config_validation_outcome,
    workflow_preview_outcome,
)
from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from agenttools.rag.clarification import Clarification as ClarificationRequest
from agenttools.rag.clarification import clarification_outcome
from app.config import Settings
from app.factory import create_app
from llm.extractive import ExtractiveProvider
from llm.provider import ProviderHealth
from llm.scripted import ScriptedCall
from llm.types import (
    ChatRequest,
    ContentDelta,
    MessageComplete,
    MessageStart,
    StreamEvent,
    ToolDefinition,
    ToolUseInput,
    ToolUseStart,
    Usage,
)
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.node import npm_ci
from tests.support.server import serve_app
from tests.support.sse import SSEEvent, iter_sse
from tests.test_shutdown import SlowProvider, settings_for, start_run_then_stop

ROOT = Path(__file__).resolve().parent.parent
TS_DIR = ROOT / "clients" / "typescript"
DRAFT = jsonschema.Draft202012Validator


# --- bytes: what clients received before the classes existed ----------------------------------

WF = {"name": "w", "actions": [{"id": "a1", "config": {"limit": 1e16, "ratio": 0.1}}], "edges": []}

#: (event, the dict the emitters built before) — the JSON must be the same bytes.
LEGACY: list[tuple[events.Event, dict[str, Any]]] = [
    (events.RunStarted(run_id="r", conversation_id="c"), {"run_id": "r", "conversation_id": "c"}),
    (
        events.RunResumed(
            run_id="r", reason="the service restarted", checkpoint_seq=4,
            discarded=events.Discarded(from_seq=5, to_seq=7, reason="cut off"), pending_tool_calls=1,
        ),
        {"run_id": "r", "reason": "the service restarted", "checkpoint_seq": 4,
         "discarded": {"from_seq": 5, "to_seq": 7, "reason": "cut off"}, "pending_tool_calls": 1},
    ),
    (
        events.RunResumed(run_id="r", reason="x", checkpoint_seq=0, discarded=None, pending_tool_calls=0),
        {"run_id": "r", "reason": "x", "checkpoint_seq": 0, "discarded": None, "pending_tool_calls": 0},
    ),
    (
        events.ToolSelection(context_type="workflow", core=["a"], rag=[events.RagScore(name="b", score=0.8123)],
                             fallback=None, tools=["a", "b"]),
        {"context_type": "workflow", "core": ["a"], "rag": [{"name": "b", "score": 0.8123}], "fallback": None,
         "tools": ["a", "b"]},
    ),
    (events.MessageStart(turn=0), {"turn": 0}),
    (events.ContentChunk(chunk='Hé "quoted"\n\u2028</script>'), {"chunk": 'Hé "quoted"\n\u2028</script>'}),
    (
        events.ToolCallStart(tool_use_id="call_1", tool_name="get_weather"),
        {"tool_use_id": "call_1", "name": "get_weather"},
    ),
    (
        events.WorkflowPreview(description="d", workflow=WF, is_update=False),
        {"description": "d", "workflow": WF, "is_update": False},
    ),
    (
        events.WorkflowPreview(description="d", workflow=WF, is_update=True, workflow_id="w1"),
        {"description": "d", "workflow": WF, "is_update": True, "workflow_id": "w1"},
    ),
    (
        events.TableConfigPreview(description="c", config={"title": "t"}, is_update=True, config_id="c1",
                                  config_name="n"),
        {"description": "c", "config": {"title": "t"}, "is_update": True, "config_id": "c1", "name": "n"},
    ),
    (events.TableConfigValidationError(errors=["title: title is required"]), {"errors": ["title: title is required"]}),
    (
        events.ToolCallResult(tool_use_id="call_1", tool_name="t", is_error=False, duration_ms=12.35),
        {"tool_use_id": "call_1", "name": "t", "is_error": False, "duration_ms": 12.35},
    ),
    (
        events.ToolCallResult(tool_use_id="call_1", tool_name="t", is_error=True, duration_ms=0.0, error="why"),
        {"tool_use_id": "call_1", "name": "t", "is_error": True, "duration_ms": 0.0, "error": "why"},
    ),
    (
        events.ApprovalRequired(
            tool_use_id="call_2", tool_name="cancel_order", arguments={"order_id": "ORD-1"}, reason="it destroys",
            expires_at=1700000000.5,
        ),
        {"tool_use_id": "call_2", "name": "cancel_order", "arguments": {"order_id": "ORD-1"}, "reason": "it destroys",
         "expires_at": 1700000000.5},
    ),
    (
        events.Clarification(type="no_results", missing_info="a date range"),
        {"type": "no_results", "missing_info": "a date range"},
    ),
    (
        events.Response(
            answer="A [d#1].",
            sources=[events.Source(id="d#1", title="Doc", kind="internal", url="https://x.example/d",
                                   location="p. 2", metadata={"year": 2024}),
                     events.Source(id="e", title="E", kind="external")],
            confidence_score=None, used_internal_kb=True, used_external_kb=False,
        ),
        {"answer": "A [d#1].",
         "sources": [{"id": "d#1", "title": "Doc", "kind": "internal", "url": "https://x.example/d",
                      "location": "p. 2", "metadata": {"year": 2024}},
                     {"id": "e", "title": "E", "kind": "external"}],
         "confidence_score": None, "used_internal_kb": True, "used_external_kb": False},
    ),
    (events.Error(message="m", code="max_loops"), {"message": "m", "code": "max_loops"}),
    (
        events.MessageComplete(status="completed", run_id="r", conversation_id="c", turns=2,
                               usage=events.TokenUsage(input_tokens=10, output_tokens=3)),
        {"status": "completed", "run_id": "r", "conversation_id": "c", "turns": 2,
         "usage": {"input_tokens": 10, "output_tokens": 3}},
    ),
    (events.Heartbeat(ts=1700000000), {"ts": 1700000000}),
]


@pytest.mark.parametrize(("event", "legacy"), LEGACY, ids=lambda v: getattr(v, "name", ""))
def test_each_event_writes_the_bytes_clients_received_before(event: events.Event, legacy: dict[str, Any]) -> None:
    assert event.to_json() == orjson.dumps(legacy)
    assert events.EVENT_TYPES[event.name] is type(event)
    again = events.parse_event(event.name, event.to_json())
    assert again == event and again.to_json() == event.to_json()
    DRAFT(events.event_data_schemas()[event.name]).validate(legacy)


def test_every_event_class_is_in_the_table() -> None:
    assert {type(e) for e, _ in LEGACY} == set(events.EVENT_TYPES.values())
    assert all(cls.name == name for name, cls in events.EVENT_TYPES.items())


def test_content_chunk_encodes_every_code_point_as_orjson_does() -> None:
    """ContentChunk takes msgspec's encoder (the hot path); strings must come out as orjson's."""
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 65536):
        text = "".join(points[i : i + 65536])
        assert events.ContentChunk(chunk=text).to_json() == orjson.dumps({"chunk": text})


# --- parsing, as a client does it ----------------------------------------------------------------


def test_unknown_events_are_handed_back_not_refused() -> None:
    unknown = events.parse_event("usage_report", b'{"tokens": 3}')
    assert isinstance(unknown, events.UnknownEvent)
    assert (unknown.name, unknown.data, unknown.to_json()) == ("usage_report", {"tokens": 3}, b'{"tokens": 3}')
    odd = events.parse_event("something_new", "not json")
    assert isinstance(odd, events.UnknownEvent) and odd.data == {} and odd.raw == b"not json"


def test_new_keys_are_ignored_and_wrong_data_is_refused() -> None:
    ev = events.parse_event("tool_call_start", '{"tool_use_id":"c","name":"t","added_later":1}')
    assert ev == events.ToolCallStart(tool_use_id="c", tool_name="t") and ev.name == "tool_call_start"
    with pytest.raises(events.EventDecodeError, match="message_complete"):
        events.parse_event("message_complete", '{"status":"done","run_id":"r","conversation_id":"c","turns":1,'
                                               '"usage":{"input_tokens":1,"output_tokens":1}}')
    with pytest.raises(events.EventDecodeError):
        events.parse_event("content_chunk", "{}")


# --- schemas --------------------------------------------------------------------------------------


def test_schemas_are_self_contained_draft_2020_12() -> None:
    schemas = events.event_data_schemas()
    assert list(schemas) == list(events.EVENT_TYPES)
    for name, schema in schemas.items():
        DRAFT.check_schema(schema)
        assert "$ref" not in orjson.dumps(schema).decode(), name  # droppable into an OpenAPI component
        assert schema["type"] == "object" and schema["description"], name
    # Optional keys are absent, never null: they are not required and are not nullable.
    preview = schemas["workflow_preview"]
    assert "workflow_id" not in preview["required"] and preview["properties"]["workflow_id"]["type"] == "string"
    bad = {"status": "done", "run_id": "r", "conversation_id": "c", "turns": 1,
           "usage": {"input_tokens": 1, "output_tokens": 1}}
    with pytest.raises(jsonschema.ValidationError):
        DRAFT(schemas["message_complete"]).validate(bad)
    DRAFT.check_schema(events.event_stream_schema())


# --- TypeScript ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    return npm_ci(TS_DIR)


def generate_types(node: str, out: Path) -> None:
    schema = subprocess.run(
        [sys.executable, "-m", "events.typescript"], cwd=ROOT, capture_output=True, check=True, timeout=60
    ).stdout
    done = subprocess.run(
        [node, str(TS_DIR / "generate.mjs"), str(out)], input=schema, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()


def tsc(node: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, str(TS_DIR / "node_modules" / "typescript" / "bin" / "tsc"), *args],
        cwd=cwd, capture_output=True, text=True, timeout=180,
    )


def test_checked_in_typescript_types_are_current(node: str, tmp_path: Path) -> None:
    generate_types(node, tmp_path / "events.d.ts")
    fresh = (tmp_path / "events.d.ts").read_text()
    assert "export type AgentEvent =" in fresh and 'event: "content_chunk";' in fresh
    assert (TS_DIR / "events.d.ts").read_text() == fresh, (
        "clients/typescript/events.d.ts is stale: run `npm run generate` in clients/typescript"
    )


def test_typescript_usage_compiles_strict_and_misuse_does_not(node: str, tmp_path: Path) -> None:
    """One ``tsc --noEmit --strict`` over the shipped usage example and a misuse file (with
    the shipped tsconfig): the example compiles clean, and the types do constrain — a
    field the event does not have and an event not narrowed by name are both errors."""
    for name in ("events.d.ts", "example.ts"):
        (tmp_path / name).write_text((TS_DIR / name).read_text())
    (tmp_path / "misuse.ts").write_text(
        'import type { AgentEvent } from "./events";\n'
        "export function text(e: AgentEvent): string {\n"
        '  if (e.event === "content_chunk") return e.data.text;\n'
        "  return e.data.chunk;\n"
        "}\n"
    )
    (tmp_path / "tsconfig.json").write_bytes(orjson.dumps(
        {"extends": str(TS_DIR / "tsconfig.json"), "files": ["events.d.ts", "example.ts", "misuse.ts"]}
    ))
    done = tsc(node, "-p", "tsconfig.json", "--noEmit", "--strict", cwd=tmp_path)
    errors = [line for line in done.stdout.splitlines() if ": error TS" in line]
    assert done.returncode != 0
    assert [e.split(",")[0] for e in errors] == ["misuse.ts(3", "misuse.ts(4"], done.stdout
    assert all("TS2339" in e for e in errors), done.stdout


# --- every event of real runs, against its schema -------------------------------------------------

ALL = frozenset({"workflow", "tables", "knowledge"})
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def tool_registry() -> ToolRegistry:
    """Tools that return what the real preview and clarification builders return."""
    names = ["preview_wf", "preview_tc", "bad_tc", "broken", "ask"]
    reg = ToolRegistry([ToolSpec(ToolDefinition(n, f"Test tool {n}.", NO_ARGS), ALL) for n in names])

    async def preview_wf(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return workflow_preview_outcome(description="Mail on new orders", workflow=WF, result={"valid": True},
                                        workflow_id="rule-1")

    async def preview_tc(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return table_config_preview_outcome(config={"title": "Late"}, description_of_changes="new table",
                                            config_id=None, name="Late orders", warnings=[])

    async def bad_tc(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return table_config_validation_outcome(errors=[{"field": "title", "message": "title is required"}],
                                               warnings=[])

    async def broken(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome.error("the backend said no", reason="backend_error")

    async def ask(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return clarification_outcome(ctx.state, ClarificationRequest("no_results", "Which year?"), {})

    for name, handler in [("preview_wf", preview_wf), ("preview_tc", preview_tc), ("bad_tc", bad_tc),
                          ("broken", broken), ("ask", ask)]:
        reg.set_handler(name, handler)
    return reg


async def scripted_runs(settings: Settings) -> list[SSEEvent]:
    """A run with previews, a failed call, a clarification and a heartbeat (the model is
    parked at a gate until the client has seen one); then a run that fails."""
    gate = Gate()
    provider = GatedProvider([
        GatedTurn(steps=["Let me ", gate, "check."],
                  calls=[ScriptedCall("preview_wf", {}), ScriptedCall("preview_tc", {}),
                         ScriptedCall("bad_tc", {}), ScriptedCall("broken", {})]),
        GatedTurn(calls=[ScriptedCall("ask", {})]),
        GatedTurn(calls=[ScriptedCall("broken", "{not json")]),
        GatedTurn(calls=[ScriptedCall("broken", "{not json")]),
    ])
    seen: list[SSEEvent] = []
    async with (
        running_app(settings.with_(heartbeat_s=0.05), provider=provider, registry=tool_registry(), embedder=None)
        as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        body = {"message": "Set it all up", "context_type": "workflow", "context": {}}
        async with client.stream("POST", f"{base}/v1/agent/chat", json=body) as response:
            assert response.status_code == 200
            async for ev in iter_sse(response.aiter_lines()):
                seen.append(ev)
                if ev.event == "heartbeat":
                    gate.open()
        failed = await collect_sse(client, "POST", f"{base}/v1/agent/chat", json={**body, "message": "Again"})
    assert seen[-1].json()["status"] == "completed" and failed[-1].json()["status"] == "failed"
    return seen + failed


async def knowledge_run(tmp_path: Path) -> list[SSEEvent]:
    """The offline extractive model through the mandatory flow: search, then ``response``."""
    settings = Settings.from_env({
        "AGENT_DB_PATH": str(tmp_path / "kb.db"), "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_ADMIN_OPEN": "true",
        "AGENT_EMBEDDER": "none", "AGENT_LLM_PROVIDER": "extractive", "OLLAMA_HOST": "http://127.0.0.1:9",
    })
    docs = [{"id": "doc-resume", "title": "Resuming a run",
             "text": "To resume a stream after a disconnect, reconnect with the Last-Event-ID header and the "
                     "server replays every event you missed, then follows the run live."}]
    async with (
        running_app(settings, provider=ExtractiveProvider()) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        assert (await client.post(f"{base}/v1/kb/documents", json={"documents": docs})).status_code == 200
        got = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                json={"message": "How do I resume a stream?", "context_type": "knowledge"})
    assert got[-1].json()["status"] == "completed"
    return got


async def resumed_run(tmp_path: Path) -> list[SSEEvent]:
    """A run cut off at shutdown, carried on by the next process, replayed from the start."""
    (tmp_path / "resume").mkdir()
    run_id = await start_run_then_stop(tmp_path / "resume", SlowProvider(1, 0, hold=True), deadline_s=0.2)
    app = create_app(settings_for(tmp_path / "resume"), provider=SlowProvider(2, 0), registry=ToolRegistry(),
                     embedder=None)
    async with serve_app(app) as base, httpx.AsyncClient(timeout=30) as client:
        return await collect_sse(client, "GET", f"{base}/v1/agent/runs/{run_id}/events")


async def approval_run(settings: Settings) -> list[SSEEvent]:
    """A call of a tool that needs approval: the run parks, its stream ends at ``approval_required``."""
    schema = {"type": "object", "properties": {"table": {"type": "string"}}, "additionalProperties": False}
    spec = ToolSpec(ToolDefinition("wipe_table", "Wipes a table.", schema), frozenset({"workflow"}), asks_approval=True)
    provider = GatedProvider([GatedTurn([], [ScriptedCall("wipe_table", {"table": "stock"})])])
    async with (
        running_app(settings, provider=provider, registry=ToolRegistry([spec]), embedder=None) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        got = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                json={"message": "Wipe the stock table", "context_type": "workflow"})
    assert got[-1].event == "approval_required"
    return got


async def test_every_event_of_real_runs_matches_its_schema(settings: Settings, tmp_path: Path) -> None:
    streamed = (
        await scripted_runs(settings) + await knowledge_run(tmp_path) + await resumed_run(tmp_path)
        + await approval_run(settings)
    )
    schemas = events.event_data_schemas()
    for ev in streamed:
        assert ev.event in schemas, f"an event without a class: {ev.event}"
        DRAFT(schemas[ev.event]).validate(ev.json())
        parsed = events.parse_event(ev.event, ev.data)
        assert isinstance(parsed, events.EVENT_TYPES[ev.event])
        assert parsed.to_json() == ev.data.encode(), ev.event  # every key is a field, in wire order
    assert {ev.event for ev in streamed} == set(events.EVENT_TYPES)


class TextAfterCallProvider:
    """Turn 1 streams a tool call and then more text (models may); turn 2 answers."""

    name = model = "text-after-call"

    def __init__(self) -> None:
        self.turns = 0

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        self.turns += 1
        yield MessageStart()
        if self.turns == 1:
            yield ToolUseStart("call_1", "broken", 0)
            yield ToolUseInput("call_1", "{}")
            yield ContentDelta("and some text after the call")
            yield MessageComplete(stop_for_tool_use=True, usage=Usage(1, 1))
        else:
            yield ContentDelta("Done.")
            yield MessageComplete(stop_for_tool_use=False, usage=Usage(1, 1))

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "text after call")

    async def aclose(self) -> None:
        return None


async def test_text_after_a_tool_call_in_one_turn_is_streamed(settings: Settings) -> None:
    """Provider events become run events by class (``app/agent/turn.py``); a piece of a
    call's arguments must not be taken for the turn's text (it once was: the run crashed)."""
    async with (
        running_app(settings, provider=TextAfterCallProvider(), registry=tool_registry(), embedder=None) as (base, _),
        httpx.AsyncClient(timeout=30) as client,
    ):
        got = await collect_sse(client, "POST", f"{base}/v1/agent/chat",
                                json={"message": "Go", "context_type": "workflow"})
    assert [e.event for e in got if e.event != "heartbeat"] == [
        "run_started", "tool_selection", "message_start", "tool_call_start", "content_chunk", "tool_call_result",
        "message_start", "content_chunk", "message_complete",
    ]
    assert [e.json()["chunk"] for e in got if e.event == "content_chunk"] == ["and some text after the call", "Done."]
    assert got[-1].json()["status"] == "completed"
