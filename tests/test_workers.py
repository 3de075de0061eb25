"""``agentchat serve --workers 2`` (issue 23 item 3): two processes accepting on one port,
each a replica of its own, on the default SQLite file and on PostgreSQL.

Which worker answers a connection is the kernel's choice, so the test pins clients: each
client holds one keep-alive connection, learns the worker behind it from ``/readyz``
(``load.replica``: ``host:pid:id``), and every request that matters is checked to have
gone over that same TCP connection (its local port) — so "started on A, followed from
B" is a fact, not a likelihood. The model is the paced Ollama fake (in this process);
every run walks knowledge_base_search → a side-effecting backend call (through the
counting proxy) → generate_response.

- a run started on worker A is followed live from worker B, and cancelled from B;
- SIGKILL of worker A mid-run: its runs are handed over (lease) and finish; the followers
  on B saw ids 1..N once each, exactly one ``message_complete``, the same as the stored log;
  the side-effecting call reached the backend at most once per run; the parent starts a
  new worker (a new replica id) and the port keeps answering.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio

from tests.fakes.paced_ollama import run_body, side_effect_marker
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, Trace, check_trace, replay, until
from tests.support.procs import tool_stack as make_tool_stack
from tests.support.sse import iter_sse

pytestmark = pytest.mark.slow

LEASE_S = 2.0
WORKERS = 2
#: The fake model's pause between words once a worker is dead: the pacing only keeps the
#: runs mid-turn until the kill; the hand-over need not crawl.
AFTER_KILL_PAUSE_S = 0.005
#: The tests on one ``tool_group`` run in its event loop (its fake model and proxy are served there).
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


def local_port(response: httpx.Response) -> int:
    """The client-side port of the TCP connection that carried ``response``."""
    return int(response.extensions["network_stream"].get_extra_info("client_addr")[1])


@dataclass(slots=True)
class Pinned:
    """A client with one connection to one worker."""

    http: httpx.AsyncClient
    base: str
    replica: str = ""
    port: int = 0

    @property
    def pid(self) -> int:
        return int(self.replica.split(":")[1])

    async def learn(self) -> str:
        answer = await self.http.get(f"{self.base}/readyz")
        self.replica, self.port = answer.json()["load"]["replica"], local_port(answer)
        return self.replica

    def check(self, response: httpx.Response) -> None:
        assert local_port(response) == self.port, "the pinned connection was replaced; the worker is unknown"


@asynccontextmanager
async def pinned_clients(base: str, per_worker: int) -> AsyncIterator[dict[str, list[Pinned]]]:
    """``per_worker`` pinned clients on each of ``WORKERS`` workers, by replica id."""
    by_replica: dict[str, list[Pinned]] = {}
    async with AsyncExitStack() as stack:
        for _ in range(400):
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    timeout=httpx.Timeout(30, connect=5),
                    # httpx drops a connection idle for 5 s by default (keepalive_expiry), and
                    # its replacement may land on another worker: a pin idle while a loaded
                    # machine waits for a run lost its worker (CI). Kept below the server's
                    # 75 s (app/cli/header_guard.KEEP_ALIVE_S), longer than any wait here.
                    limits=httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=70),
                )
            )
            pin = Pinned(http, base)
            slot = by_replica.setdefault(await pin.learn(), [])
            if len(slot) < per_worker:
                slot.append(pin)
            if len(by_replica) == WORKERS and all(len(v) >= per_worker for v in by_replica.values()):
                yield by_replica
                return
        raise AssertionError(f"the kernel never spread connections over {WORKERS} workers: {list(by_replica)}")


async def start_on(pin: Pinned, body: dict[str, Any]) -> dict[str, Any]:
    answer = await pin.http.post(f"{pin.base}/v1/agent/runs", json=body, headers=DEMO_AUTH)
    assert answer.status_code == 201, answer.text
    pin.check(answer)
    return dict(answer.json())


async def follow_on(pin: Pinned, trace: Trace) -> Trace:
    """Read the run on the pinned worker to its ``message_complete`` (no reconnect: the
    worker stays up, and a reconnect could land on another one)."""
    assert trace.stream_url is not None
    async with pin.http.stream(
        "GET", f"{pin.base}{trace.stream_url}", headers={"Accept": "text/event-stream", **DEMO_AUTH}
    ) as response:
        assert response.status_code == 200, await response.aread()
        pin.check(response)
        segment: list[tuple[str | None, str, str]] = []
        trace.segments.append(segment)
        async for ev in iter_sse(response.aiter_lines()):
            if ev.event == "heartbeat":
                continue
            segment.append((ev.id, ev.event, ev.data))
            if ev.event == "message_complete":
                trace.outcome = "complete"
                break
    return trace


def saw(trace: Trace, name: str) -> bool:
    return any(event == name for _, event, _ in trace.frames)


@asynccontextmanager
async def workers(
    tmp_path: Path, engine: str, pg: TestPostgres | None, *, tools: ToolStack | None = None, **env: str
) -> AsyncIterator[tuple[Any, AgentServer]]:
    """``serve --workers 2`` on ``engine`` against ``tools`` (a module's own, served in its
    event loop), or against a tool stack started here for the group."""
    async with AsyncExitStack() as stack:
        if tools is None:
            tools = await stack.enter_async_context(make_tool_stack(tmp_path, tokens=30, pause_s=0.05))
        extra = {"AGENT_WORKERS": str(WORKERS), "AGENT_RUN_LEASE_S": str(LEASE_S), **env}
        if engine == "postgres":
            assert pg is not None
            extra["AGENT_DATABASE_URL"] = stack.enter_context(pg.database())
            extra["AGENT_SECRET_KEY"] = "workers-share-this-key-0123456789"
        server = AgentServer(tmp_path, tools.agent_env(**extra), name=f"workers-{engine}")
        server.start()
        stack.callback(server.close)
        await server.wait_healthy()
        yield tools, server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The paced model fake, the counting proxy and the backend, one for both engines'
    groups: every test holds and counts by tags of its own, and the SIGKILL test puts the
    fake's pacing back when it is done."""
    async with make_tool_stack(tmp_path_factory.mktemp("tools"), tokens=30, pause_s=0.05) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["sqlite", "postgres"])
