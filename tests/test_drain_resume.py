"""A draining ``agentchat serve`` answers a resume of a run it let go with 503
``shutting_down`` and ``Retry-After`` — as it answers a new run — on every face that
resumes: the native events (``GET /v1/agent/runs/{id}/events``, the runs API's
``stream_url``), a retried chat (``POST /v1/agent/chat`` with ``Last-Event-ID``) and the AI
SDK resume (``GET /v1/agent/ui-stream/{chat}/stream``). The OpenAI face does not resume.

Walkthrough 39: after the grace, a reconnect with ``Last-Event-ID`` for the released,
unfinished run got 200 with an empty body, which an EventSource reads as a clean end and
reconnects at once (20 empty 200s in 80 ms until the port closed).

A real server on the paced Ollama fake, a short grace: a run is followed mid-turn,
SIGTERM; its stream ends when the grace ends and the run is released; from that moment
the three resumes are sent again and again, as a client that reconnects at once does,
until the port closes.

Once its runs are released the server closes its port as soon as the drain's last writes
(the released runs' leases) are stored: about 0.1 s on a quiet machine, and under load
often before this test's client was even scheduled (then no face was answered at all, 4
tries of 8 at load 10; the test used to try 3 times and failed in CI). So the test holds
the database's write lock from just before SIGTERM, as a busy database would: the drain
waits for it (``AGENT_DB_WRITE_RETRY_S`` is long here) with its runs released and its
port open, every face is answered, and only then is the lock let go and the port closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson

from tests.fakes.paced_ollama import run_body
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, client, start_run, tool_stack
from tests.support.sse import iter_sse

#: (face, status, Retry-After, error code, body bytes) of one resume answered while draining.
Answer = tuple[str, int, str | None, str | None, int]


async def _read_until_released(http: httpx.AsyncClient, url: str, text: asyncio.Event) -> tuple[list[str], int]:
    """Read the run's stream to its end: (event names, last id); ``text`` is set at its
    first streamed text (then SIGTERM is sent: the stream ends when the grace does and the
    run is let go)."""
    names: list[str] = []
    last = 0
    async with http.stream("GET", url, headers={"Accept": "text/event-stream", **DEMO_AUTH}) as response:
        assert response.status_code == 200
        async for ev in iter_sse(response.aiter_lines()):
            if ev.event == "heartbeat":
                continue
            names.append(ev.event)
            if ev.event == "content_chunk":
                text.set()
            if ev.id is not None and ev.id.isdigit():
                last = int(ev.id)
    return names, last


async def _resume(http: httpx.AsyncClient, face: str, request: httpx.Request) -> Answer | None:
    """One resume; ``None`` once the port is closed."""
    try:
        response = await http.send(request)
    except httpx.TransportError:
        return None
    code = None
    if response.headers.get("content-type", "").startswith("application/"):
        code = orjson.loads(response.content).get("error")
    return face, response.status_code, response.headers.get("retry-after"), code, len(response.content)


#: The three faces that resume a run.
FACES = {"events", "ui-stream", "chat"}


async def test_a_draining_server_answers_a_resume_of_a_released_run_503(tmp_path: Path) -> None:
    async with tool_stack(tmp_path, tokens=40, pause_s=0.05) as stack:
        names, held, closing = await _drain_and_resume(stack, tmp_path)
    assert "content_chunk" in names and "message_complete" not in names, names  # released, not ended
    assert {a[0] for a in held} == FACES, held  # while the drain waited: every face answered
    wrong = [a for a in held + closing if a[1:4] != (503, "2", "shutting_down")]
    assert not wrong, wrong


@contextlib.asynccontextmanager
async def _writes_held(db_path: Path) -> AsyncIterator[None]:
    """The server's SQLite file write-locked (``BEGIN IMMEDIATE`` on a connection of this
    test) for the block: the server's writes wait, as on a busy database; reads go on (WAL)."""
    conn = sqlite3.connect(db_path, timeout=30, isolation_level=None, check_same_thread=False)
    try:
        await asyncio.to_thread(conn.execute, "BEGIN IMMEDIATE")
        try:
            yield
        finally:
            await asyncio.to_thread(conn.execute, "ROLLBACK")
    finally:
        conn.close()


async def _drain_and_resume(stack: ToolStack, workdir: Path) -> tuple[list[str], list[Answer], list[Answer]]:
    """One server: a run followed mid-turn, SIGTERM with the database's writes held, the
    resumes from the release on until every face was answered, then the writes let go and
    the resumes until the port closes; (event names of the first stream, answers while the
    drain waited, answers after)."""
    chat_id = f"chat-drain-{uuid.uuid4().hex[:8]}"
    server = AgentServer(workdir, stack.agent_env(AGENT_SHUTDOWN_GRACE_S="0.5", AGENT_DB_WRITE_RETRY_S="120"))
    server.start()
    try:
        await server.wait_healthy()
        async with client() as http:
            body = {**run_body(chat_id), "conversation_id": chat_id}
            status, started = await start_run(http, server.base, body)
            assert status == 201, started
            text = asyncio.Event()
            reading = asyncio.create_task(_read_until_released(http, f"{server.base}{started['stream_url']}", text))
            # Mid-run: a model turn streams (the run takes several paced turns).
            await asyncio.wait_for(text.wait(), 60)
            resumes = _Resumes(http, server, chat_id, started["stream_url"], body)
            async with _writes_held(server.db_path):
                server.send(signal.SIGTERM)
                names, resumes.last = await asyncio.wait_for(reading, 60)
                held = await resumes.until_every_face()
            closing = await resumes.until_closed()
            assert await server.wait_exit(60) is not None, server.tail()
    finally:
        server.close()
    return names, held, closing


class _Resumes:
    """The three resumes at once, again and again, as a client reconnecting at once does."""

    def __init__(
        self, http: httpx.AsyncClient, server: AgentServer, chat_id: str, stream_url: str, body: dict[str, object]
    ) -> None:
        self.http, self.server, self.chat_id, self.stream_url, self.body = http, server, chat_id, stream_url, body
        self.last = 0

    async def until_every_face(self) -> list[Answer]:
        """Rounds until each face was answered; the port must stay open meanwhile."""
        answers: list[Answer] = []
        async with asyncio.timeout(30):
            while {a[0] for a in answers} < FACES:
                round_ = await self._round()
                if all(a is None for a in round_):
                    raise AssertionError(f"the port closed before every face was answered: {answers}")
                answers.extend(a for a in round_ if a is not None)
        return answers

    async def until_closed(self) -> list[Answer]:
        """Rounds until the port refuses a whole round; what was answered meanwhile."""
        answers: list[Answer] = []
        async with asyncio.timeout(30):
            while any(round_ := await self._round()):
                answers.extend(a for a in round_ if a is not None)
        return answers

    async def _round(self) -> list[Answer | None]:
        http, base = self.http, self.server.base
        resumed_from = {"Last-Event-ID": str(self.last), **DEMO_AUTH}
        return list(await asyncio.gather(
            _resume(http, "events", http.build_request("GET", f"{base}{self.stream_url}", headers=resumed_from)),
            _resume(http, "ui-stream", http.build_request(
                "GET", f"{base}/v1/agent/ui-stream/{self.chat_id}/stream", headers=DEMO_AUTH)),
            _resume(http, "chat", http.build_request(
                "POST", f"{base}/v1/agent/chat", json=self.body, headers=resumed_from)),
        ))
