"""Approvals (issue 25 item 3), end to end on SQLite: a real app on loopback, the Ollama
fake as the model, and the fake MCP ``desk`` server over streamable HTTP, whose
``cancel_order`` is annotated ``destructiveHint: true`` — so by default its calls wait
for the user. Each call the server executes is counted in ``desk.calls``: "exactly once"
is asserted there, where the side effect happens.

Two JWT users: the run's owner decides; anyone else gets 404. A parked run holds no
live-run slot: its stream ends after ``approval_required`` (no ``message_complete``), and
the decision's answer carries the ``stream_url`` that follows the run on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from app.config import Settings
from app.server.auth import sign_hs256
from client import AgentClient
from events import ApprovalRequired, parse_event
from llm.ollama import OllamaProvider
from tests.conftest import collect_sse, running_app
from tests.fakes import FakeOllama, Text, ToolCall, running_fake
from tests.fakes.mcp_server import DeskState, build_server
from tests.support.sse import SSEEvent

pytestmark = pytest.mark.asyncio(loop_scope="module")

SECRET = "approvals-secret-0123456789abcdef"
ASK = "Cancel the customer order ORD-1234 for good; cancel the order by its order number."


def bearer(sub: str) -> dict[str, str]:
    now = int(time.time())
    return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, SECRET)}


ALICE, BOB = bearer("alice"), bearer("bob")


@dataclass(slots=True)
class World:
    base: str
    app: Any
    fake: FakeOllama
    desk: DeskState

    def cancels(self) -> list[dict[str, Any]]:
        return [args for name, args in self.desk.calls if name == "cancel_order"]

    async def start(self, steps: list[Callable[[dict[str, Any]], list[Any]]]) -> list[SSEEvent]:
        """Ask; the stream ends where the run parks (or at its end)."""
        for step in steps:
            self.fake.add_turn(step)
        async with httpx.AsyncClient(timeout=60, headers=ALICE) as client:
            return await collect_sse(client, "POST", f"{self.base}/v1/agent/chat",
                                     json={"message": ASK, "context_type": "workflow"})

    async def decide(self, run_id: str, tool_use_id: str, body: dict[str, Any],
                     who: dict[str, str] = ALICE) -> httpx.Response:
        async with httpx.AsyncClient(timeout=30, headers=who) as client:
            return await client.post(f"{self.base}/v1/agent/runs/{run_id}/approvals/{tool_use_id}", json=body)

    async def follow(self, url: str) -> list[SSEEvent]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await collect_sse(client, "GET", f"{self.base}{url}")

    async def status(self, run_id: str) -> str:
        stored = await self.app.state.services.run_store.get(run_id)
        return str(stored.status)


def cancel_call(body: dict[str, Any]) -> list[Any]:
    return [ToolCall("cancel_order", {"order_id": "ORD-1234", "reason": "customer asked"})]


def say(text: str) -> Callable[[dict[str, Any]], list[Any]]:
    return lambda body: [Text(text)]


def tool_messages(body: dict[str, Any], name: str) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool" and m.get("tool_name") == name]


def parked(events: list[SSEEvent]) -> dict[str, Any]:
    names = [e.event for e in events]
    assert "message_complete" not in names, names
    assert names[-1] == "approval_required", names
    return events[-1].json()  # type: ignore[no-any-return]


def settings_for(tmp: Path, ollama_url: str, desk_url: str, **extra: str) -> Settings:
    tmp.mkdir(parents=True, exist_ok=True)
    config = tmp / "mcp-servers.toml"
    config.write_text(f'[servers.desk]\nurl = "{desk_url}/mcp"\n')
    return Settings.from_env({
        "AGENT_DB_PATH": str(tmp / "agent.db"),
        "AGENT_INGEST_SAMPLE_KB": "false",
        "AGENT_EMBEDDER": "hashing",
        "AGENT_CACHE_DIR": str(tmp / "cache"),
        "AGENT_MCP_SERVERS": str(config),
        "OLLAMA_HOST": ollama_url,
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": SECRET,
        **extra,
    })


@contextlib.asynccontextmanager
async def desk_world(tmp: Path, **extra: str) -> AsyncIterator[World]:
    """A served app (JWT users, ``settings_for(**extra)``) over a fake Ollama and the MCP
    desk server, yielded once the desk's ``cancel_order`` is in the catalog."""
    desk_server, desk = build_server("desk")
    fake = FakeOllama([])
    async with running_fake(desk_server.streamable_http_app()) as desk_url, running_fake(fake.app) as ollama_url:
        settings = settings_for(tmp, ollama_url, desk_url, **extra)
        provider = OllamaProvider(ollama_url, "llama3.2", timeout=30)
        async with running_app(settings, provider=provider) as (base, app):
            registry = app.state.services.agent.registry
            async with asyncio.timeout(60):
                while "cancel_order" not in registry:
                    await asyncio.sleep(0.05)
            yield World(base, app, fake, desk)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    async with desk_world(tmp_path_factory.mktemp("approvals")) as w:
        yield w