async def tool_group(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tools: ToolStack
) -> AsyncIterator[tuple[Any, AgentServer]]:
    """One ``serve --workers 2`` group per engine (on the module's ``tools``) for the
    follow/cancel and the SIGKILL tests: each runs and counts by tags of its own, and the
    SIGKILL test, last, leaves a group whose supervisor replaced the killed worker. One
    start of the group instead of two, and one of the backend and the fakes for both."""
    engine = str(request.param)
    pg = request.getfixturevalue("pg_server") if engine == "postgres" else None
    async with workers(tmp_path_factory.mktemp(f"workers-{engine}"), engine, pg, tools=tools) as group:
        yield group


@MODULE_LOOP
async def test_a_run_on_one_worker_is_followed_and_cancelled_from_another(
    tool_group: tuple[Any, AgentServer],
) -> None:
    tools, server = tool_group
    async with pinned_clients(server.base, 2) as pins:
        (a, a2), (b, b2) = pins.values()
        tag = f"follow-{uuid.uuid4().hex[:6]}"
        held = tools.proxy.hold(side_effect_marker(tag))  # the run waits mid-way until released
        started = await start_on(a, run_body(tag))
        trace = Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"])
        following = asyncio.create_task(follow_on(b, trace))
        await until(lambda: saw(trace, "tool_call_start") and held.reached.is_set(), "B following A's run", 60)

        # A cancel through worker B reaches the run on A (the store carries it).
        cancel = await b2.http.post(f"{b2.base}/v1/agent/runs/{trace.run_id}/cancel", headers=DEMO_AUTH)
        b2.check(cancel)
        assert cancel.status_code in (200, 202), cancel.text
        held.release.set()
        await asyncio.wait_for(following, 60)
        final = orjson.loads(trace.frames[-1][2])
        assert trace.frames[-1][1] == "message_complete" and final["status"] == "cancelled", trace.frames[-3:]
        status, stored = await replay(a2.http, a2.base, trace.stream_url or "")
        # The follower on B saw exactly the stored log (ids 1..N, once each).
        assert status == 200 and stored == trace.frames
        assert [f[0] for f in stored] == [str(i) for i in range(1, len(stored) + 1)]
        assert server.running and a.replica != b.replica


@MODULE_LOOP
async def test_sigkill_of_one_worker_hands_its_runs_to_the_other(tool_group: tuple[Any, AgentServer]) -> None:
    tools, server = tool_group
    runs = 3
    paced = tools.fake.pause_s
    async with pinned_clients(server.base, runs) as pins:
        (a, *_), followers_on_b = pins.values()
        tags = [f"kill-{i}-{uuid.uuid4().hex[:6]}" for i in range(runs)]
        held = tools.proxy.hold(side_effect_marker(tags[0]))  # worker A dies inside this call
        traces: list[Trace] = []
        tasks = []
        for tag, b in zip(tags, followers_on_b, strict=True):
            started = await start_on(a, run_body(tag))
            trace = Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"])
            traces.append(trace)
            tasks.append(asyncio.create_task(follow_on(b, trace)))
        await until(
            lambda: all(saw(t, "content_chunk") for t in traces) and held.reached.is_set(),
            "worker B following every run of A, one backend call in flight",
            60,
        )
        unfinished = [t.tag for t in traces if not saw(t, "message_complete")]
        assert unfinished, "the runs finished before the kill; the test proves nothing"

        os.kill(a.pid, signal.SIGKILL)
        tools.fake.pause_s = AFTER_KILL_PAUSE_S
        held.release.set()
        try:
            _, pending = await asyncio.wait(tasks, timeout=120)
        finally:
            tools.fake.pause_s = paced
        for task in pending:
            task.cancel()
        assert not pending, [t.frames[-2:] for t in traces]

        b = followers_on_b[0]
        problems = {}
        for trace in traces:
            status, stored = await replay(b.http, b.base, trace.stream_url or "")
            found = check_trace(trace, stored if status == 200 else [])
            if sum(1 for f in stored if f[1] == "message_complete") != 1:
                found.append("the stored log does not hold exactly one message_complete")
            if tools.proxy.side_effects(trace.tag) > 1:
                found.append("the side-effecting backend call ran more than once")
            if trace.tag in unfinished and not saw(trace, "run_resumed"):
                found.append("a run unfinished at the kill was not announced as resumed")
            if found:
                problems[trace.tag] = found
        assert not problems, (problems, server.tail(40))
        assert all(orjson.loads(t.frames[-1][2])["status"] == "completed" for t in traces)

        # The parent started another worker in A's place: a new replica answers on the port.
        async def new_worker() -> bool:
            async with httpx.AsyncClient(timeout=5) as http:
                replica = (await http.get(f"{server.base}/readyz")).json()["load"]["replica"]
            return replica not in {a.replica, b.replica}

        deadline = time.monotonic() + 60
        while not await new_worker():
            assert time.monotonic() < deadline, f"no new worker answered after the kill:\n{server.tail(40)}"
            await asyncio.sleep(0.05)
        assert server.running


