"""Streams open with their first event, and ``POST /v1/agent/chat`` is safe to retry.

* ``retry:`` rides in the first event's frame (live, replayed from memory, replayed from
  the store); heartbeats are one frame with a comment line and a named event.
* ``Idempotency-Key`` (per user, stored with the run): a repeat resumes the run the key
  started, after ``Last-Event-ID``; the run outlives its connection; a repeat after the
  run ended replays it; ``POST /v1/agent/runs`` answers the same run.
* ``Last-Event-ID`` without a key: the same body resumes the newest matching run of the
  user; anything else starts a new run. A plain chat whose client leaves for good is
  cancelled after ``AGENT_CHAT_REATTACH_S``.

Everything over a real uvicorn server; the model is a gated script.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import orjson

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from llm.types import ToolDefinition
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.sse import SSEEvent

BODY = {"message": "Count to three, slowly.", "context_type": "workflow", "context": {}}
NO_ARGS = {"type": "object", "properties": {}, "additionalProperties": False}


def registry() -> ToolRegistry:
    reg = ToolRegistry([ToolSpec(ToolDefinition("noop", "Does nothing.", NO_ARGS), frozenset({"workflow"}))])

    async def noop(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        return ToolOutcome({"ok": True})

    reg.set_handler("noop", noop)
    return reg


def ids(events: list[SSEEvent]) -> list[str | None]:
    return [e.id for e in events if e.event != "heartbeat"]


def text(events: list[SSEEvent]) -> str:
    return "".join(e.json()["chunk"] for e in events if e.event == "content_chunk")


def chunk(value: str) -> Any:
    return lambda e: e.event == "content_chunk" and e.json()["chunk"] == value


async def until(predicate: Any, what: str, timeout: float = 10) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


async def head_bytes(client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> bytes:
    """The body up to the end of its first frame."""
    seen = b""
    async with client.stream(method, url, **kwargs) as response:
        assert response.status_code == 200
        async for part in response.aiter_bytes():
            seen += part
            if b"\n\n" in seen:
                break
    return seen


async def user_messages(client: httpx.AsyncClient, conversation_id: str) -> list[str]:
    got = (await client.get(f"/v1/agent/conversations/{conversation_id}")).json()["messages"]
    return [m["content"] for m in got if m["role"] == "user"]


async def test_retry_rides_in_the_first_event_frame_live_and_replayed(settings: Settings) -> None:
    provider = GatedProvider([GatedTurn(["one"]), GatedTurn(["two"])])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            live = await head_bytes(client, "POST", "/v1/agent/chat", json=BODY)
            created = (await client.post("/v1/agent/runs", json=BODY)).json()
            run = svc.runs.get(created["run_id"])
            await run.wait_finished()
            from_memory = await head_bytes(client, "GET", created["stream_url"], headers={"Last-Event-ID": "2"})
            await svc.storage.db.flush()
            svc.runs.sweep(now=time.time() + 3600)
            assert svc.runs.get(run.id) is None
            from_store = await head_bytes(client, "GET", created["stream_url"])
    assert live.startswith(b"retry: 2000\nid: 1\nevent: run_started\ndata: {")
    assert from_memory.startswith(b"retry: 2000\nid: 3\nevent: ")
    assert from_store.startswith(b"retry: 2000\nid: 1\nevent: run_started\ndata: {")


async def test_heartbeats_are_events_with_a_comment_never_a_bare_frame(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["tick", gate, "tock"])])
    async with running_app(
        settings.with_(heartbeat_s=0.05), provider=provider, registry=registry(), embedder=None
    ) as (base, _app):
        raw = b""
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            async with client.stream("POST", "/v1/agent/chat", json=BODY) as response:
                async for part in response.aiter_bytes():
                    raw += part
                    if raw.count(b"event: heartbeat") == 3:
                        gate.open()
                    if b"event: message_complete" in raw:
                        break
    frames = [f for f in raw.decode().split("\n\n") if f.strip()]
    assert all("\ndata: " in f or f.startswith("data: ") for f in frames), frames  # no frame without data
    # The stream's first frame carries ``retry:``; on a loaded machine a heartbeat can be
    # that frame (the run's first event not yet durable when the first beat is due).
    beats = [f.removeprefix("retry: 2000\n") for f in frames if "event: heartbeat" in f]
    assert len(beats) >= 3 and all(f.startswith(": ping\nevent: heartbeat\ndata: {\"ts\":") for f in beats)
    assert [f for f in frames if f.startswith("retry:")] == [frames[0]]


async def test_idempotency_key_resumes_the_run_it_started(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["one ", "two ", gate, "three"])])
    # reattach 0: a plain chat would be cancelled at once; a keyed one must outlive its connection.
    cfg = settings.with_(chat_reattach_s=0)
    key = {"Idempotency-Key": "count-0001"}
    async with running_app(cfg, provider=provider, registry=registry(), embedder=None) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            first = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers=key, stop=chunk("two "))
            [run] = svc.runs.recent("local")
            await until(lambda: run.followers == 0, "the first connection to close")
            await asyncio.sleep(0.1)
            assert not run.finished and not run.task.done()  # not cancelled: the key says "I'll be back"
            resumed_task = asyncio.create_task(
                collect_sse(client, "POST", "/v1/agent/chat", json=BODY,
                            headers={**key, "Last-Event-ID": first[-1].id or ""})
            )
            await until(lambda: run.followers == 1, "the retry to attach")
            gate.open()
            resumed = await resumed_task
            # After the end: the same key replays the whole run, or what follows Last-Event-ID.
            replay = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers=key)
            tail = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY,
                                     headers={**key, "Last-Event-ID": "4"})
            at_end = await client.post("/v1/agent/chat", json=BODY,
                                       headers={**key, "Last-Event-ID": str(run.last_seq)})
            # Once the run left memory, from the store.
            await svc.storage.db.flush()
            svc.runs.sweep(now=time.time() + 3600)
            assert svc.runs.get(run.id) is None
            stored = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers=key)
            questions = await user_messages(client, run.conversation_id)
            runs = (await svc.storage.db.fetchone("SELECT COUNT(*) FROM runs"))[0]
    joined = first + resumed
    assert ids(joined) == [str(i) for i in range(1, run.last_seq + 1)]
    assert text(joined) == "one two three" and joined[-1].json()["status"] == "completed"
    assert [(e.id, e.data) for e in replay] == [(e.id, e.data) for e in stored] == [(e.id, e.data) for e in joined]
    assert ids(tail) == [str(i) for i in range(5, run.last_seq + 1)]
    assert at_end.status_code == 200 and at_end.headers["content-type"].startswith("text/event-stream")
    assert at_end.content == b""  # nothing newer: an empty stream (fetch-event-source retries on 204)
    assert questions == [BODY["message"]] and runs == 1 and len(provider.requests) == 1


async def test_idempotency_keys_are_per_user_checked_and_shared_with_the_runs_route(settings: Settings) -> None:
    provider = GatedProvider([GatedTurn(["a"]), GatedTurn(["b"]), GatedTurn(["c"])])
    async with running_app(settings, provider=provider, registry=registry(), embedder=None) as (base, _app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            made = await client.post("/v1/agent/runs", json=BODY, headers={"Idempotency-Key": "k1"})
            again = await client.post("/v1/agent/runs", json=BODY, headers={"Idempotency-Key": "k1"})
            chat_same_key = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY,
                                              headers={"Idempotency-Key": "k1"})
            other_conversation = await client.post(
                "/v1/agent/chat", json={**BODY, "conversation_id": "elsewhere"}, headers={"Idempotency-Key": "k1"}
            )
            bad = await client.post("/v1/agent/chat", json=BODY, headers={"Idempotency-Key": "has space"})
            too_long = await client.post("/v1/agent/runs", json=BODY, headers={"Idempotency-Key": "k" * 256})
            new = await client.post("/v1/agent/runs", json=BODY, headers={"Idempotency-Key": "k2"})
    assert made.status_code == 201 and again.status_code == 200
    assert again.json()["run_id"] == made.json()["run_id"]
    assert again.json()["conversation_id"] == made.json()["conversation_id"]
    assert chat_same_key[0].json()["run_id"] == made.json()["run_id"]
    assert other_conversation.status_code == 422 and other_conversation.json()["error"] == "idempotency_key_reused"
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_header"
    assert too_long.status_code == 400
    assert new.status_code == 201 and new.json()["run_id"] != made.json()["run_id"]
    assert len(provider.requests) == 2


async def test_a_retry_is_not_refused_by_the_run_limit(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["held", gate, " done"])])
    async with running_app(
        settings.with_(max_runs_per_user=1), provider=provider, registry=registry(), embedder=None
    ) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            key = {"Idempotency-Key": "limit-1"}
            first = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers=key, stop=chunk("held"))
            another = await client.post("/v1/agent/chat", json={**BODY, "message": "Something else"})
            retry_task = asyncio.create_task(
                collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers={**key, "Last-Event-ID": first[-1].id})
            )
            [run] = app.state.services.runs.recent("local")
            await until(lambda: run.followers == 1, "the retry to attach")
            gate.open()
            retry = await retry_task
    assert another.status_code == 429 and another.json()["error"] == "too_many_runs"
    assert ids(first + retry) == [str(i) for i in range(1, run.last_seq + 1)]


async def test_last_event_id_resumes_the_same_body_and_nothing_else(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["first ", gate, "answer"]), GatedTurn(["second answer"])])
    async with running_app(
        settings.with_(chat_reattach_s=30), provider=provider, registry=registry(), embedder=None
    ) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            first = await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, stop=chunk("first "))
            [run] = svc.runs.recent("local")
            await until(lambda: run.followers == 0, "the drop")
            retry_task = asyncio.create_task(
                collect_sse(client, "POST", "/v1/agent/chat", json=BODY, headers={"Last-Event-ID": first[-1].id})
            )
            await until(lambda: run.followers == 1, "the retry to attach")
            gate.open()
            retry = await retry_task
            # Another message with a Last-Event-ID is not a retry of that run: a new run.
            other = await collect_sse(client, "POST", "/v1/agent/chat", json={**BODY, "message": "Something else"},
                                      headers={"Last-Event-ID": "3"})
            # Nor is the same message in another conversation.
            elsewhere = await collect_sse(client, "POST", "/v1/agent/chat",
                                          json={**BODY, "conversation_id": "conv-elsewhere"},
                                          headers={"Last-Event-ID": "3"})
    assert ids(first + retry) == [str(i) for i in range(1, run.last_seq + 1)]
    assert text(first + retry) == "first answer"
    assert other[0].json()["run_id"] != run.id and ids(other)[0] == "1"
    assert elsewhere[0].json()["conversation_id"] == "conv-elsewhere" and ids(elsewhere)[0] == "1"


async def test_a_plain_chat_whose_client_never_returns_is_cancelled_after_the_window(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["partial", gate, " never"])])
    async with running_app(
        settings.with_(chat_reattach_s=0.3), provider=provider, registry=registry(), embedder=None
    ) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await collect_sse(client, "POST", "/v1/agent/chat", json=BODY, stop=chunk("partial"))
            [run] = app.state.services.runs.recent("local")
            await until(lambda: run.followers == 0, "the drop")
            left_at = time.monotonic()
            assert not run.finished
            await asyncio.wait_for(run.wait_finished(), 10)
            waited = time.monotonic() - left_at
    assert run.status == "cancelled"
    assert orjson.loads(run.events[-1].data)["status"] == "cancelled"
    assert waited >= 0.2  # the window was honoured (a lower bound only: no upper timing assertions)