async def test_the_destructive_tool_needs_approval_and_the_read_only_one_does_not(world: World) -> None:
    registry = world.app.state.services.agent.registry
    assert registry.spec("cancel_order").needs_approval
    assert not registry.spec("lookup_order").needs_approval  # annotated readOnlyHint: true
    assert not any(s.needs_approval for s in registry if s.name in {"preview_workflow", "knowledge_base_search"})


async def test_approved_call_runs_exactly_once_after_the_run_waited(world: World) -> None:
    before = len(world.cancels())
    events = await world.start([cancel_call, say("The order ORD-1234 is cancelled.")])
    wait = parked(events)
    run_id = events[0].json()["run_id"]
    assert wait["name"] == "cancel_order" and wait["arguments"] == {"order_id": "ORD-1234", "reason": "customer asked"}
    assert wait["reason"] and wait["expires_at"] > time.time()
    assert await world.status(run_id) == "waiting_approval"
    assert len(world.cancels()) == before  # not executed while waiting
    # It holds no live-run slot here.
    assert run_id not in {r.id for r in world.app.state.services.runs.active()}

    tool_use_id = wait["tool_use_id"]
    assert (await world.decide(run_id, tool_use_id, {"decision": "approve"}, who=BOB)).status_code == 404
    assert (await world.decide(run_id, tool_use_id, {"decision": "maybe"})).status_code == 400
    assert (await world.decide(run_id, "call_unknown", {"decision": "approve"})).status_code == 404
    r = await world.decide(run_id, tool_use_id, {"decision": "approve"})
    assert r.status_code == 202, r.text
    assert (await world.decide(run_id, tool_use_id, {"decision": "reject"})).status_code == 409

    rest = await world.follow(r.json()["stream_url"])
    names = [e.event for e in rest]
    assert names.count("message_complete") == 1 and rest[-1].json()["status"] == "completed", names
    assert rest[0].event == "run_resumed" and "approved" in rest[0].json()["reason"]
    result = next(e.json() for e in rest if e.event == "tool_call_result" and e.json()["name"] == "cancel_order")
    assert not result["is_error"]
    assert world.cancels()[before:] == [{"order_id": "ORD-1234", "reason": "customer asked"}]
    assert await world.status(run_id) == "completed"
    assert (await world.decide(run_id, tool_use_id, {"decision": "approve"})).status_code == 409
    async with httpx.AsyncClient(timeout=30) as client:
        metrics = (await client.get(f"{world.base}/metrics")).text
    assert 'agentchat_approval_decisions_total{decision="approve"}' in metrics
    assert "agentchat_runs_parked_for_approval_total" in metrics


