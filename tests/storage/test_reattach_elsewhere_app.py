"""A chat whose client left one replica is not cancelled while the client reads it
through another (``app/runs/presence.py``): two replicas on one PostgreSQL database,
served on loopback.

Found walking two replicas: an AI SDK chat POSTed on A, dropped after a few parts and
resumed with ``GET /v1/agent/ui-stream/{id}/stream`` through B ended ``abort`` when A's
re-attach timer fired, since A counted only its own followers. The timer is
``AGENT_CHAT_REATTACH_S`` (1 s here); every wait is on a condition, bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.runs.records import Caller, ChatInput, encode_run_input
from app.server.auth import LOCAL_USER
from storage.open import open_storage
from storage.records import NewRun
from tests.storage.test_replica_ops_app import replica, replica_settings
from tests.support.gated_provider import Gate, GatedTurn
from tests.support.postgres import TestPostgres
from tests.support.procs import until

pytestmark = pytest.mark.slow  # two replicas per test

REATTACH = {"AGENT_CHAT_REATTACH_S": "1", "AGENT_HEARTBEAT_S": "0.2"}
#: A dead replica's run is claimed within a tenth of this; the owner's own lease lives
#: 0.7 of it, so a loaded machine that renews it late (1 s failed: the other replica took
#: the run over mid-test) does not hand the run on.
TAKE_OVER_LEASE_S = "3"
#: A bound on a run's ending once nothing holds it (the timer, then the agent's ending).
END_BOUND_S = 15.0


@pytest.fixture
def pg_db(pg_server: TestPostgres, tmp_path: Path) -> Any:
    with pg_server.database() as url:
        yield {"AGENT_DATABASE_URL": url, "AGENT_DB_PATH": str(tmp_path / "unused.sqlite3"),
               "AGENT_SECRET_KEY": "replicas-share-this-key-0123456789"}


def held_at(gate: Gate) -> Any:
    return lambda _request, _i: GatedTurn(steps=("Partial ", "answer", gate, " and the rest."))


def ui_body(chat_id: str) -> dict[str, Any]:
    message = {"id": "msg-user-1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", "messageId": None}


class Reader:
    """An SSE response read in the background, line by line, until it ends or is dropped."""

    def __init__(self, client: httpx.AsyncClient, method: str, url: str, **kwargs: Any) -> None:
        self.lines: list[str] = []
        self.status: int | None = None
        self.ended = False
        self.error: httpx.HTTPError | None = None
        self._task = asyncio.create_task(self._read(client, method, url, kwargs))

    async def _read(self, client: httpx.AsyncClient, method: str, url: str, kwargs: dict[str, Any]) -> None:
        try:
            async with client.stream(method, url, **kwargs) as response:
                self.status = response.status_code
                async for line in response.aiter_lines():
                    self.lines.append(line)
        except httpx.HTTPError as exc:  # a server stopped under a stream the test left open
            self.error = exc
            return
        self.ended = True

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    async def drop(self) -> None:
        """The client goes away: its connection is closed mid-stream."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def finished(self) -> list[str]:
        await asyncio.wait_for(self._task, END_BOUND_S)
        return self.lines


