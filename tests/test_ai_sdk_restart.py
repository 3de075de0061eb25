"""After a restart, the AI SDK resume shows the answer once: the model turn a SIGKILL cut
off (its ``content_chunk``s are in the log, then ``run_resumed`` names them ``discarded``)
is left out of the UI message, so the reader never shows the cut-off partial text and
then the whole answer.

A real server process on the paced Ollama fake (in this process, so it outlives the
kill) is SIGKILLed while a model turn streams after a checkpoint; the next process
carries the run on; the ``ai`` package's own reader (``tests/js/ai_sdk_client.mjs``)
reads ``GET /v1/agent/ui-stream/{chat}/stream`` to the run's end.

The same with the resume made at once, on another process, before the take-over
(``serve --workers 2``, SQLite and PostgreSQL: one worker SIGKILLed, its lease not yet
expired): the log then ends inside the cut turn and nothing says yet it will be
discarded, so the face holds that turn back until the take-over's ``run_resumed`` drops
it (walkthrough 39, bug 1: the reader showed the partial turn, then the re-run turn).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import pytest_asyncio

from tests.fakes.paced_ollama import run_body
from tests.support.postgres import TestPostgres
from tests.support.procs import (
    DEMO_AUTH,
    AgentServer,
    ToolStack,
    Trace,
    client,
    follow,
    replay,
    start_run,
    tool_stack,
    until,
)
from tests.test_ai_sdk_stream import js, node, of, texts
from tests.test_workers import follow_on, pinned_clients, start_on, workers

__all__ = ["node"]  # the fixture, shared with the AI SDK tests

#: The fake model's pause between words once the process is killed: the pacing only keeps
#: the run mid-turn until the kill; what is carried on after it need not crawl.
AFTER_KILL_PAUSE_S = 0.005
#: The fake's pacing until the kill.
PAUSE_S = 0.05
#: The tests run in the event loop of the module's ``tools`` (its fake model and proxy are served there).
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The paced model fake, the counting proxy and the backend, one for the module (a
    backend's start each test saved): each test chats under an id of its own and sets the
    fake up for itself (``paced``)."""
    async with tool_stack(tmp_path_factory.mktemp("tools"), tokens=30, pause_s=PAUSE_S) as stack:
        yield stack


def paced(tools: ToolStack, tokens: int) -> ToolStack:
    """``tools`` with its fake as a test starts it: ``tokens`` words a turn ``PAUSE_S``
    apart, held by nothing (``let_go`` sped the last test's up and let it go)."""
    tools.fake.tokens, tools.fake.pause_s, tools.fake.streaming_until = tokens, PAUSE_S, None
    return tools


async def held_mid_turn(fake: Any, trace: Trace) -> None:
    """Until a model turn after a checkpoint streams and cannot end: once a tool result
    (a checkpoint) is seen, every turn streams on (``streaming_until``) until the test
    lets it go after the kill. Before, a loaded machine's follower lagged a whole turn
    behind the server, which had ended that turn and written the next checkpoint when the
    kill came: nothing was cut, and ``run_resumed`` discarded nothing (a CI failure)."""
    await until(lambda: "tool_call_result" in trace.names(), "a checkpoint", 60)
    fake.streaming_until = asyncio.Event()
    await until(lambda: fake.held_words > 0 and _mid_turn(trace), "a model turn held streaming after a checkpoint", 60)


def let_go(fake: Any) -> None:
    """After the kill: what is carried on need not crawl, nor be held."""
    fake.pause_s = AFTER_KILL_PAUSE_S
    assert fake.streaming_until is not None
    fake.streaming_until.set()


def _mid_turn(trace: Trace) -> bool:
    """A tool result (a checkpoint) was seen, and text of the next model turn after it."""
    names = trace.names()
    last_result = max((i for i, n in enumerate(names) if n == "tool_call_result"), default=-1)
    return last_result >= 0 and "content_chunk" in names[last_result + 1 :]


