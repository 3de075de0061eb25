"""Workers on one SQLite file wake each other (``storage/sqlite/worker_feed.py``), through
real processes (``agentchat serve --workers 2``; helpers of ``tests/test_workers.py``).

The followers' safety poll is set to an hour (``AGENT_WORKERS_SAFETY_POLL_S``): whatever
a follower on worker B receives after its first look at the log came through the wake-up
from worker A, never from reading the file on a timer.

What the workers share besides the feed is tested on both engines: one worker runs the
background jobs (a file lock on SQLite, an advisory lock on PostgreSQL) and another takes
them over after a SIGKILL, and every scrape of ``/metrics`` counts every worker's runs
(on PostgreSQL through the supervisor's runtime directory, there being no feed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest
import pytest_asyncio

from tests.fakes.paced_ollama import run_body, side_effect_marker
from tests.support.postgres import TestPostgres
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, Trace, replay, tool_stack, until
from tests.support.readyz_counts import current
from tests.test_workers import WORKERS, Pinned, follow_on, pinned_clients, saw, start_on
from tests.test_workers import pg as pg  # the module's PostgreSQL server, for the postgres cases

ENGINES = pytest.mark.parametrize("engine", ["sqlite", "postgres"])

pytestmark = pytest.mark.slow

NO_SAFETY_POLL = {"AGENT_WORKERS_SAFETY_POLL_S": "3600"}
#: No look of its own at the log and, with leases of an hour, the owner's own look for
#: cancels every six minutes: whatever crosses between the workers came over the feed.
SLOW_LOOKS = {**NO_SAFETY_POLL, "AGENT_RUN_LEASE_S": "3600"}
#: The tests that share ``sqlite_workers`` run in its event loop (its fake model and
#: proxy are served there).
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The paced model fake, the counting proxy and the backend (``tests/test_workers.py``'s
    settings), one for the module: every test holds and counts by a tag of its own."""
    async with tool_stack(tmp_path_factory.mktemp("tools"), tokens=30, pause_s=0.05) as stack:
        yield stack