@contextlib.asynccontextmanager
async def two_replicas(
    pg_db: dict[str, str], gate: Gate
) -> AsyncIterator[tuple[str, Any, str, Any, httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:
        a, app_a = await replica(stack, replica_settings(pg_db, **REATTACH), held_at(gate))
        b, app_b = await replica(stack, replica_settings(pg_db, **REATTACH), held_at(gate))
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        yield a, app_a, b, app_b, client


def chunks(lines: list[str]) -> list[dict[str, Any]]:
    return [orjson.loads(ln[6:]) for ln in lines if ln.startswith("data: {")]


def status_of(run: Any) -> str:
    assert [e.event for e in run.events].count("message_complete") == 1
    assert run.events[-1].event == "message_complete"
    return str(orjson.loads(run.events[-1].data)["status"])


async def started_on_a(client: httpx.AsyncClient, a: str, app_a: Any, gate: Gate, chat_id: str) -> tuple[Reader, Any]:
    """An AI SDK chat POSTed on A, read until the model waits at the gate."""
    post = Reader(client, "POST", f"{a}/v1/agent/ui-stream", json=ui_body(chat_id))
    await asyncio.wait_for(gate.reached.wait(), 10)
    await until(lambda: post.saw('"delta":"answer"'), "A's client to read the parts before the gate")
    start = next(c for c in chunks(post.lines) if c["type"] == "start")
    return post, app_a.state.services.runs.get(start["messageId"])


async def heard_on(app: Any, run_id: str) -> None:
    """Until ``app`` has heard that another replica's client reads ``run_id``."""
    presence = app.state.services.remote.presence
    await until(lambda: presence.held_until(run_id) is not None, "the owner to hear of the client on the other replica")


async def test_an_ai_sdk_chat_resumed_through_another_replica_completes(pg_db: dict[str, str]) -> None:
    gate = Gate()
    async with two_replicas(pg_db, gate) as (a, app_a, b, _, client):
        post, run = await started_on_a(client, a, app_a, gate, "chat-elsewhere")
        resumed = Reader(client, "GET", f"{b}/v1/agent/ui-stream/chat-elsewhere/stream")
        await until(lambda: resumed.saw('"type":"start"'), "B's resume to start")
        await heard_on(app_a, run.id)
        await post.drop()
        presence = app_a.state.services.remote.presence
        await until(lambda: presence.kept > 0 or run.finished, "A's re-attach timer to fire", timeout=END_BOUND_S)
        gate.open()
        lines = await resumed.finished()
    assert resumed.status == 200
    kinds = [c["type"] for c in chunks(lines)]
    assert "abort" not in kinds and kinds[-1] == "finish", kinds
    assert "".join(c.get("delta", "") for c in chunks(lines)) == "Partial answer and the rest."
    assert status_of(run) == "completed"


async def test_a_native_keyless_chat_read_through_another_replica_completes(pg_db: dict[str, str]) -> None:
    gate = Gate()
    async with two_replicas(pg_db, gate) as (a, app_a, b, _, client):
        post = Reader(client, "POST", f"{a}/v1/agent/chat", json={"message": "hi", "context_type": "knowledge"})
        await asyncio.wait_for(gate.reached.wait(), 10)
        await until(lambda: post.saw("run_started"), "the run to start")
        run_id = next(orjson.loads(ln[6:])["run_id"] for ln in post.lines if '"run_id"' in ln)
        run = app_a.state.services.runs.get(run_id)
        follower = Reader(client, "GET", f"{b}/v1/agent/runs/{run_id}/events")
        await until(lambda: follower.saw("Partial "), "B's follower to read the parts")
        await heard_on(app_a, run_id)
        await post.drop()
        presence = app_a.state.services.remote.presence
        await until(lambda: presence.kept > 0 or run.finished, "A's re-attach timer to fire", timeout=END_BOUND_S)
        gate.open()
        lines = await follower.finished()
    assert any('"status":"completed"' in ln for ln in lines), lines[-6:]
    assert status_of(run) == "completed"


async def test_a_chat_nobody_reads_anywhere_is_cancelled_after_the_timer(pg_db: dict[str, str]) -> None:
    gate = Gate()
    async with two_replicas(pg_db, gate) as (a, app_a, _, _, client):
        post, run = await started_on_a(client, a, app_a, gate, "chat-gone")
        await post.drop()
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
        assert app_a.state.services.remote.presence.kept == 0
    assert status_of(run) == "cancelled"


async def last_leaving_b_cancels(pg_db: dict[str, str], chat_id: str, path: str, started: str) -> None:
    """A chat started on A; a client reads it on B at ``path`` (``{run}``: the run's id)
    until it shows ``started``; the chat's own client leaves A, and A's timer, on firing,
    keeps the run for B's client; when that one leaves B too, nobody is left anywhere
    and the chat is cancelled."""
    gate = Gate()
    async with two_replicas(pg_db, gate) as (a, app_a, b, _, client):
        post, run = await started_on_a(client, a, app_a, gate, chat_id)
        elsewhere = Reader(client, "GET", b + path.format(run=run.id))
        await until(lambda: elsewhere.saw(started), "B's client to read the run")
        await heard_on(app_a, run.id)
        await post.drop()
        presence = app_a.state.services.remote.presence
        await until(lambda: presence.kept > 0 or run.finished, "A's re-attach timer to fire", timeout=END_BOUND_S)
        assert not run.finished
        await elsewhere.drop()  # B's client leaves: nobody is left anywhere
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
    assert status_of(run) == "cancelled"


async def test_a_client_that_leaves_the_other_replica_starts_the_timer_again(pg_db: dict[str, str]) -> None:
    resume = "/v1/agent/ui-stream/chat-left-twice/stream"
    await last_leaving_b_cancels(pg_db, "chat-left-twice", resume, '"type":"start"')


async def test_a_run_read_through_another_replica_is_not_swept_as_abandoned(pg_db: dict[str, str]) -> None:
    """The owner's sweep cancels a run nobody has followed for ``grace_s`` (600 s): a
    run whose only client reads it through the other replica is not such a run. Before,
    the sweep counted this replica's followers only and cancelled it."""
    gate = Gate()
    async with two_replicas(pg_db, gate) as (a, app_a, b, _, client):
        started = await client.post(f"{a}/v1/agent/runs", json={"message": "hi", "context_type": "knowledge"})
        assert started.status_code == 201, started.text
        run_id = started.json()["run_id"]
        await asyncio.wait_for(gate.reached.wait(), 10)
        run = app_a.state.services.runs.get(run_id)
        here = Reader(client, "GET", f"{a}/v1/agent/runs/{run_id}/events")
        await until(lambda: here.saw("Partial "), "A's follower to read the parts")
        follower = Reader(client, "GET", f"{b}/v1/agent/runs/{run_id}/events")
        await until(lambda: follower.saw("Partial "), "B's follower to read the parts")
        await heard_on(app_a, run_id)
        await here.drop()  # the client moved to B: nobody follows the run on A
        await until(lambda: run.followers == 0 and run.last_detached_at is not None, "A's follower to leave")
        manager = app_a.state.services.runs
        manager.sweep(now=run.last_detached_at + manager.grace_s + 1)
        gate.open()
        lines = await follower.finished()
    assert any('"status":"completed"' in ln for ln in lines), lines[-6:]
    assert status_of(run) == "completed"


async def test_a_reader_leaving_the_other_replica_after_the_chat_left_starts_the_timer(pg_db: dict[str, str]) -> None:
    """A reader of ``/events`` (not a chat's own client) holds the chat while it reads,
    and its leaving, the last client anywhere, starts the timer: the run is a chat's
    (its own client left) whatever kind of client leaves last. Before, B's ``-`` reset
    A's ``last_detached_at`` without a timer and the chat ran on until the 600 s sweep."""
    await last_leaving_b_cancels(pg_db, "chat-read-elsewhere", "/v1/agent/runs/{run}/events", "Partial ")


@contextlib.asynccontextmanager
async def taken_over(
    pg_db: dict[str, str], run_id: str, chat_id: str
) -> AsyncIterator[tuple[str, Any, str, Any, httpx.AsyncClient]]:
    """Two replicas, and a chat's run left by a dead replica that one of them takes over,
    held at the model's gate: (owner's URL, owner's app, the other's URL, the run on the
    owner, a client). Its client never left the owner itself, so the mark that leaving
    sets is not there."""
    gate = Gate()
    settings = replica_settings(pg_db, **REATTACH, AGENT_RUN_LEASE_S=TAKE_OVER_LEASE_S)
    async with AsyncExitStack() as stack:
        replicas = [await replica(stack, settings, held_at(gate)) for _ in range(2)]
        client = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        dead = await open_storage(pg_db["AGENT_DATABASE_URL"])
        stack.push_async_callback(dead.close)
        await dead.runs.create(NewRun(
            id=run_id, conversation_id=chat_id, user_id=LOCAL_USER, context_type="knowledge",
            input=encode_run_input(ChatInput("hi", "knowledge", {}), Caller(LOCAL_USER)),
            lease_owner="dead-replica", lease_s=0.05))
        await asyncio.wait_for(gate.reached.wait(), END_BOUND_S)  # taken over by one of them
        owner_at = next(i for i, (_, app) in enumerate(replicas) if app.state.services.runs.get(run_id))
        (owner, app_owner), (other, _) = replicas[owner_at], replicas[1 - owner_at]
        yield owner, app_owner, other, app_owner.state.services.runs.get(run_id), client


async def test_the_chat_client_leaving_another_replica_while_a_reader_holds_the_run_is_kept(
    pg_db: dict[str, str],
) -> None:
    """The owner hears ``!`` (the chat's own client left another replica) while a reader
    of ``/events`` still holds the run on the owner: the run is a chat's from then on,
    and the reader's leaving, the last client anywhere, starts the timer. Before, the
    owner dropped the word (it had a follower of its own: ``watch_clients_elsewhere``
    returned before marking the run), and once the reader left nothing started a timer:
    the chat ran on until the 600 s sweep. The run is one taken over from a dead replica
    (``taken_over``)."""
    async with taken_over(pg_db, "run_dead_chat", "chat-taken-over") as (owner, app_owner, other, run, client):
        resumed = Reader(client, "GET", f"{other}/v1/agent/ui-stream/chat-taken-over/stream")
        await until(lambda: resumed.saw('"type":"start"'), "the chat's client to resume on the other replica")
        await heard_on(app_owner, run.id)
        reader = Reader(client, "GET", f"{owner}/v1/agent/runs/{run.id}/events")
        await until(lambda: reader.saw("Partial ") and run.followers == 1, "the owner's reader to read the parts")
        presence = app_owner.state.services.remote.presence
        await resumed.drop()  # the chat's client leaves; the reader on the owner holds the run
        await until(lambda: presence.held_until(run.id) is None, "the owner to hear the client left")
        assert not run.finished
        await reader.drop()  # the reader leaves too: nobody is left anywhere
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
    assert status_of(run) == "cancelled"


async def test_the_chat_client_leaving_while_a_silent_third_replica_holds_the_run_is_cancelled_when_it_lapses(
    pg_db: dict[str, str],
) -> None:
    """The owner hears ``!`` while a client on a third replica holds the run, and has no
    follower of its own: the timer starts then, and waits while that replica's word
    holds. When that replica dies without a word (its ``+`` lapses after ``ttl_s``), the
    chat is cancelled. Before, the owner only marked the run: with no follower of its own
    to leave and no last ``-`` ever said, nothing started a timer and the chat ran on
    until the 600 s sweep (found by review). The run is taken over from a dead replica
    (``taken_over``); the third replica is one announcement on the database's feed,
    never said again."""
    async with taken_over(pg_db, "run_silent_third", "chat-silent-third") as (_, app_owner, other, run, client):
        presence = app_owner.state.services.remote.presence
        resumed = Reader(client, "GET", f"{other}/v1/agent/ui-stream/chat-silent-third/stream")
        await until(lambda: resumed.saw('"type":"start"'), "the chat's client to resume on the other replica")
        await heard_on(app_owner, run.id)
        presence.feed.announce_followers(f"silentthird0 + {run.id}")  # a reader on a third replica
        await until(lambda: "silentthird0" in presence._elsewhere.get(run.id, {}), "the owner to hear the third")
        assert run.followers == 0
        await resumed.drop()  # the chat's client leaves; the third replica holds the run, then says nothing
        await asyncio.wait_for(run.wait_finished(), END_BOUND_S)
        assert presence.kept > 0  # the timer found the third replica's client and waited for it
    assert status_of(run) == "cancelled"