@MODULE_LOOP
async def test_a_resume_after_a_restart_shows_the_answer_once(node: str, tmp_path: Path, tools: ToolStack) -> None:
    chat_id = f"chat-restart-{uuid.uuid4().hex[:8]}"
    stack = paced(tools, tokens=40)
    server = AgentServer(tmp_path, stack.agent_env())
    server.start()
    try:
        await server.wait_healthy()
        async with client() as http:
            status, body = await start_run(http, server.base, {**run_body(chat_id), "conversation_id": chat_id})
            assert status == 201, (status, body)
            trace = Trace(tag=chat_id, run_id=body["run_id"], stream_url=body["stream_url"])
            reading = asyncio.create_task(follow(http, server.base, trace, deadline_s=120))
            await held_mid_turn(stack.fake, trace)
            server.send(signal.SIGKILL)
            let_go(stack.fake)
            await server.wait_exit(30)
            server.start()
            await server.wait_healthy()
            url = f"{server.base}/v1/agent/ui-stream/{chat_id}/stream"
            async with js(node, mode="reader", method="GET", url=url, headers=DEMO_AUTH) as reader:
                records = await reader.finish()
            await reading
            status, stored = await replay(http, server.base, trace.stream_url or "")
    finally:
        server.close()

    assert status == 200 and stored[-1][1] == "message_complete"
    [response] = of(records, "response")
    assert response["status"] == 200
    _shown_once(stored, records, body["run_id"])


def _reaped(pid: int) -> bool:
    """``pid`` is gone or a zombie: its listening socket is closed."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _shown_once(stored: list[Any], records: list[dict[str, Any]], run_id: str) -> None:
    """The reader's message holds the run's text without the turn its ``run_resumed``
    discarded (and that turn had text, else nothing is proved)."""
    [resumed] = [orjson.loads(d) for _, name, d in stored if name == "run_resumed"]
    assert resumed["discarded"] is not None, resumed
    first, last = resumed["discarded"]["from_seq"], resumed["discarded"]["to_seq"]
    chunks = [(int(i or 0), orjson.loads(d)["chunk"]) for i, name, d in stored if name == "content_chunk"]
    cut = "".join(c for seq, c in chunks if first <= seq <= last)
    kept = "".join(c for seq, c in chunks if not first <= seq <= last)
    assert cut.strip(), "the killed turn had streamed text (else this test proves nothing)"
    assert not of(records, "error"), records  # every chunk passed the SDK's schema
    [message] = [r["message"] for r in of(records, "message")]
    assert message["id"] == run_id
    [answer] = [orjson.loads(d)["answer"] for _, name, d in stored if name == "response"]
    assert texts(message) in (kept, kept + answer), (texts(message), kept)
    assert [r["chunk"]["type"] for r in of(records, "chunk")][-1] == "finish"


@pytest.mark.slow
@MODULE_LOOP
@pytest.mark.parametrize("engine", ["sqlite", "postgres"])
async def test_a_resume_before_the_take_over_shows_the_answer_once(
    node: str, tmp_path: Path, engine: str, request: pytest.FixtureRequest, tools: ToolStack
) -> None:
    pg: TestPostgres | None = request.getfixturevalue("pg_server") if engine == "postgres" else None
    chat_id = f"chat-takeover-{uuid.uuid4().hex[:8]}"
    # A lease long enough that the resume is surely made before the take-over.
    async with (
        workers(tmp_path, engine, pg, tools=paced(tools, tokens=30), AGENT_RUN_LEASE_S="5") as (tools, server),
        pinned_clients(server.base, 1) as pins,
    ):
        (a,), (b,) = pins.values()
        started = await start_on(a, {**run_body(chat_id), "conversation_id": chat_id})
        trace = Trace(tag=chat_id, run_id=started["run_id"], stream_url=started["stream_url"])
        watching = asyncio.create_task(follow_on(b, trace))
        url = f"{server.base}/v1/agent/ui-stream/{chat_id}/stream"
        async with js(node, mode="reader", method="GET", url=url, headers=DEMO_AUTH, onCue=True) as reader:
            await reader.until(lambda rs: bool(of(rs, "ready")), "the reader loaded")
            await held_mid_turn(tools.fake, trace)
            os.kill(a.pid, signal.SIGKILL)
            let_go(tools.fake)
            await until(lambda: _reaped(a.pid), "the killed worker gone", 30)
            await reader.send("go")  # useChat's resume on reload, at once, on the other worker
            await reader.until(lambda rs: bool(of(rs, "response")), "the resume's response")
            async with client() as http:  # b's one connection carries its follower
                info = await http.get(f"{server.base}/v1/agent/runs/{trace.run_id}", headers=DEMO_AUTH)
            assert info.json()["resumes"] == 0, "taken over before the resume: the test proves nothing"
            records = await reader.finish(timeout=90)
        await asyncio.wait_for(watching, 90)
        status, stored = await replay(b.http, b.base, trace.stream_url or "")
    assert status == 200 and stored[-1][1] == "message_complete"
    [response] = of(records, "response")
    assert response["status"] == 200
    _shown_once(stored, records, started["run_id"])
