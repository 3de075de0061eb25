"""A follower on replica B of a run executing on replica A, when PostgreSQL goes down
mid-stream, gets an ``error`` (``storage_unavailable``) and the stream's clean end.

Before, B's shared tail raised ``StorageUnavailable`` through the SSE response after it
had started: the client saw ``peer closed connection without sending complete message
body`` and no ``error``, and B logged "Exception in ASGI application". B knows no
ending, so it makes none up: its ``error`` carries no ``id`` (a reconnect with
``Last-Event-ID`` goes on from the last logged event) and no ``message_complete`` follows
it — as a follower on A (the run's own process) ends while A's ending is not stored
(``tests/storage/test_unstored_outage_ending.py``).

A PostgreSQL of this test's own (stopping the session's would stop every other test's).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.fakes.paced_ollama import run_body
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, client, start_run, until
from tests.support.procs import tool_stack as make_tool_stack
from tests.support.sse import iter_sse

Frame = tuple[str | None, str, str]


@pytest.mark.timeout(300)
async def test_a_remote_follower_ends_cleanly_with_an_error_when_postgresql_stops(tmp_path: Path) -> None:
    pg = TestPostgres().start()
    try:
        with pg.database(empty=True) as url:
            async with make_tool_stack(tmp_path, tokens=400, pause_s=0.05) as stack:
                env = stack.agent_env(
                    AGENT_DATABASE_URL=url, AGENT_SECRET_KEY="replicas-share-this-key-0123456789"
                )
                a, b = AgentServer(tmp_path, env, name="a"), AgentServer(tmp_path, env, name="b")
                for server in (a, b):
                    server.start()
                try:
                    await asyncio.gather(a.wait_healthy(), b.wait_healthy())
                    frames, ended = await _follow_on_b_while_postgres_stops(pg, a, b)
                finally:
                    for server in (a, b):
                        await server.kill()
                        server.close()
                names = [name for _, name, _ in frames]
                assert ended == "eof", (ended, names[-5:], b.tail())
                assert "content_chunk" in names, names
                last_id, last_name, last_data = frames[-1]
                assert last_name == "error", (names[-5:], b.tail())
                assert orjson.loads(last_data)["code"] == "storage_unavailable", last_data
                assert last_id is None, f"the follower's error took an id of the run's log: {frames[-1]}"
                assert "message_complete" not in names, "a follower on B made up the run's ending"
                assert not b.grep("Exception in ASGI application", "unhandled error"), b.tail()
    finally:
        pg.stop()


async def _follow_on_b_while_postgres_stops(
    pg: TestPostgres, a: AgentServer, b: AgentServer
) -> tuple[list[Frame], str]:
    """Start a run on A, read it on B; stop PostgreSQL once B streams it. (frames, how
    B's body ended: ``eof`` or the transport error's name)."""
    frames: list[Frame] = []
    async with client() as http:
        status, body = await start_run(http, a.base, run_body(f"outage-{uuid.uuid4().hex[:6]}"))
        assert status == 201, (status, body, a.tail())
        streaming = asyncio.Event()

        async def read() -> str:
            headers = {"Accept": "text/event-stream", **DEMO_AUTH}
            async with http.stream("GET", f"{b.base}{body['stream_url']}", headers=headers) as response:
                assert response.status_code == 200, response.status_code
                try:
                    async for ev in iter_sse(response.aiter_lines()):
                        if ev.event == "heartbeat":
                            continue
                        frames.append((ev.id, ev.event, ev.data))
                        if ev.event == "content_chunk":
                            streaming.set()
                except httpx.TransportError as exc:
                    return type(exc).__name__
            return "eof"

        reader = asyncio.create_task(read())
        try:
            await until(lambda: streaming.is_set() or reader.done(), "B streaming A's run", timeout=90)
            assert streaming.is_set(), (frames, reader.result() if reader.done() else None, b.tail())
            pg._kill()  # the server stops ("fast" shutdown: every session is cut)
            return frames, await asyncio.wait_for(reader, 120)
        finally:
            if not reader.done():
                reader.cancel()


async def test_a_lost_listener_connection_sends_every_watcher_to_its_log_at_once() -> None:
    """The listener's connection drops with the server: each watcher is told to read its
    log then (where a follower meets the outage), not at its quiet poll (10 s) - the
    reconnect's own read-all cannot come while the server is down."""
    from storage.postgres.notify import RunEventsListener

    pg = TestPostgres().start()
    listener: RunEventsListener | None = None
    try:
        with pg.database(empty=True) as url:
            listener = RunEventsListener(url, connect_timeout_s=1)
            listener.start()
            await asyncio.wait_for(listener.connected.wait(), 60)
            with listener.watch("run-1") as watch:
                watch.take()  # the first look's read, done
                assert not watch.woke.is_set()
                pg._kill()
                assert await watch.wait(60), "the lost connection did not wake the watcher"
                _, must_read = watch.take()
                assert must_read, "the watcher was woken without being sent to its log"
    finally:
        if listener is not None:
            await listener.close()
        pg.stop()