async def test_a_rejection_goes_back_to_the_model_as_the_result(world: World) -> None:
    before = len(world.cancels())
    seen: list[list[str]] = []

    def reply(body: dict[str, Any]) -> list[Any]:
        seen.append(tool_messages(body, "cancel_order"))
        return [Text("I did not cancel it.")]

    events = await world.start([cancel_call, reply])
    wait = parked(events)
    run_id = events[0].json()["run_id"]
    r = await world.decide(run_id, wait["tool_use_id"], {"decision": "reject"})
    assert r.status_code == 202, r.text
    rest = await world.follow(r.json()["stream_url"])
    assert rest[-1].event == "message_complete" and rest[-1].json()["status"] == "completed"
    result = next(e.json() for e in rest if e.event == "tool_call_result")
    assert result["is_error"] and result["error"].startswith("rejected_by_user")
    assert "rejected_by_user" in seen[0][0]
    assert len(world.cancels()) == before


async def test_a_decided_run_the_periodic_claim_took_is_followed_not_ended(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decided run is claimable at once, so the lease upkeep's periodic claim (every
    ``lease_s / 10``) may take it before the decision's own claim: the route then answers
    202 while that claim is still reading the run back, not yet in memory here. The
    decision's ``stream_url`` followed in that window answered 204 (the run "ended, every
    event seen": an EventSource stops there) — it must follow the run on instead. The
    window is held open here: the claim's read of the run waits until the follower has
    looked the run up."""
    svc = world.app.state.services
    store = svc.run_store
    events = await world.start([cancel_call, say("I left the order as it is.")])
    wait = parked(events)
    run_id = events[0].json()["run_id"]
    reading, follower_looked, release = asyncio.Event(), asyncio.Event(), asyncio.Event()
    answered = False
    claims: list[asyncio.Task[int]] = []
    real_decide, real_events_after, real_get = store.decide, store.events_after, store.get

    async def decide(*args: Any, **kwargs: Any) -> bool:
        won = await real_decide(*args, **kwargs)
        if won:  # the periodic claim comes first
            claims.append(asyncio.create_task(svc.runs.take_over()))
            await asyncio.wait_for(reading.wait(), 30)
        return won

    async def events_after(rid: str, after: int, *args: Any, **kwargs: Any) -> Any:
        if rid == run_id and after == 0 and not release.is_set():  # the claim reading the run back
            reading.set()
            await asyncio.wait_for(release.wait(), 30)
        return await real_events_after(rid, after, *args, **kwargs)

    async def get(rid: str, *args: Any, **kwargs: Any) -> Any:
        if rid == run_id and answered:
            follower_looked.set()
        return await real_get(rid, *args, **kwargs)

    monkeypatch.setattr(store, "decide", decide)
    monkeypatch.setattr(store, "events_after", events_after)
    monkeypatch.setattr(store, "get", get)
    r = await world.decide(run_id, wait["tool_use_id"], {"decision": "reject"})
    assert r.status_code == 202, r.text
    assert svc.runs.get(run_id) is None, "the claim must still be reading the run back"
    answered = True
    follower = asyncio.create_task(world.follow(r.json()["stream_url"]))
    await asyncio.wait_for(follower_looked.wait(), 30)
    release.set()
    rest = await follower
    assert await asyncio.wait_for(claims[0], 30) == 0  # a decided run: carried on, not counted taken over
    names = [e.event for e in rest if e.event != "heartbeat"]
    assert names[0] == "run_resumed" and names.count("message_complete") == 1, names
    assert rest[-1].json()["status"] == "completed"


async def test_an_edit_is_checked_against_the_schema_then_runs_with_the_new_arguments(world: World) -> None:
    before = len(world.cancels())
    events = await world.start([cancel_call, say("Cancelled ORD-4321 instead.")])
    wait = parked(events)
    run_id, tool_use_id = events[0].json()["run_id"], wait["tool_use_id"]
    bad = await world.decide(run_id, tool_use_id, {"decision": "edit", "arguments": {"order_id": "4321"}})
    assert bad.status_code == 400 and "order_id" in bad.text
    assert (await world.decide(run_id, tool_use_id, {"decision": "edit"})).status_code == 400
    edited = {"order_id": "ORD-4321", "reason": "wrong order"}
    r = await world.decide(run_id, tool_use_id, {"decision": "edit", "arguments": edited})
    assert r.status_code == 202, r.text
    rest = await world.follow(r.json()["stream_url"])
    assert rest[-1].json()["status"] == "completed"
    assert world.cancels()[before:] == [edited]


async def test_the_python_client_decides_and_reads_the_typed_event(world: World) -> None:
    before = len(world.cancels())
    events = await world.start([cancel_call, say("Cancelled.")])
    wait = parked(events)
    run_id = events[0].json()["run_id"]
    typed = parse_event("approval_required", events[-1].data)
    assert isinstance(typed, ApprovalRequired) and typed.tool_use_id == wait["tool_use_id"]
    async with AgentClient(world.base, token=ALICE["Authorization"].removeprefix("Bearer ")) as client:
        accepted = await client.decide(run_id, typed.tool_use_id, "approve")
        assert accepted.decision == "approve" and accepted.stream_url
        async with client.stream(run_id, after=int(events[-1].id or 0)) as stream:
            rest = [ev async for ev in stream]
    assert type(rest[-1]).__name__ == "MessageComplete"
    assert len(world.cancels()) == before + 1


async def test_a_parked_run_can_be_cancelled(world: World) -> None:
    events = await world.start([cancel_call])
    wait = parked(events)
    run_id = events[0].json()["run_id"]
    async with httpx.AsyncClient(timeout=30, headers=ALICE) as client:
        r = await client.post(f"{world.base}/v1/agent/runs/{run_id}/cancel")
    assert r.status_code in (200, 202), r.text
    async with asyncio.timeout(30):
        while await world.status(run_id) != "cancelled":
            await asyncio.sleep(0.05)
    assert (await world.decide(run_id, wait["tool_use_id"], {"decision": "approve"})).status_code == 409
    async with httpx.AsyncClient(timeout=30, headers=ALICE) as client:
        rest = await collect_sse(client, "GET", f"{world.base}/v1/agent/runs/{run_id}/events")
        conversation = (await client.get(f"{world.base}/v1/agent/conversations/{events[0].json()['conversation_id']}"))
    assert [e.event for e in rest].count("message_complete") == 1 and rest[-1].json()["status"] == "cancelled"
    # The waiting call is answered in the stored conversation (a provider refuses a
    # history with an unanswered call, which would break the conversation's next run).
    answered = [r for m in conversation.json()["messages"] for r in (m.get("tool_results") or [])]
    assert [r.get("tool_call_id") or r.get("id") for r in answered] == [wait["tool_use_id"]], conversation.json()


async def test_an_undecided_approval_expires_and_the_run_ends_cancelled(tmp_path: Path) -> None:
    async with desk_world(tmp_path, AGENT_APPROVAL_TTL_S="0.5") as w:
        base = w.base
        events = await w.start([cancel_call])
        parked(events)
        run_id = events[0].json()["run_id"]
        async with asyncio.timeout(30):
            while await w.status(run_id) != "cancelled":
                await asyncio.sleep(0.05)
        async with httpx.AsyncClient(timeout=30, headers=ALICE) as client:
            rest = await collect_sse(client, "GET", f"{base}/v1/agent/runs/{run_id}/events")
        names = [e.event for e in rest]
        assert names.count("message_complete") == 1 and rest[-1].json()["status"] == "cancelled"
        error = next(e.json() for e in rest if e.event == "error")
        assert error["code"] == "approval_expired"
        assert w.cancels() == []
        async with httpx.AsyncClient(timeout=30) as client:
            metrics = (await client.get(f"{base}/metrics")).text
        assert "agentchat_approvals_expired_total 1.0" in metrics


async def test_a_waiting_run_takes_no_live_run_slot_and_no_place_in_the_users_cap(tmp_path: Path) -> None:
    """With one live run per replica and one unfinished run per user, a second question
    (another conversation) is admitted while the first run waits for a decision."""
    async with desk_world(tmp_path, AGENT_MAX_LIVE_RUNS="1", AGENT_MAX_RUNS_PER_USER="1") as w:
        first = parked(await w.start([cancel_call]))
        second = parked(await w.start([cancel_call]))  # admitted: neither 429 nor 503
        assert first["tool_use_id"] and second["tool_use_id"]
        assert w.app.state.services.runs.active() == []


async def test_a_later_run_of_the_conversation_is_refused_while_the_run_waits(world: World) -> None:
    """Runs of a conversation stay in order, and a question sent while a run waits for a
    decision is not queued behind it for as long as the approval lives: 409
    ``approval_pending`` names the run and the call (``enqueue``, the default, and
    ``reject`` alike). Once the decision is made and the run has ended, it is admitted."""
    events = await world.start([cancel_call, say("First answer."), say("Second answer.")])
    wait = parked(events)
    run_id, conversation_id = events[0].json()["run_id"], events[0].json()["conversation_id"]
    async with httpx.AsyncClient(timeout=60, headers=ALICE) as client:
        ask = {"message": "And then?", "context_type": "workflow", "conversation_id": conversation_id}
        r = await client.post(f"{world.base}/v1/agent/runs", json=ask)
        assert r.status_code == 409, r.text
        refused = r.json()
        assert refused["error"] == "approval_pending" and refused["run_id"] == run_id
        assert refused["tool_use_id"] == wait["tool_use_id"] and refused["tool_name"] == "cancel_order"
        assert await world.status(run_id) == "waiting_approval"
        decided = await world.decide(run_id, wait["tool_use_id"], {"decision": "approve"})
        assert decided.status_code == 202, decided.text
        first = await world.follow(decided.json()["stream_url"])
        r = await client.post(f"{world.base}/v1/agent/runs", json=ask)
        assert r.status_code == 201, r.text
        then = await collect_sse(client, "GET", f"{world.base}{r.json()['stream_url']}")
    assert first[-1].json()["status"] == "completed"
    assert "".join(e.json()["chunk"] for e in first if e.event == "content_chunk") == "First answer."
    assert then[-1].json()["status"] == "completed"
    assert "".join(e.json()["chunk"] for e in then if e.event == "content_chunk") == "Second answer."


async def test_an_interrupting_question_cancels_the_waiting_run_and_then_runs(world: World) -> None:
    before = len(world.cancels())
    events = await world.start([cancel_call, say("Something else, then.")])
    parked(events)
    run_id, conversation_id = events[0].json()["run_id"], events[0].json()["conversation_id"]
    async with httpx.AsyncClient(timeout=60, headers=ALICE) as client:
        rest = await collect_sse(client, "POST", f"{world.base}/v1/agent/chat", json={
            "message": "Never mind, something else.", "context_type": "workflow",
            "conversation_id": conversation_id, "multitask": "interrupt"})
    assert rest[-1].json()["status"] == "completed"
    assert await world.status(run_id) == "cancelled"
    assert len(world.cancels()) == before


async def test_agent_approval_tools_none_or_a_list_replaces_the_default(tmp_path: Path) -> None:
    """``AGENT_APPROVAL_TOOLS=none``: the destructive tool runs at once; a list: exactly
    those tools wait (here the read-only ``lookup_order``), MCP tools included."""
    for value, tool_call, waits in (
        ("none", cancel_call, False),
        ("lookup_order", lambda body: [ToolCall("lookup_order", {"order_id": "ORD-1234"})], True),
    ):
        async with desk_world(tmp_path / value, AGENT_APPROVAL_TOOLS=value) as w:
            registry = w.app.state.services.agent.registry
            assert registry.spec("cancel_order").needs_approval is False
            assert registry.spec("lookup_order").needs_approval is waits
            events = await w.start([tool_call, say("Done.")])
        desk = w.desk
        names = [e.event for e in events]
        if waits:
            assert names[-1] == "approval_required" and desk.calls == []
        else:
            assert "approval_required" not in names and names[-1] == "message_complete"
            assert [name for name, _ in desk.calls] == ["cancel_order"]
