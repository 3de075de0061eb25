"""Runs that outlive connections: resume with Last-Event-ID, many followers, replay from
memory and from the SQLite run log, cancel, and clients that leave.

Everything runs over real uvicorn and is read with the browser-faithful SSE parser. The
model is a gated script: tests open gates to move the run on, so "mid-run" is a fact.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest

from agenttools.core.registry import ToolContext, ToolOutcome, ToolRegistry, ToolSpec
from app.config import Settings
from app.runs.run import Run
from llm.scripted import ScriptedCall
from llm.types import ToolDefinition
from tests.conftest import collect_sse, running_app
from tests.support.gated_provider import Gate, GatedProvider, GatedTurn
from tests.support.sse import SSEEvent

ALL = frozenset({"workflow", "tables", "knowledge"})
BODY = {"message": "What is the weather in Paris?", "context_type": "workflow", "context": {}}

Frame = tuple[str | None, str, str]


class Tools:
    """A weather tool and a tool that waits until it is cancelled."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()

    def registry(self) -> ToolRegistry:
        schema = {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 100}},
            "required": ["city"],
            "additionalProperties": False,
        }
        reg = ToolRegistry(
            [
                ToolSpec(ToolDefinition("get_weather", "Current weather for a city.", schema), ALL),
                ToolSpec(
                    ToolDefinition("wait_for_backend", "Waits for a slow backend.", {"type": "object", "properties": {}}),
                    ALL,
                ),
            ]
        )

        async def weather(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            return ToolOutcome({"city": args["city"], "temp_c": 21})

        async def wait(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
            return ToolOutcome({})

        reg.set_handler("get_weather", weather)
        reg.set_handler("wait_for_backend", wait)
        return reg


def frames(events: list[SSEEvent]) -> list[Frame]:
    return [(e.id, e.event, e.data) for e in events if e.event != "heartbeat"]


def logged(run: Run) -> list[Frame]:
    return [(str(e.seq), e.event, e.data) for e in run.events]


def assert_contiguous(fs: list[Frame]) -> None:
    assert [f[0] for f in fs] == [str(i) for i in range(1, len(fs) + 1)]
    assert [f[1] for f in fs].count("message_complete") == 1 and fs[-1][1] == "message_complete"


def text_of(fs: list[Frame]) -> str:
    return "".join(orjson.loads(d)["chunk"] for _, name, d in fs if name == "content_chunk")


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
    """Wait for a condition of the server's state; the timeout only guards against a hang."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def start(client: httpx.AsyncClient, base: str, body: dict[str, Any] = BODY) -> dict[str, Any]:
    response = await client.post(f"{base}/v1/agent/runs", json=body)
    assert response.status_code == 201, response.text
    created = response.json()
    assert set(created) == {"run_id", "conversation_id", "stream_url"}
    assert created["stream_url"].startswith(f"/v1/agent/runs/{created['run_id']}/events?token=")
    return created


def until_chunk(text: str) -> Callable[[SSEEvent], bool]:
    return lambda e: e.event == "content_chunk" and e.json()["chunk"] == text


@pytest.mark.parametrize("resume_with", ["last-event-id", "after"])
async def test_resume_after_a_drop_equals_an_uninterrupted_read(settings: Settings, resume_with: str) -> None:
    first, second = Gate(), Gate()
    provider = GatedProvider(
        [
            GatedTurn(["It is ", "sunny ", first, "in ", "Paris", second], [ScriptedCall("get_weather", {"city": "Paris"})]),
            GatedTurn([" and 21 °C."]),
        ]
    )
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            url = created["stream_url"]
            run = app.state.services.runs.get(created["run_id"])
            uninterrupted = asyncio.create_task(collect_sse(client, "GET", url))

            before = await collect_sse(client, "GET", url, stop=until_chunk("sunny "))
            await until(lambda: run.followers == 1, "the dropped connection to be noticed")
            first.open()
            await second.reached.wait()  # "in ", "Paris" were logged while this client was away
            last_id = before[-1].id
            assert last_id is not None
            if resume_with == "last-event-id":
                resumed_task = asyncio.create_task(collect_sse(client, "GET", url, headers={"Last-Event-ID": last_id}))
            else:
                resumed_task = asyncio.create_task(collect_sse(client, "GET", f"{url}&after={last_id}"))
            await until(lambda: run.followers == 2, "the resumed reader to attach")
            second.open()  # the rest arrives live
            resumed = await resumed_task
            whole = await uninterrupted

            replay = await collect_sse(client, "GET", f"{url}&after=0")

    joined = frames(before) + frames(resumed)
    assert_contiguous(joined)
    assert joined == frames(whole) == frames(replay) == logged(run)
    assert text_of(joined) == "It is sunny in Paris and 21 °C."
    names = [f[1] for f in joined]
    assert names.index("tool_call_start") < names.index("tool_call_result")
    assert orjson.loads(joined[-1][2])["status"] == "completed"


async def test_three_followers_see_the_same_sequence(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["a", gate, "b", "c", "d"])])
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            run = app.state.services.runs.get(created["run_id"])
            await gate.reached.wait()
            readers = [asyncio.create_task(collect_sse(client, "GET", created["stream_url"])) for _ in range(3)]
            await until(lambda: run.followers == 3, "three followers")
            gate.open()
            seen = [frames(evs) for evs in await asyncio.gather(*readers)]
    assert seen[0] == seen[1] == seen[2] == logged(run)
    assert_contiguous(seen[0])
    assert text_of(seen[0]) == "abcd"
    assert run.followers == 0


async def test_finished_run_replays_then_answers_204(settings: Settings) -> None:
    provider = GatedProvider([GatedTurn(["Hello", ", world"])])
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            url = created["stream_url"]
            run = app.state.services.runs.get(created["run_id"])
            await run.wait_finished()
            replay = frames(await collect_sse(client, "GET", url))
            tail = frames(await collect_sse(client, "GET", url, headers={"Last-Event-ID": "3"}))
            at_end = await client.get(url, headers={"Last-Event-ID": str(run.last_seq)})
            past_end = await client.get(f"{url}&after={run.last_seq + 5}")
            bad = await client.get(url, headers={"Last-Event-ID": "not-a-number"})
    assert replay == logged(run)
    assert_contiguous(replay)
    assert tail == replay[3:]
    assert at_end.status_code == 204 and at_end.content == b""
    assert past_end.status_code == 204
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_field"


async def test_replay_comes_from_the_sqlite_log_once_the_run_left_memory(settings: Settings) -> None:
    provider = GatedProvider([GatedTurn(["Stored ", "answer"])])
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        svc = app.state.services
        svc.storage.runs.settler.every_s = 3600  # no settle on the quiet timer in between: this test settles
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            url = created["stream_url"]
            run = svc.runs.get(created["run_id"])
            await run.wait_finished()
            expected = logged(run)
            await svc.storage.db.flush()
            assert svc.runs.sweep(now=time.time() + svc.runs.grace_s + 1) == 1
            assert svc.runs.get(run.id) is None

            # Ended, not settled yet: its events are still in SQLite's live log (issue 23).
            logged_rows = await svc.storage.db.fetchall("SELECT seq FROM run_log WHERE run_id = ?", (run.id,))
            assert len(logged_rows) == len(expected)
            replay = frames(await collect_sse(client, "GET", url))
            tail = frames(await collect_sse(client, "GET", url, headers={"Last-Event-ID": "2"}))
            # Settled: all in ``run_events``, none left in the log; the same replay.
            await svc.storage.runs.settle_log()
            assert await svc.storage.db.fetchall("SELECT seq FROM run_log WHERE run_id = ?", (run.id,)) == []
            clustered = await svc.storage.db.fetchall("SELECT seq FROM run_events WHERE run_id = ?", (run.id,))
            assert len(clustered) == len(expected)
            settled = frames(await collect_sse(client, "GET", url))
            settled_tail = frames(await collect_sse(client, "GET", url, headers={"Last-Event-ID": "2"}))
            at_end = await client.get(url, headers={"Last-Event-ID": str(len(expected))})
            cancel = await client.post(f"/v1/agent/runs/{run.id}/cancel")
    assert replay == expected == settled
    assert tail == expected[2:] == settled_tail
    assert at_end.status_code == 204
    assert cancel.status_code == 200 and cancel.json() == {"run_id": run.id, "status": "completed"}


async def test_cancel_is_idempotent_and_keeps_the_partial_answer(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["Partial ", "answer", gate, " never sent"])])
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        svc = app.state.services
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            run = svc.runs.get(created["run_id"])
            await gate.reached.wait()
            follower = asyncio.create_task(collect_sse(client, "GET", created["stream_url"]))
            await until(lambda: run.followers == 1, "the follower")
            cancel_url = f"/v1/agent/runs/{run.id}/cancel"
            first, second = await asyncio.gather(client.post(cancel_url), client.post(cancel_url))
            third = await client.post(cancel_url)
            seen = frames(await follower)
            await svc.storage.db.flush()
            history = (await client.get(f"/v1/agent/conversations/{run.conversation_id}")).json()["messages"]
            assert svc.runs.sweep(now=time.time() + svc.runs.grace_s + 1) == 1
            after_eviction = await client.post(cancel_url)
    for response in (first, second, third, after_eviction):
        assert response.status_code == 200
        assert response.json() == {"run_id": run.id, "status": "cancelled"}
    assert seen == logged(run)
    assert_contiguous(seen)
    assert orjson.loads(seen[-1][2])["status"] == "cancelled"
    assert text_of(seen) == "Partial answer"
    assert [(m["role"], m["content"]) for m in history] == [("user", BODY["message"]), ("assistant", "Partial answer")]


async def test_cancel_reaches_a_running_tool(settings: Settings) -> None:
    tools = Tools()
    provider = GatedProvider([GatedTurn(["Checking."], [ScriptedCall("wait_for_backend", {})])])
    async with running_app(settings, provider=provider, registry=tools.registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            await tools.started.wait()
            response = await client.post(f"/v1/agent/runs/{created['run_id']}/cancel")
            assert tools.cancelled.is_set()
            run = app.state.services.runs.get(created["run_id"])
    assert response.json()["status"] == "cancelled"
    assert run.status == "cancelled" and [e.event for e in run.events][-1] == "message_complete"


async def test_a_run_whose_client_left_keeps_going(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["The answer ", gate, "is waiting."])])
    async with running_app(settings, provider=provider, registry=Tools().registry(), embedder=None) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            url = created["stream_url"]
            run = app.state.services.runs.get(created["run_id"])
            before = await collect_sse(client, "GET", url, stop=until_chunk("The answer "))
            await until(lambda: run.followers == 0 and run.last_detached_at is not None, "the client to leave")
            assert not run.finished
            gate.open()
            await run.wait_finished()
            rest = await collect_sse(client, "GET", url, headers={"Last-Event-ID": before[-1].id or ""})
    joined = frames(before) + frames(rest)
    assert joined == logged(run)
    assert run.status == "completed" and text_of(joined) == "The answer is waiting."


async def test_followers_get_retry_and_heartbeats_without_ids(settings: Settings) -> None:
    gate = Gate()
    provider = GatedProvider([GatedTurn(["tick", gate, "tock"])])
    async with running_app(
        settings.with_(heartbeat_s=0.05), provider=provider, registry=Tools().registry(), embedder=None
    ) as (base, app):
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            created = await start(client, base)
            await gate.reached.wait()
            beats = 0

            def two_beats(e: SSEEvent) -> bool:
                nonlocal beats
                beats += e.event == "heartbeat"
                if beats == 2:
                    gate.open()
                return e.event == "message_complete"

            async with client.stream("GET", created["stream_url"]) as response:
                head = b""
                async for chunk in response.aiter_bytes():
                    head += chunk
                    if b"\n\n" in head:
                        break
            assert head.startswith(b"retry: ")
            events = await collect_sse(client, "GET", created["stream_url"], stop=two_beats)
    heartbeats = [e for e in events if e.event == "heartbeat"]
    assert len(heartbeats) >= 2 and all(e.id is None for e in heartbeats)
    assert "ts" in heartbeats[0].json()
    assert_contiguous(frames(events))
    assert text_of(frames(events)) == "ticktock"
