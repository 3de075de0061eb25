"""Three replicas on loopback ports against one PostgreSQL: a run started on replica A
and followed from B and C survives a SIGKILL of A.

The model is the paced Ollama fake (in this process) and every run walks
knowledge_base_search → the side-effecting backend call (through the counting proxy) →
generate_response. Runs start on A with a short lease (``AGENT_RUN_LEASE_S=2``); each is
followed by one client on B and one on C (they read it live from the store, woken by
``LISTEN/NOTIFY``). A is killed mid-run, one run's backend call held in flight. Then:

- B or C takes every unfinished run over (its lease expired) and carries it to the end;
- every follower saw ids 1..N, each once, and exactly one ``message_complete``, last —
  the same sequence on B and C, and the same as the stored log;
- a reconnect after the end answers 204 on every replica (A restarted included);
- the side-effecting backend call reached the backend at most once per run.

Paused (SIGSTOP, then SIGCONT once B and C finished the runs), a follower of each run on A
itself too: when A wakes up it must show that follower the stored log on the same
connection - the new owner's events and ending under their stored ids - never an ending
of its own (its write failing after the pause: ``storage_unavailable`` under ids the log
gives to other events).
"""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import orjson
import pytest

from tests.fakes.paced_ollama import SIDE_EFFECT_TOOL, run_body, side_effect_marker
from tests.support.paced_stack import paced_stack_fixtures
from tests.support.postgres import TestPostgres
from tests.support.procs import (
    DEMO_AUTH,
    AgentServer,
    ToolStack,
    Trace,
    check_trace,
    client,
    follow,
    replay,
    start_run,
    until,
)

RUNS = 4
LEASE_S = 2.0
#: Hand-over deadline after the kill: the lease, a claim tick (lease/2), the resumed
#: step's write, and slack for a loaded 2-core machine.
HANDOVER_MARGIN_S = 8.0
#: The fake model's pause between words once A is stopped: the pacing only keeps A's runs
#: mid-turn until then; B and C carrying them on need not crawl.
AFTER_STOP_PAUSE_S = 0.005
PAUSE_S = 0.05


#: The module's paced tool stack, and each test's view of it paced again (tests/support/paced_stack.py).
module_stack, stack = paced_stack_fixtures(tokens=30, pause_s=PAUSE_S)


@pytest.fixture
def pg(pg_server: TestPostgres) -> TestPostgres:
    """The session's PostgreSQL (``pg_server``, tests/conftest.py): each test takes a fresh
    database of it, so a server of this module's own would only add a start."""
    return pg_server


def _saw(trace: Trace, name: str, tool: str | None = None) -> bool:
    return any(
        event == name and (tool is None or orjson.loads(data).get("name") == tool) for _, event, data in trace.frames
    )


@pytest.mark.asyncio(loop_scope="module")  # the module's stack is served in its loop
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGSTOP], ids=["sigkill", "paused"])
async def test_three_replicas_hand_over_a_stopped_replicas_runs(
    tmp_path: Path, pg: TestPostgres, stack: ToolStack, stop: signal.Signals
) -> None:
    with pg.database() as url:
        env = stack.agent_env(AGENT_DATABASE_URL=url, AGENT_RUN_LEASE_S=str(LEASE_S),
                              AGENT_SECRET_KEY="replicas-share-this-key-0123456789")
        servers = [AgentServer(tmp_path, env, name=name) for name in ("a", "b", "c")]
        for server in servers:
            server.start()
        a, b, c = servers
        try:
            await asyncio.gather(*(s.wait_healthy() for s in servers))
            await _scenario(stack, a, b, c, stop)
        finally:
            if stop == signal.SIGSTOP and a.running:
                a.send(signal.SIGCONT)
            for server in servers:
                server.close()


