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
until the port closes (about 0.1 s later: a try in which it closed before both GET faces
were answered is made again, ``TRIES``).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
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


#: Tries of the scenario: the port closes within ~0.1 s of the release (uvicorn's tick), and
#: a try whose port closed before both GET faces were answered proves nothing.
TRIES = 3


async def test_a_draining_server_answers_a_resume_of_a_released_run_503(tmp_path: Path) -> None:
    async with tool_stack(tmp_path, tokens=40, pause_s=0.05) as stack:
        for attempt in range(TRIES):
            names, answers = await _drain_and_resume(stack, tmp_path / f"try{attempt}")
            assert "content_chunk" in names and "message_complete" not in names, names  # released, not ended
            wrong = [a for a in answers if a[1:4] != (503, "2", "shutting_down")]
            assert not wrong, wrong
            if {"events", "ui-stream"} <= {a[0] for a in answers}:
                return
    raise AssertionError(f"in {TRIES} tries the port closed before every face was answered: {answers}")


async def _drain_and_resume(stack: ToolStack, workdir: Path) -> tuple[list[str], list[Answer]]:
    """One server: a run followed mid-turn, SIGTERM, the resumes from the release on;
    (event names of the first stream, answers)."""
    workdir.mkdir()
    chat_id = f"chat-drain-{uuid.uuid4().hex[:8]}"
    server = AgentServer(workdir, stack.agent_env(AGENT_SHUTDOWN_GRACE_S="0.5"))
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
            server.send(signal.SIGTERM)
            names, last = await asyncio.wait_for(reading, 60)
            answers = await _resume_until_closed(http, server, chat_id, started["stream_url"], body, last)
            assert await server.wait_exit(60) is not None, server.tail()
    finally:
        server.close()
    return names, answers


async def _resume_until_closed(
    http: httpx.AsyncClient, server: AgentServer, chat_id: str, stream_url: str, body: dict[str, object], last: int
) -> list[Answer]:
    """The three resumes at once, again and again, from the end of the released stream
    until the port refuses them all (a client reconnecting at once); 30 s at most."""
    answers: list[Answer] = []
    resumed_from = {"Last-Event-ID": str(last), **DEMO_AUTH}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        round_ = await asyncio.gather(
            _resume(http, "events", http.build_request("GET", f"{server.base}{stream_url}", headers=resumed_from)),
            _resume(http, "ui-stream", http.build_request(
                "GET", f"{server.base}/v1/agent/ui-stream/{chat_id}/stream", headers=DEMO_AUTH)),
            _resume(http, "chat", http.build_request(
                "POST", f"{server.base}/v1/agent/chat", json=body, headers=resumed_from)),
        )
        if all(a is None for a in round_):
            return answers
        answers.extend(a for a in round_ if a is not None)
    raise AssertionError(f"the draining server kept answering for 30 s: {answers[-6:]}")
