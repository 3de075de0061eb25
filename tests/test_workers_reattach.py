"""An AI SDK chat dropped on one worker and resumed through another completes
(``app/runs/presence.py``), through real processes: ``agentchat serve --workers 2`` on
one SQLite file (the workers' socket feed) and on one PostgreSQL database (``NOTIFY``),
each worker a replica of the other as two ``serve`` would be.

Found walking two replicas on PostgreSQL: the resume through the other replica ended
``abort`` 3 s after the drop, the run's replica counting only its own clients. The fake
model streams words until the test lets it go on (``PacedOllama.streaming_until``), so
the run is live for as long as the test needs, not for a guessed time; the run's worker
says in its log when its timer found the client on the other worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from tests.fakes.paced_ollama import FLOW_CONTEXT, tagged
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, tool_stack, until
from tests.test_workers import WORKERS, Pinned, pinned_clients

pytestmark = pytest.mark.slow

KEPT_LINE = "a client reads the run on another replica"
CANCEL_LINE = "chat client left; cancelling its run"
#: Worker A heard worker B's word that B has a client of the run: only then does a
#: departure on A wait for it (under load the word, relayed by the parent, can arrive
#: after A's 1 s timer: the cancel a CI run saw).
FOLLOWED_LINE = "run followed from another replica"


#: The tests run in the event loop of the module's ``tools`` (its fake model and proxy are served there).
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The paced model fake, the counting proxy and the backend, one for the module: each
    test's chat has an id of its own, and sets the fake's ``streaming_until`` itself."""
    async with tool_stack(tmp_path_factory.mktemp("tools"), tokens=5, pause_s=0.05) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sqlite_group(
    tools: ToolStack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    """``serve --workers 2`` on one SQLite file, started once for the SQLite case of the
    resume and for the killed worker's test (the module's last: the supervisor replaces
    the worker it kills). A group's start is three processes importing the whole app, and
    the backend's a fourth: most of each test's time. Each test reads the group's log from
    its own mark (``server.mark()``) and chats under an id of its own."""
    async with worker_group(tools, tmp_path_factory.mktemp("workers-sqlite"), "sqlite", None) as group:
        yield group


@contextlib.asynccontextmanager
async def worker_group(
    tools: ToolStack, tmp_path: Path, engine: str, pg: TestPostgres | None
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    async with contextlib.AsyncExitStack() as stack:
        extra = {"AGENT_WORKERS": str(WORKERS), "AGENT_CHAT_REATTACH_S": "1"}
        if engine == "postgres":
            assert pg is not None
            extra["AGENT_DATABASE_URL"] = stack.enter_context(pg.database())
            extra["AGENT_SECRET_KEY"] = "workers-share-this-key-0123456789"
        server = AgentServer(tmp_path, tools.agent_env(**extra), name=f"workers-{engine}")
        server.start()
        stack.callback(server.close)
        await server.wait_healthy()
        yield tools, server


def ui_body(chat_id: str) -> dict[str, Any]:
    message = {"id": "msg-user-1", "role": "user", "parts": [{"type": "text", "text": tagged(chat_id)}]}
    return {"id": chat_id, "messages": [message], "trigger": "submit-message", "messageId": None,
            "context_type": FLOW_CONTEXT}


class Reader:
    """An AI SDK stream read on one pinned worker in the background."""

    def __init__(self, pin: Pinned, method: str, path: str, **kwargs: Any) -> None:
        self.lines: list[str] = []
        self._task = asyncio.create_task(self._read(pin, method, path, kwargs))

    async def _read(self, pin: Pinned, method: str, path: str, kwargs: dict[str, Any]) -> None:
        async with pin.http.stream(method, f"{pin.base}{path}", headers=DEMO_AUTH, **kwargs) as response:
            assert response.status_code == 200, await response.aread()
            pin.check(response)
            async for line in response.aiter_lines():
                self.lines.append(line)

    def parts(self) -> list[dict[str, Any]]:
        return [orjson.loads(ln[6:]) for ln in self.lines if ln.startswith("data: {")]

    def has(self, count: int) -> bool:
        if self._task.done():
            self._task.result()  # its failure, if it failed
        return len(self.parts()) >= count

    async def drop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
            await self._task

    async def finished(self) -> list[dict[str, Any]]:
        await asyncio.wait_for(self._task, 60)
        return self.parts()


@pytest.fixture
def shared_on_sqlite(engine: str, request: pytest.FixtureRequest) -> tuple[ToolStack, AgentServer] | None:
    """``sqlite_group`` for the SQLite case (set up here, before the test's loop runs);
    ``None``: the test starts its own workers on PostgreSQL."""
    if engine != "sqlite":
        return None
    shared: tuple[ToolStack, AgentServer] = request.getfixturevalue("sqlite_group")
    return shared


@contextlib.asynccontextmanager
async def group_on(
    engine: str,
    tools: ToolStack,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    shared: tuple[ToolStack, AgentServer] | None,
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    """The module's SQLite group, or workers of the test's own on a fresh PostgreSQL database."""
    if shared is not None:
        yield shared
        return
    async with worker_group(tools, tmp_path, engine, request.getfixturevalue("pg_server")) as group:
        yield group


@MODULE_LOOP
@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_chat_dropped_on_one_worker_and_resumed_on_the_other_completes(
    engine: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    tools: ToolStack,
    shared_on_sqlite: tuple[ToolStack, AgentServer] | None,
) -> None:
    async with group_on(engine, tools, tmp_path, request, shared_on_sqlite) as (tools, server):
        since = server.mark()  # the shared group's log holds other tests' lines before this
        tools.fake.streaming_until = asyncio.Event()  # the first turn streams until let go
        async with pinned_clients(server.base, 1) as by_worker:
            pin_a, pin_b = (pins[0] for pins in by_worker.values())
            post = Reader(pin_a, "POST", "/v1/agent/ui-stream", json=ui_body(f"chat-{engine}"))
            await until(lambda: post.has(8), "eight parts of the chat on worker A")
            resumed = Reader(pin_b, "GET", f"/v1/agent/ui-stream/chat-{engine}/stream")
            await until(lambda: resumed.has(1), "the resume on worker B to start")
            await until(lambda: bool(server.grep(FOLLOWED_LINE, since=since)), "worker A to hear of the client on B",
                        timeout=30)
            await post.drop()

            fired = "worker A's re-attach timer to fire"
            await until(lambda: bool(server.grep(KEPT_LINE, CANCEL_LINE, since=since)), fired, timeout=30)
            tools.fake.streaming_until.set()
            parts = await resumed.finished()
    kinds = [p["type"] for p in parts]
    said = server.grep(KEPT_LINE, CANCEL_LINE, since=since)
    assert "abort" not in kinds and kinds[-1] == "finish", (kinds[-5:], said)
    assert server.grep(KEPT_LINE, since=since) and not server.grep(CANCEL_LINE, since=since), said


@MODULE_LOOP
async def test_a_client_on_a_killed_worker_holds_the_run_no_longer(sqlite_group: tuple[ToolStack, AgentServer]) -> None:
    """What a worker said lapses: killed while its client reads the run, it says nothing
    more, and the run's worker cancels the run (``FollowerPresence.ttl_s`` after the last
    word), as with nobody attached anywhere. The module's last test on ``sqlite_group``:
    the supervisor replaces the worker it kills."""
    tools, server = sqlite_group
    since = server.mark()  # the shared group's log holds other tests' lines before this
    tools.fake.streaming_until = asyncio.Event()  # never let go: only a cancel ends the run
    try:
        async with pinned_clients(server.base, 1) as by_worker:
            pin_a, pin_b = (pins[0] for pins in by_worker.values())
            post = Reader(pin_a, "POST", "/v1/agent/ui-stream", json=ui_body("chat-killed"))
            await until(lambda: post.has(8), "eight parts of the chat on worker A")
            run_id = post.parts()[0]["messageId"]
            resumed = Reader(pin_b, "GET", "/v1/agent/ui-stream/chat-killed/stream")
            await until(lambda: resumed.has(1), "the resume on worker B to start")
            await until(lambda: bool(server.grep(FOLLOWED_LINE, since=since)), "worker A to hear of the client on B",
                        timeout=30)
            await post.drop()
            await until(lambda: bool(server.grep(KEPT_LINE, since=since)), "worker A's timer to find the client on B",
                        timeout=30)
            os.kill(pin_b.pid, signal.SIGKILL)
            await resumed.drop()
            await until(lambda: bool(server.grep(CANCEL_LINE, since=since)), "worker A to cancel the run", timeout=30)
            for _ in range(200):  # the cancel is asked; its ending is being stored
                stored = await pin_a.http.get(f"{pin_a.base}/v1/agent/runs/{run_id}", headers=DEMO_AUTH)
                if stored.json()["status"] != "running":
                    break
                await asyncio.sleep(0.05)
    finally:
        tools.fake.streaming_until.set()
    assert stored.json()["status"] == "cancelled", stored.text
