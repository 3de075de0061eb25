"""A follower on replica B of a run executing on replica A, when PostgreSQL goes down
mid-stream, is kept: heartbeats go on while the log cannot be read
(``RemoteRuns.follow_events``), and the run's events follow on the same connection once
it can (``tests/storage/test_postgres_outage_follower_app.py``: a browser's EventSource
reconnecting while the database was still away was answered 503 and closed for good).

Before that, B ended the stream with an ``error`` (``storage_unavailable``) without an
id; before that again, B's shared tail raised ``StorageUnavailable`` through the SSE
response after it had started: the client saw ``peer closed connection without sending
complete message body`` and B logged "Exception in ASGI application". Neither happens:
B makes up no error and no ending while it waits.

A PostgreSQL of this test's own (stopping the session's would stop every other test's).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
import pytest

from tests.fakes.paced_ollama import run_body
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, client, start_run, until
from tests.support.procs import tool_stack as make_tool_stack
from tests.support.sse import iter_sse

Frame = tuple[str | None, str, str]
#: Heartbeats B sends after PostgreSQL stopped before the client leaves: the follower
#: was kept through several of B's looks at the log (one every 2 s).
BEATS_KEPT = 8
#: What B logs once when its follower meets the outage (``app/runs/remote.py``).
WAITS = "its follower waits for the database"


@pytest.mark.timeout(300)
async def test_a_remote_follower_is_kept_with_heartbeats_when_postgresql_stops(tmp_path: Path) -> None:
    pg = TestPostgres().start()
    try:
        with pg.database(empty=True) as url:
            async with make_tool_stack(tmp_path, tokens=400, pause_s=0.05) as stack:
                env = stack.agent_env(
                    AGENT_DATABASE_URL=url,
                    AGENT_SECRET_KEY="replicas-share-this-key-0123456789",
                    AGENT_HEARTBEAT_S="0.5",
                )
                a, b = AgentServer(tmp_path, env, name="a"), AgentServer(tmp_path, env, name="b")
                for server in (a, b):
                    server.start()
                try:
                    await asyncio.gather(a.wait_healthy(), b.wait_healthy())
                    before, after, ended = await _follow_on_b_while_postgres_stops(pg, a, b)
                    waited = b.grep(WAITS)
                finally:
                    for server in (a, b):
                        await server.kill()
                        server.close()
                names = [name for _, name, _ in before if name != "heartbeat"]
                assert "content_chunk" in names, names
                assert ended is None, (ended, after[-5:], b.tail())
                assert _beats(after) >= BEATS_KEPT, after[-5:]
                # What B sends after the stop: heartbeats, and events committed before it
                # (under their ids) - no id-less error, no ending made up.
                made_up = [f for f in after if f[1] != "heartbeat" and (f[0] is None or f[1] == "message_complete")]
                assert not made_up, (made_up, b.tail())
                assert waited, b.tail()
                assert not b.grep("Exception in ASGI application", "unhandled error"), b.tail()
    finally:
        pg.stop()


async def _follow_on_b_while_postgres_stops(
    pg: TestPostgres, a: AgentServer, b: AgentServer
) -> tuple[list[Frame], list[Frame], str | None]:
    """Start a run on A, read it on B; stop PostgreSQL once B streams it, and leave after
    ``BEATS_KEPT`` heartbeats. (the frames before the stop, those after it, how B's body
    ended before the client left: ``eof``, the transport error's name, or ``None``)."""
    before: list[Frame] = []
    after: list[Frame] = []
    async with client() as http:
        status, body = await start_run(http, a.base, run_body(f"outage-{uuid.uuid4().hex[:6]}"))
        assert status == 201, (status, body, a.tail())
        streaming = asyncio.Event()
        stopped = False

        async def read() -> str:
            headers = {"Accept": "text/event-stream", **DEMO_AUTH}
            async with http.stream("GET", f"{b.base}{body['stream_url']}", headers=headers) as response:
                assert response.status_code == 200, response.status_code
                try:
                    async for ev in iter_sse(response.aiter_lines()):
                        (after if stopped else before).append((ev.id, ev.event, ev.data))
                        if ev.event == "content_chunk":
                            streaming.set()
                except httpx.TransportError as exc:
                    return type(exc).__name__
            return "eof"

        reader = asyncio.create_task(read())
        try:
            await until(lambda: streaming.is_set() or reader.done(), "B streaming A's run", timeout=90)
            assert streaming.is_set(), (before, reader.result() if reader.done() else None, b.tail())
            pg._kill()  # the server stops ("fast" shutdown: every session is cut)
            stopped = True
            # Kept: the heartbeats, and B's word that the follower waits (logged once its
            # look at the log failed, which a loaded machine may bring after the beats).
            await until(
                lambda: (_beats(after) >= BEATS_KEPT and bool(b.grep(WAITS))) or reader.done(),
                "B's follower kept or ended",
                timeout=120,
            )
            return before, after, reader.result() if reader.done() else None
        finally:
            if not reader.done():
                reader.cancel()


def _beats(frames: list[Frame]) -> int:
    return sum(1 for _, name, _ in frames if name == "heartbeat")


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
