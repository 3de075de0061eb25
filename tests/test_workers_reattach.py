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

from tests.fakes.paced_ollama import FLOW_CONTEXT, tagged
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, tool_stack, until
from tests.test_workers import WORKERS, Pinned, pinned_clients

pytestmark = pytest.mark.slow

KEPT_LINE = "a client reads the run on another replica"
CANCEL_LINE = "chat client left; cancelling its run"
#: Worker A heard worker B's word that B has a client of the run: only then does a
#: departure on A wait for it (under load the word, relayed by the parent, can arrive
#: after A's 1 s timer: the cancel a CI run saw).
FOLLOWED_LINE = "run followed from another replica"


@contextlib.asynccontextmanager
async def worker_group(tmp_path: Path, engine: str, pg: TestPostgres | None) -> AsyncIterator[tuple[Any, AgentServer]]:
    async with contextlib.AsyncExitStack() as stack:
        tools = await stack.enter_async_context(tool_stack(tmp_path, tokens=5, pause_s=0.05))
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


@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_chat_dropped_on_one_worker_and_resumed_on_the_other_completes(
    engine: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    pg = request.getfixturevalue("pg_server") if engine == "postgres" else None
    async with worker_group(tmp_path, engine, pg) as (tools, server):
        tools.fake.streaming_until = asyncio.Event()  # the first turn streams until let go
        async with pinned_clients(server.base, 1) as by_worker:
            pin_a, pin_b = (pins[0] for pins in by_worker.values())
            post = Reader(pin_a, "POST", "/v1/agent/ui-stream", json=ui_body(f"chat-{engine}"))
            await until(lambda: post.has(8), "eight parts of the chat on worker A")
            resumed = Reader(pin_b, "GET", f"/v1/agent/ui-stream/chat-{engine}/stream")
            await until(lambda: resumed.has(1), "the resume on worker B to start")
            await until(lambda: bool(server.grep(FOLLOWED_LINE)), "worker A to hear of the client on B", timeout=30)
            await post.drop()

            fired = "worker A's re-attach timer to fire"
            await until(lambda: bool(server.grep(KEPT_LINE, CANCEL_LINE)), fired, timeout=30)
            tools.fake.streaming_until.set()
            parts = await resumed.finished()
    kinds = [p["type"] for p in parts]
    assert "abort" not in kinds and kinds[-1] == "finish", (kinds[-5:], server.grep(KEPT_LINE, CANCEL_LINE))
    assert server.grep(KEPT_LINE) and not server.grep(CANCEL_LINE)


async def test_a_client_on_a_killed_worker_holds_the_run_no_longer(tmp_path: Path) -> None:
    """What a worker said lapses: killed while its client reads the run, it says nothing
    more, and the run's worker cancels the run (``FollowerPresence.ttl_s`` after the last
    word), as with nobody attached anywhere."""
    async with worker_group(tmp_path, "sqlite", None) as (tools, server):
        tools.fake.streaming_until = asyncio.Event()  # never let go: only a cancel ends the run
        async with pinned_clients(server.base, 1) as by_worker:
            pin_a, pin_b = (pins[0] for pins in by_worker.values())
            post = Reader(pin_a, "POST", "/v1/agent/ui-stream", json=ui_body("chat-killed"))
            await until(lambda: post.has(8), "eight parts of the chat on worker A")
            run_id = post.parts()[0]["messageId"]
            resumed = Reader(pin_b, "GET", "/v1/agent/ui-stream/chat-killed/stream")
            await until(lambda: resumed.has(1), "the resume on worker B to start")
            await until(lambda: bool(server.grep(FOLLOWED_LINE)), "worker A to hear of the client on B", timeout=30)
            await post.drop()
            await until(lambda: bool(server.grep(KEPT_LINE)), "worker A's timer to find the client on B", timeout=30)
            os.kill(pin_b.pid, signal.SIGKILL)
            await resumed.drop()
            await until(lambda: bool(server.grep(CANCEL_LINE)), "worker A to cancel the run", timeout=30)
            for _ in range(200):  # the cancel is asked; its ending is being stored
                stored = await pin_a.http.get(f"{pin_a.base}/v1/agent/runs/{run_id}", headers=DEMO_AUTH)
                if stored.json()["status"] != "running":
                    break
                await asyncio.sleep(0.05)
        tools.fake.streaming_until.set()
    assert stored.json()["status"] == "cancelled", stored.text