async def _scenario(  # type: ignore[no-untyped-def]
    stack, a: AgentServer, b: AgentServer, c: AgentServer, stop: signal.Signals
) -> None:
    # A paused A keeps its followers' connections open: their reads outlast the pause.
    async with client() as http, client(read_timeout=600) as http_a:
        tags = [f"replica-{i}-{uuid.uuid4().hex[:6]}" for i in range(RUNS)]
        in_flight = stack.proxy.hold(side_effect_marker(tags[0]))  # A dies inside this call
        pairs: list[tuple[Trace, Trace]] = []
        tasks: list[asyncio.Task[Trace]] = []
        #: Paused: one follower of each run on A itself, which sees A stop and resume.
        on_a: list[tuple[Trace, asyncio.Task[Trace]]] = []
        for tag in tags:
            status, body = await start_run(http, a.base, run_body(tag))
            assert status == 201, (status, body, a.tail())
            pair = (Trace(tag=tag), Trace(tag=tag))
            for trace, server in zip(pair, (b, c), strict=True):
                trace.run_id, trace.conversation_id = body["run_id"], body["conversation_id"]
                trace.stream_url = body["stream_url"]
                tasks.append(asyncio.create_task(follow(http, server.base, trace, deadline_s=120)))
            if stop == signal.SIGSTOP:
                trace_a = Trace(tag=tag, run_id=body["run_id"], stream_url=body["stream_url"])
                on_a.append((trace_a, asyncio.create_task(follow(http_a, a.base, trace_a, deadline_s=240))))
            pairs.append(pair)
            await asyncio.sleep(0.2)

        # Followers on B and C see A's run live (NOTIFY), and A is mid-run everywhere.
        await until(
            lambda: all(_saw(t, "content_chunk") for pair in pairs for t in pair) and in_flight.reached.is_set(),
            "every follower on B and C streaming A's runs, one backend call in flight",
            timeout=60,
        )
        unfinished = [p[0].tag for p in pairs if not _saw(p[0], "message_complete")]
        assert len(unfinished) >= RUNS // 2, "the runs finished before the kill; the test proves nothing"
        seen_before = {p[0].tag: len(p[0].frames) for p in pairs}

        a.send(stop)
        stack.fake.pause_s = AFTER_STOP_PAUSE_S
        if stop == signal.SIGKILL:
            await a.wait_exit(30)
        killed_at = time.monotonic()
        in_flight.release.set()  # a paused A gets its answer only once it runs again

        _, pending = await asyncio.wait(tasks, timeout=120)
        for task in pending:
            task.cancel()

        problems: dict[str, list[str]] = {}
        handover: list[float] = []
        for pb, pc in pairs:
            assert pb.stream_url is not None
            status, stored = await replay(http, b.base, pb.stream_url)
            found = [f"B: {p}" for p in check_trace(pb, stored if status == 200 else [])]
            found += [f"C: {p}" for p in check_trace(pc, stored if status == 200 else [])]
            if pb.frames != pc.frames:
                found.append("the followers on B and C saw different sequences")
            if sum(1 for f in stored if f[1] == "message_complete") != 1:
                found.append("the stored log does not hold exactly one message_complete")
            executed = stack.proxy.side_effects(pb.tag)
            if executed > 1:
                found.append(f"the side-effecting backend call ran {executed} times")
            if pb.tag in unfinished:
                resumed = [orjson.loads(d) for _, n, d in pb.frames if n == "run_resumed"]
                if not resumed:
                    found.append("a run unfinished at the kill was not announced as resumed")
                info = await http.get(f"{b.base}/v1/agent/runs/{pb.run_id}", headers=DEMO_AUTH)
                resumes = info.json().get("resumes") if info.status_code == 200 else info.status_code
                if resumed and resumes != len(resumed):
                    found.append(f"resumed {len(resumed)} time(s) but GET /v1/agent/runs says resumes={resumes}")
                after = pb.received_at[seen_before[pb.tag] :]
                if after:
                    handover.append(after[0] - killed_at)
            # After the end, a reconnect answers 204 on every live replica.
            for server in (b, c):
                response = await http.get(
                    f"{server.base}{pb.stream_url}", headers={"Last-Event-ID": str(pb.last_id), **DEMO_AUTH}
                )
                if response.status_code != 204:
                    found.append(f"a reconnect to {server.name} after the end answered {response.status_code}")
            if found:
                problems[pb.tag] = found

        took_over = b.grep("took over runs") + c.grep("took over runs")
        report = {
            "problems": problems,
            "handover_s": [round(h, 2) for h in handover],
            "took_over": took_over[-4:],
            "b_log": b.grep("ERROR", "Traceback")[-10:],
            "c_log": c.grep("ERROR", "Traceback")[-10:],
        }
        print("replica hand-over:", orjson.dumps({k: report[k] for k in ("handover_s", "took_over")}).decode())
        assert not problems, orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
        assert took_over, report
        assert handover and max(handover) <= LEASE_S + HANDOVER_MARGIN_S, report
        assert any(_saw(p[0], "tool_call_result", SIDE_EFFECT_TOOL) for p in pairs), report

        if stop == signal.SIGSTOP:
            # A wakes up past its leases: it must abandon its runs without writing.
            logged = b.mark(), c.mark()
            a.send(signal.SIGCONT)
            # It drops them at its next lease renewal ("abandoned here"), or — when its first
            # write after thawing fails instead (a lock of the new owner's outlasting its
            # retry window) — its ending is refused to it: either way nothing is written.
            noticed = ("abandoned here", "taken over by another replica; it ends there")
            try:
                await until(lambda: bool(a.grep(*noticed)), "A to notice it lost its runs", timeout=30)
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; A's log ends:\n{a.tail(80)}") from None
            await asyncio.sleep(LEASE_S)
            for pb, pc in pairs:
                assert pb.stream_url is not None
                status, stored = await replay(http, b.base, pb.stream_url)
                assert status == 200 and stored == pb.frames == pc.frames, (pb.tag, a.tail())
            # A's own followers: what A had stored, then - once A learns it lost the run -
            # the new owner's events from the store, on the same connection; never an
            # ending A made up (its write failing after the pause) under ids the log
            # gives to other events.
            _, pending_a = await asyncio.wait([t for _, t in on_a], timeout=120)
            for task in pending_a:
                task.cancel()
            seen_on_a: dict[str, list[str]] = {}
            for pa, _ in on_a:
                assert pa.stream_url is not None
                status, stored = await replay(http, b.base, pa.stream_url)
                found = check_trace(pa, stored if status == 200 else [])
                if "storage_unavailable" in pa.error_codes:
                    found.append("a follower on A was shown storage_unavailable")
                if pa.connects != ["200"]:
                    found.append(f"a follower on A had to reconnect: {pa.connects}")
                if found:
                    seen_on_a[pa.tag] = found
            assert not seen_on_a, orjson.dumps({"on_a": seen_on_a, "a_log": a.tail(60)}).decode()
            assert not b.grep("took over runs", since=logged[0]) and not c.grep("took over runs", since=logged[1])
        else:
            # A comes back: it takes nothing (every run ended) and answers 204 too.
            await a.restart()
        for pb, _ in pairs:
            assert pb.stream_url is not None
            response = await http.get(
                f"{a.base}{pb.stream_url}", headers={"Last-Event-ID": str(pb.last_id), **DEMO_AUTH}
            )
            assert response.status_code == 204, (pb.tag, response.status_code, a.tail())
