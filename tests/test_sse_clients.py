"""The npm SSE clients themselves against the real server: ``@microsoft/fetch-event-source``,
``eventsource`` and ``eventsource-parser``, pinned in ``tests/js/package.json`` and installed
with ``npm ci`` when missing (as the browser test installs Chromium).

What they must see: the stream opens with its first event (``retry:`` rides in that
frame, so no client dispatches an empty message); heartbeats are events with data, never
a bare comment frame; and a client whose connection drops mid-run and that retries —
fetch-event-source re-POSTs the same body with ``Last-Event-ID`` (and the
``Idempotency-Key`` it was given), EventSource re-GETs with ``Last-Event-ID`` — gets the
rest of the *same* run: one run, one stored question, ids 1..N without a gap or repeat.

The drop is real: the client talks to the server through a loopback TCP proxy that cuts
the connection while the model is parked at a gate (so "mid-run" is a fact).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from app.server.auth import LOCAL_USER
from llm.types import ToolDefinition
from tests.conftest import running_app
from tests.support.deadline import within
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.node import NodeScript, npm_ci

JS_DIR = Path(__file__).parent / "js"
SCRIPT = JS_DIR / "sse_client.mjs"
BODY = {"message": "Tell me a two-part story.", "context_type": "workflow", "context": {}}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


# --- the npm packages, installed from the project's own files ---------------------------------


@pytest.fixture(scope="session")
def node() -> str:
    """``node``, with the pinned clients installed in tests/js/node_modules."""
    return npm_ci(JS_DIR)


@contextlib.asynccontextmanager
async def js_client(node: str, **spec: Any) -> AsyncIterator[NodeScript]:
    proc = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), orjson.dumps(spec).decode(),
        cwd=JS_DIR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "NODE_NO_WARNINGS": "1"},
    )
    client = NodeScript(proc)
    try:
        yield client
    finally:
        client.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(proc.wait(), 10)


def messages(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == "message"]


def run_events(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages(records) if m["event"] != "heartbeat"]


def has_chunk(text: str) -> Any:
    return lambda recs: any(m["event"] == "content_chunk" and orjson.loads(m["data"])["chunk"] == text
                            for m in messages(recs))


# --- a proxy that can cut connections ---------------------------------------------------------


class DroppingProxy:
    """Forwards loopback TCP to ``target``; ``drop()`` cuts every open connection."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.connections = 0
        self._open: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        self.drop()
        assert self._server is not None
        self._server.close()

    def drop(self) -> None:
        for writer in list(self._open):
            with contextlib.suppress(Exception):
                writer.transport.abort()  # an RST, as a dead network would look
        self._open.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self._open.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(Exception):
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._open.difference_update({writer, up_writer})


# --- the app ------------------------------------------------------------------------------------


def registry() -> ToolRegistry:
    reg = ToolRegistry([ToolSpec(ToolDefinition("noop", "Does nothing.", NO_ARGS), frozenset({"workflow"}))])

    async def noop(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome({"ok": True})

    reg.set_handler("noop", noop)
    return reg


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def stored_user_messages(app: Any, conversation_id: str) -> list[str]:
    svc = app.state.services
    await svc.storage.db.flush()
    return [m.payload.get("content") for m in await svc.conversations.messages(conversation_id, LOCAL_USER)
            if m.payload.get("role") == "user"]


async def stored_run_count(app: Any) -> int:
    svc = app.state.services
    await svc.storage.db.flush()
    row = await svc.storage.db.fetchone("SELECT COUNT(*) FROM runs")
    return int(row[0])


def assert_one_contiguous_run(events: list[dict[str, Any]]) -> dict[str, Any]:
    assert [m["id"] for m in events] == [str(i) for i in range(1, len(events) + 1)], [m["id"] for m in events]
    assert events[0]["event"] == "run_started" and events[-1]["event"] == "message_complete"
    assert [m["event"] for m in events].count("message_complete") == 1
    started = orjson.loads(events[0]["data"])
    assert orjson.loads(events[-1]["data"])["status"] == "completed"
    return started


def assert_no_empty_messages(records: list[dict[str, Any]]) -> None:
    """What the issue saw: fetch-event-source dispatching a frame without data as an
    empty message, which the app's JSON.parse then throws on (and the library retries)."""
    assert all(m.get("data") for m in messages(records)), records
    first = messages(records)[0]
    assert (first["id"], first["event"]) == ("1", "run_started")


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(orjson.loads(m["data"])["chunk"] for m in events if m["event"] == "content_chunk")


# --- tests --------------------------------------------------------------------------------------


async def test_eventsource_parser_sees_retry_in_the_first_event_and_no_bare_frames(
    node: str, settings: Settings
) -> None:
    provider = GatedProvider([GatedTurn(["Once ", "upon a time."])])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, _app):
        async with js_client(node, client="eventsource-parser", url=f"{base}/v1/agent/chat", body=BODY) as client:
            records = await client.finish()
    assert records[0] == {"kind": "open", "status": 200, "contentType": "text/event-stream; charset=utf-8"}
    # The retry field is parsed before the first event's dispatch: they share one frame.
    assert records[1] == {"kind": "retry", "ms": 2000}
    assert records[2]["kind"] == "message" and (records[2]["id"], records[2]["event"]) == ("1", "run_started")
    assert [r["kind"] for r in records].count("retry") == 1
    assert not [r for r in records if r["kind"] == "comment"]
    events = run_events(records)
    assert_one_contiguous_run(events)
    assert text_of(events) == "Once upon a time."