def test_a_worker_that_cannot_start_stops_the_service(tmp_path: Path) -> None:
    """No crash loop: a worker whose app cannot start (here its database is a
    directory) stops every worker, and the command exits 3 like a single process would.
    A database whose directory cannot be created stops it before any worker starts: the
    supervisor cannot take the file's writer lock there (one line, exit 3)."""
    import subprocess

    from tests.support.procs import PYTHON, REPO, child_env

    (tmp_path / "agent.sqlite3").mkdir()
    settings = {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false"}
    env = child_env({**settings, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    argv = [PYTHON, "-m", "app.cli", "serve", "--port", "0", "--no-backend", "--workers", "2"]
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert b"a worker could not start the service" in done.stderr + done.stdout
    nowhere = child_env({**settings, "AGENT_DB_PATH": "/proc/no-such-dir/agent.sqlite3"})
    for command in (argv, argv[:-2]):  # the supervisor, a single process
        early = subprocess.run(command, cwd=REPO, env=nowhere, capture_output=True, timeout=120)
        assert early.returncode == 3, early.stderr[-2000:]
        assert b"cannot take the database's writer lock /proc/no-such-dir/agent.sqlite3.writer.lock" in early.stderr
        assert b"Traceback" not in early.stderr, early.stderr[-2000:]
    refused = subprocess.run([*argv, "--reload"], cwd=REPO, env=nowhere, capture_output=True, timeout=60)
    assert refused.returncode == 2 and b"--workers" in refused.stderr


async def test_two_users_runs_stay_their_own_across_workers(tmp_path: Path) -> None:
    """JWT users: a run user A started on one worker is readable by A through the other
    worker, and by nobody else — not its events, its cancel, nor its conversation."""
    import time as clock

    from app.server.auth import sign_hs256

    secret = "workers-owner-secret-0123456789ab"

    def bearer(sub: str) -> dict[str, str]:
        now = int(clock.time())
        return {"Authorization": "Bearer " + sign_hs256({"sub": sub, "iat": now, "exp": now + 3600}, secret)}

    env = {
        "AGENT_WORKERS": str(WORKERS),
        "AGENT_AUTH": "jwt",
        "AGENT_JWT_SECRET": secret,
        "AGENT_LLM_PROVIDER": "extractive",
        "AGENT_EMBEDDER": "none",
        "AGENT_INGEST_SAMPLE_KB": "false",
        "OLLAMA_HOST": "http://127.0.0.1:9",
    }
    server = AgentServer(tmp_path, env, name="workers-owners")
    server.start()
    try:
        await server.wait_healthy()
        async with pinned_clients(server.base, 1) as pins:
            (a,), (b,) = pins.values()
            body = {"message": "What is in the knowledge base?", "context_type": "knowledge"}
            started = await a.http.post(f"{a.base}/v1/agent/runs", json=body, headers=bearer("alice"))
            a.check(started)
            assert started.status_code == 201, started.text
            run_id, conversation = started.json()["run_id"], started.json()["conversation_id"]
            events = f"{b.base}/v1/agent/runs/{run_id}/events"

            mallory = bearer("mallory")
            for method, url in [
                ("GET", events),
                ("POST", f"{b.base}/v1/agent/runs/{run_id}/cancel"),
                ("GET", f"{b.base}/v1/agent/conversations/{conversation}"),
            ]:
                answer = await b.http.request(method, url, headers=mallory)
                b.check(answer)
                assert answer.status_code == 404, (method, url, answer.status_code, answer.text)

            async with b.http.stream("GET", events, headers=bearer("alice")) as own:
                b.check(own)
                assert own.status_code == 200
                names = [ev.event async for ev in iter_sse(own.aiter_lines()) if ev.event != "heartbeat"]
            assert names[0] == "run_started" and names.count("message_complete") == 1, names
            mine = await b.http.get(f"{b.base}/v1/agent/conversations/{conversation}", headers=bearer("alice"))
            b.check(mine)
            assert mine.status_code == 200 and a.replica != b.replica
    finally:
        server.close()