@contextlib.asynccontextmanager
async def tool_workers(
    tools: ToolStack, folder: Path, engine: str, pg: TestPostgres | None
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    """``serve --workers 2`` on ``engine`` with ``SLOW_LOOKS``, against the module's ``tools``."""
    with contextlib.ExitStack() as stack:
        extra = {"AGENT_WORKERS": str(WORKERS), **SLOW_LOOKS}
        if engine == "postgres":
            assert pg is not None
            extra["AGENT_DATABASE_URL"] = stack.enter_context(pg.database())
            extra["AGENT_SECRET_KEY"] = "workers-share-this-key-0123456789"
        server = AgentServer(folder, tools.agent_env(**extra), name=f"workers-{engine}")
        stack.callback(server.close)
        server.start()
        await server.wait_healthy()
        yield tools, server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def sqlite_workers(
    tools: ToolStack, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    """Two workers on one SQLite file with ``SLOW_LOOKS``, started once for the tests that
    only start runs of their own on them (each its own tag, held and released by that
    test): a start-up is three processes importing the whole app, the larger part of each
    test's time."""
    async with tool_workers(tools, tmp_path_factory.mktemp("workers-feed"), "sqlite", None) as both:
        yield both


@MODULE_LOOP
async def test_a_follower_on_another_worker_gets_every_token_without_polling(
    sqlite_workers: tuple[ToolStack, AgentServer],
) -> None:
    tools, server = sqlite_workers
    async with pinned_clients(server.base, 3) as pins:
        (a, a2, _), (b1, b2, resumer) = pins.values()
        followers_on_b = [b1, b2]
        tags = [f"wake-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
        held = [tools.proxy.hold(side_effect_marker(tag)) for tag in tags]
        traces = []
        for tag in tags:
            started = await start_on(a, run_body(tag))
            traces.append(Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"]))
        following = [asyncio.create_task(follow_on(b, t)) for b, t in zip(followers_on_b, traces, strict=True)]
        # B has looked at the log and waits; everything from here on is written on A.
        await until(
            lambda: all(saw(t, "tool_call_start") for t in traces) and all(h.reached.is_set() for h in held),
            "B following both of A's runs, each held mid-way",
            60,
        )
        seen = [len(t.frames) for t in traces]
        # A client resuming on B with Last-Event-ID in the middle of the live run: B reads
        # what A stored, from SQLite's live log (issue 23), then follows.
        mid = seen[0] // 2
        resuming = asyncio.create_task(replay(resumer.http, resumer.base, traces[0].stream_url or "", after=mid))
        with contextlib.closing(sqlite3.connect(f"file:{server.db_path}?mode=ro", uri=True)) as conn:
            in_log = conn.execute(
                "SELECT count(*) FROM run_log l JOIN runs r ON r.id = l.run_id "
                "WHERE l.run_id = ? AND l.id >= r.log_from",
                (traces[0].run_id,),
            ).fetchone()[0]
        assert in_log >= seen[0], "the live run's events are not in the live log"
        for h in held:
            h.release.set()
        await asyncio.wait_for(asyncio.gather(*following), 60)
        status, resumed = await asyncio.wait_for(resuming, 60)
        assert status == 200 and resumed == traces[0].frames[mid:]

        for trace, before in zip(traces, seen, strict=True):
            assert orjson.loads(trace.frames[-1][2])["status"] == "completed", trace.frames[-3:]
            assert len(trace.frames) - before > 30, "the tokens after the hold did not come over the wake-up"
            status, stored = await replay(a2.http, a2.base, trace.stream_url or "")
            assert status == 200 and stored == trace.frames  # ids 1..N once each, as stored
            assert [f[0] for f in stored] == [str(i) for i in range(1, len(stored) + 1)]
        assert a.replica != followers_on_b[0].replica and server.running


EXTRACTIVE = {
    "AGENT_LLM_PROVIDER": "extractive",
    "AGENT_EMBEDDER": "none",
    "AGENT_INGEST_SAMPLE_KB": "false",
    "OLLAMA_HOST": "http://127.0.0.1:9",
}


#: Where the background jobs run, as a worker that does not lead says it.
ELSEWHERE = {"sqlite": "another worker", "postgres": "another worker or replica"}
#: The lock the leader holds, by engine (``/readyz`` ``workers.leader_lock``).
LOCKS = {"sqlite": "file lock", "postgres": "postgres advisory lock"}


#: The workers the tests without a model fake share: the extractive answerer, and the
#: hashing embedder and open admin API the knowledge-base test ingests through.
SHARED_ENV = {**EXTRACTIVE, "AGENT_WORKERS": "2", "AGENT_EMBEDDER": "hashing", "AGENT_ADMIN_OPEN": "true"}


@contextmanager
def on_engine(engine: str, request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The environment of workers on ``engine``: the default SQLite file in their folder,
    or a fresh PostgreSQL database (dropped afterwards)."""
    if engine == "sqlite":
        yield {}
        return
    server: TestPostgres = request.getfixturevalue("pg")
    with server.database() as url:
        yield {"AGENT_DATABASE_URL": url, "AGENT_SECRET_KEY": "workers-share-this-key-0123456789"}


class SharedServers:
    """``agentchat serve --workers 2`` per engine (``SHARED_ENV``), started when a test
    first asks and kept for the module's next tests: a start-up is three processes
    importing the whole app, most of such a test's time. The tests that use them leave
    them working (a worker SIGKILLed is replaced and the jobs taken over before that test
    ends) or, the last one, stopped; one stopped or left by a failed test is replaced by
    a fresh one at the next ask, so no test depends on another having run."""

    def __init__(self, stack: contextlib.ExitStack, folders: pytest.TempPathFactory) -> None:
        self._stack = stack
        self._folders = folders
        self._servers: dict[str, AgentServer] = {}

    def running(self, engine: str, request: pytest.FixtureRequest) -> AgentServer:
        """The engine's workers, started (not yet necessarily answering) if none run."""
        server = self._servers.get(engine)
        if server is not None and server.running:
            return server
        env = self._stack.enter_context(on_engine(engine, request))
        server = AgentServer(self._folders.mktemp(f"workers-{engine}"), {**SHARED_ENV, **env}, name=f"workers-{engine}")
        self._stack.callback(server.close)
        server.start()
        self._servers[engine] = server
        return server

    def discard(self, engine: str) -> None:
        """Stop the engine's workers (a test failed on them: the next test starts afresh)."""
        server = self._servers.pop(engine, None)
        if server is not None:
            server.close()


@pytest.fixture(scope="module")
def shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServers]:
    with contextlib.ExitStack() as stack:
        yield SharedServers(stack, tmp_path_factory)


@pytest.fixture
def extractive(engine: str, request: pytest.FixtureRequest, shared_servers: SharedServers) -> Iterator[AgentServer]:
    """The shared workers on ``engine``; dropped if the test fails (their state is unknown)."""
    failed_before = request.session.testsfailed
    yield shared_servers.running(engine, request)
    if request.session.testsfailed > failed_before:
        shared_servers.discard(engine)


async def background_jobs_by_replica(pins: dict[str, list[Pinned]]) -> dict[str, dict[str, object]]:
    out = {}
    for replica, (pin, *_) in pins.items():
        answer = await pin.http.get(f"{pin.base}/readyz")
        pin.check(answer)
        out[replica] = answer.json()["workers"]
    return out


async def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One ``/metrics`` over a fresh connection (the kernel hands it to either worker)."""
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{base}/metrics")).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def leaders_in(values: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """``agentchat_background_jobs_leader`` by worker, as a merged scrape shows it."""
    return {
        dict(labels)["worker"]: value
        for (name, labels), value in values.items()
        if name == "agentchat_background_jobs_leader"
    }


@ENGINES
async def test_one_worker_runs_the_background_jobs_and_another_takes_them_over_after_sigkill(
    extractive: AgentServer, engine: str
) -> None:
    server = extractive
    await server.wait_healthy()
    async with pinned_clients(server.base, 1) as pins:
        # Each worker takes part in the election at start-up; wait until one leads.
        await until_async(lambda: _one_leads(pins, engine), "one worker leading, the other following", 60)
        jobs = await background_jobs_by_replica(pins)
        assert {j["leader_lock"] for j in jobs.values()} == {LOCKS[engine]}, jobs
        leader = next(r for r, j in jobs.items() if j["background_jobs"] == "here")
        # /metrics, merged whichever worker answers, says the same per worker.
        for _ in range(4):
            assert leaders_in(await scrape(server.base)) == {r: float(r == leader) for r in pins}
        os.kill(int(leader.split(":")[1]), signal.SIGKILL)

    # The parent starts a worker in the dead one's place. Waited for with one fresh
    # connection a check (the kernel hands it to either worker) rather than through
    # pinned_clients' up to 400 connections a check, which kept the survivor busy answering
    # while the new worker imported the app on the same cores.
    await until_async(lambda: _new_replica_answers(server.base, set(pins)), "a worker in the dead one's place", 60)

    # The survivor (or the worker started in the dead one's place) takes the jobs over.
    async def leads_now() -> bool:
        try:
            async with pinned_clients(server.base, 1) as pins:
                if leader in pins:
                    return False
                return await _one_leads(pins, engine)
        except AssertionError:  # one worker only, until the parent starts another
            return False

    await until_async(leads_now, f"another worker leading:\n{server.tail(40)}", 60)
    led = leaders_in(await scrape(server.base))
    assert leader not in led and sorted(led.values()) == [0.0, 1.0], led
    assert server.running


async def _new_replica_answers(base: str, known: set[str]) -> bool:
    """Whether a fresh connection reached a worker not in ``known``."""
    async with httpx.AsyncClient(timeout=5) as http:
        try:
            answer = await http.get(f"{base}/readyz")
            return str(answer.json()["load"]["replica"]) not in known
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return False


async def _one_leads(pins: dict[str, list[Pinned]], engine: str) -> bool:
    jobs = await background_jobs_by_replica(pins)
    return sorted(str(j["background_jobs"]) for j in jobs.values()) == sorted([ELSEWHERE[engine], "here"])


async def until_async(condition: object, what: str, timeout_s: float) -> None:
    """Until the awaited ``condition()`` is true (checked every 0.05 s), or fail saying ``what``."""
    deadline = time.monotonic() + timeout_s
    while not await condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.05)


async def knowledge_vectors(pin: Pinned) -> int:
    """``/readyz``'s vectors once counted at the stored generation (in the background
    after a write: a probe never waits for the count)."""

    async def probe() -> httpx.Response:
        answer = await pin.http.get(f"{pin.base}/readyz")
        pin.check(answer)
        return answer

    answer = await current(probe, lambda response: response.json())
    return int(answer.json()["checks"]["knowledge"]["vectors"] or 0)


async def test_a_document_ingested_through_one_worker_is_in_the_others_vectors(
    shared_servers: SharedServers, request: pytest.FixtureRequest
) -> None:
    """Each worker holds the KB's vectors in memory; an ingest through worker A reaches
    worker B's before its next search (``/readyz`` counts the vectors a search scans)."""
    server = shared_servers.running("sqlite", request)
    try:
        await server.wait_healthy()
        async with pinned_clients(server.base, 1) as pins:
            (a,), (b,) = pins.values()
            assert await knowledge_vectors(a) == 0 and await knowledge_vectors(b) == 0
            doc = {"id": "fjord", "title": "Fjords", "text": "A fjord is a long narrow inlet carved by glaciers."}
            added = await a.http.post(f"{a.base}/v1/kb/documents", json={"documents": [doc]})
            a.check(added)
            assert added.status_code == 200 and added.json()["added"] == 1, added.text
            on_a = await knowledge_vectors(a)
            assert on_a > 0
            on_b = 0
            deadline = time.monotonic() + 30
            while on_b != on_a:
                assert time.monotonic() < deadline, f"worker B never loaded A's vectors ({on_b} of {on_a})"
                await asyncio.sleep(0.05)
                on_b = await knowledge_vectors(b)
    except BaseException:
        shared_servers.discard("sqlite")  # their state is unknown: the next test starts afresh
        raise


@ENGINES
async def test_every_scrape_counts_the_runs_of_every_worker(extractive: AgentServer, engine: str) -> None:
    """The last test on the module's workers of ``engine``: it stops them (SIGTERM)."""
    server = extractive
    await server.wait_healthy()
    async with pinned_clients(server.base, 3) as pins:
        (a, *on_a), (b, *on_b) = pins.values()
        body = {"message": "What is in the knowledge base?", "context_type": "knowledge"}
        # One pinned connection per run: two runs started on A, three on B.
        for i, pin in enumerate([*on_a, b, *on_b]):
            started = await start_on(pin, body)
            trace = Trace(tag=f"m{i}", run_id=started["run_id"], stream_url=started["stream_url"])
            await follow_on(pin, trace)  # to its end (the pin's last use)
        replicas = {a.replica, b.replica}
        # Where they meet: the supervisor's private directory (PostgreSQL has no feed).
        meeting = {supervisors_dir(pin.pid) for pin in (a, b)}
    for _ in range(8):  # fresh connections: the kernel hands them to either worker
        values = await scrape(server.base)
        assert values[("agentchat_runs_started_total", ())] == 5, values
        assert values[("agentchat_metrics_workers", ())] == 2
        live = {dict(labels)["worker"] for (name, labels) in values if name == "agentchat_live_runs"}
        assert live == replicas
    (directory,) = meeting
    assert directory.stat().st_mode & 0o777 == 0o700
    if engine == "postgres":
        assert len(list(directory.glob("*.metrics"))) == 2
    assert server.running
    server.send(signal.SIGTERM)  # the supervisor drains its workers and cleans up
    assert await server.wait_exit(60) == 0, server.tail(40)
    assert not directory.exists()


def supervisors_dir(worker_pid: int) -> Path:
    """The runtime directory the supervisor gave a worker (``AGENT_WORKERS_DIR``)."""
    environ = Path(f"/proc/{worker_pid}/environ").read_bytes().split(b"\0")
    found = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"AGENT_WORKERS_DIR=")]
    assert len(found) == 1, "the worker was given no AGENT_WORKERS_DIR"
    return Path(found[0].decode())


@pytest.fixture
def shared_on_sqlite(engine: str, request: pytest.FixtureRequest) -> tuple[ToolStack, AgentServer] | None:
    """``sqlite_workers`` for the SQLite case (set up here, before the test's loop runs);
    ``None``: the test starts its own workers on PostgreSQL."""
    if engine != "sqlite":
        return None
    shared: tuple[ToolStack, AgentServer] = request.getfixturevalue("sqlite_workers")
    return shared


@contextlib.asynccontextmanager
async def slow_looking_workers(
    tools: ToolStack,
    tmp_path: Path,
    engine: str,
    request: pytest.FixtureRequest,
    shared: tuple[ToolStack, AgentServer] | None,
) -> AsyncIterator[tuple[ToolStack, AgentServer]]:
    """The module's SQLite workers, or workers on a fresh PostgreSQL database (``SLOW_LOOKS``)."""
    if shared is not None:
        yield shared
        return
    async with tool_workers(tools, tmp_path, engine, request.getfixturevalue("pg")) as both:
        yield both


@MODULE_LOOP
@ENGINES
async def test_a_cancel_through_one_worker_reaches_the_run_on_another_without_polling(
    tmp_path: Path,
    engine: str,
    request: pytest.FixtureRequest,
    tools: ToolStack,
    shared_on_sqlite: tuple[ToolStack, AgentServer] | None,
) -> None:
    """With leases of an hour the owner's own look for cancels comes every six minutes:
    the run ends ``cancelled`` within the cancel request only because worker B told A —
    over the sibling sockets on SQLite, by ``NOTIFY`` on PostgreSQL."""
    async with (
        slow_looking_workers(tools, tmp_path, engine, request, shared_on_sqlite) as (tools, server),
        pinned_clients(server.base, 2) as pins,
    ):
        (a, _), (b, b2) = pins.values()
        tag = f"cancel-{uuid.uuid4().hex[:6]}"
        held = tools.proxy.hold(side_effect_marker(tag))  # the run waits on A until released
        started = await start_on(a, run_body(tag))
        trace = Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"])
        following = asyncio.create_task(follow_on(b, trace))
        await until(lambda: saw(trace, "tool_call_start") and held.reached.is_set(), "B following A's run", 60)
        try:
            cancel = await b2.http.post(f"{b2.base}/v1/agent/runs/{trace.run_id}/cancel", headers=DEMO_AUTH)
            b2.check(cancel)
            assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled", cancel.text
        finally:
            held.release.set()
        await asyncio.wait_for(following, 60)
        assert trace.frames[-1][1] == "message_complete"
        assert orjson.loads(trace.frames[-1][2])["status"] == "cancelled"