@pytest.mark.parametrize("retry_with", ["idempotency-key", "last-event-id"])
async def test_fetch_event_source_dropped_mid_run_retries_into_the_same_run(
    node: str, settings: Settings, retry_with: str
) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Part one. ", "Still part one. ", gate, "Part two."])])
    # Heartbeats every 0.2 s while the model is parked: they must not reach the app empty.
    # A wide re-attach window: the plain chat (no key) must still be there on the retry.
    cfg = settings.with_(heartbeat_s=0.2, chat_reattach_s=30)
    headers = {"Idempotency-Key": f"story-{uuid.uuid4().hex}"} if retry_with == "idempotency-key" else {}
    async with running_app(cfg, provider=provider, registry=registry(), embedder=None) as (base, app):
        proxy = DroppingProxy(port_of(base))
        async with proxy as via, js_client(
            node, client="fetch-event-source", url=f"{via}/v1/agent/chat", body=BODY, headers=headers
        ) as client:
            await client.until(has_chunk("Still part one. "), "the text before the gate")
            await within(gate.reached.wait(), "the model turn to reach its gate")
            await client.until(lambda recs: any(m["event"] == "heartbeat" for m in messages(recs)), "a heartbeat")
            [run] = list(app.state.services.runs._runs.values())
            assert not run.finished
            proxy.drop()  # the network fails mid-run
            await client.until(lambda recs: any(r["kind"] == "error" for r in recs), "the client to notice")
            # fetch-event-source retries after the server's `retry: 2000`, re-POSTing the same
            # body with Last-Event-ID (and the same headers).
            async with asyncio.timeout(30):
                while not (proxy.connections == 2 and run.followers == 1):
                    await asyncio.sleep(0.02)
            assert not run.finished and run.status != "cancelled"
            gate.open()
            records = await client.finish()
        assert len(app.state.services.runs._runs) == 1
        assert await stored_run_count(app) == 1
        started = assert_one_contiguous_run(run_events(records))
        assert started["run_id"] == run.id
        assert await stored_user_messages(app, run.conversation_id) == [BODY["message"]]
    assert_no_empty_messages(records)
    assert [r for r in records if r["kind"] == "open"] == [
        {"kind": "open", "status": 200, "contentType": "text/event-stream; charset=utf-8"}
    ] * 2
    assert [r["kind"] for r in records].count("error") == 1  # the drop; no JSON.parse failures
    assert text_of(run_events(records)) == "Part one. Still part one. Part two."
    assert all(m["id"] == "" or m["event"] != "heartbeat" for m in messages(records))


async def test_eventsource_reconnects_with_last_event_id_into_the_same_run(node: str, settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Before ", "the drop. ", gate, "After it."])])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            created = (await http.post("/v1/agent/runs", json=BODY)).json()
        run = app.state.services.runs.get(created["run_id"])
        proxy = DroppingProxy(port_of(base))
        async with proxy as via, js_client(node, client="eventsource", url=f"{via}{created['stream_url']}") as client:
            await client.until(has_chunk("the drop. "), "the text before the gate")
            proxy.drop()
            async with asyncio.timeout(30):
                while not (proxy.connections == 2 and run.followers == 1):
                    await asyncio.sleep(0.02)
            gate.open()
            records = await client.finish()
    assert_no_empty_messages(records)
    events = run_events(records)
    assert_one_contiguous_run(events)
    assert text_of(events) == "Before the drop. After it."
    assert [r["kind"] for r in records].count("open") == 2
