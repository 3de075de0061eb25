"""SIGTERM and SIGKILL of a real server process in the middle of 20 live runs that use
tools, then a restart on the same SQLite file.

The model is the paced, stateless Ollama fake (it lives in this process, so it survives
the restart) and every run walks: knowledge_base_search → validate_table_config (a POST
to the reference backend through a counting proxy, tagged with the run) →
generate_response. Each run is read by an EventSource-like client that reconnects with
``Last-Event-ID`` whenever its stream ends or drops.

What must hold, for every run:
- the client saw ids 1..N, each once, and exactly one ``message_complete``, last;
- what it saw, across both processes, is exactly the stored log (a replay from 0);
- it ended ``completed``, or ``failed`` with ``error`` code ``run_interrupted`` — never
  ``cancelled``, never silence;
- a run that was unfinished at the signal announces ``run_resumed`` (with
  ``discarded``) in the next process, or ends ``run_interrupted``;
- its side-effecting backend call reached the backend at most once (exactly once when
  the run saw that call's successful result) — including the run whose call the proxy
  holds open at the signal: the backend did the work, the agent never got the answer;
- its conversation holds the user's message.
After SIGTERM the old process takes no new run, and streams it lets go end cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.fakes.paced_ollama import SIDE_EFFECT_TOOL, run_body, side_effect_marker, tagged
from tests.support.paced_stack import paced_stack_fixtures
from tests.support.procs import (
    AgentServer,
    Frame,
    ToolStack,
    Trace,
    check_trace,
    client,
    follow,
    replay,
    start_run,
    until,
)

pytestmark = pytest.mark.slow  # real server processes signalled mid-run and restarted

RUNS = 20
#: The fake model's pause between words once the old process is gone: the pacing only keeps
#: the runs mid-flight until the signal; the next process carrying them on need not crawl.
AFTER_EXIT_PAUSE_S = 0.005
PAUSE_S = 0.05


#: The module's paced tool stack, and each test's view of it paced again (tests/support/paced_stack.py).
module_stack, stack = paced_stack_fixtures(tokens=20, pause_s=PAUSE_S)


def _saw(trace: Trace, name: str, tool: str | None = None) -> bool:
    for _, event, data in trace.frames:
        if event == name and (tool is None or orjson.loads(data).get("name") == tool):
            return True
    return False


def _side_effect_succeeded(trace: Trace) -> bool:
    return any(
        d.get("name") == SIDE_EFFECT_TOOL and d.get("is_error") is False for d in trace.data_of("tool_call_result")
    )


def _last_id_before(trace: Trace, moment: float) -> int:
    seen = [int(f[0]) for f, at in zip(trace.frames, trace.received_at, strict=True) if at < moment and f[0]]
    return max(seen, default=0)


async def _probe_new_runs_while_draining(server: AgentServer, http: httpx.AsyncClient) -> list[str]:
    """POST new runs until the old process exits (at most 2 minutes); what each attempt got."""
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while server.running and time.monotonic() < deadline:
        try:
            response = await http.post(
                f"{server.base}/v1/agent/runs",
                json=run_body("late-" + uuid.uuid4().hex[:6]),
                headers={"Connection": "close"},
                timeout=5,
            )
            seen.append(f"{response.status_code} retry-after={response.headers.get('retry-after')}")
        except httpx.TransportError as exc:
            seen.append(type(exc).__name__)
        await asyncio.sleep(0.1)
    return seen


async def _shutdown_started(server: AgentServer, mark: int) -> None:
    """Until the process logs that it is shutting down (or exits); at most 2 s."""
    with contextlib.suppress(TimeoutError):
        await until(
            lambda: not server.running or bool(server.grep("draining", "Shutting down", since=mark)),
            "the server to start shutting down",
            timeout=2,
        )


def _acknowledged_in_the_live_log(db: Path, cut: list[Trace]) -> None:
    """Read the killed server's file: each run cut mid-stream has every id its client
    saw, once, and those past what was settled while it lived are in ``run_log``."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        for trace in cut:
            clustered = [r[0] for r in conn.execute("SELECT seq FROM run_events WHERE run_id = ?", (trace.run_id,))]
            logged = [
                r[0]
                for r in conn.execute(
                    "SELECT l.seq FROM run_log l JOIN runs r ON r.id = l.run_id "
                    "WHERE l.run_id = ? AND l.id >= r.log_from ORDER BY l.id",
                    (trace.run_id,),
                )
            ]
            seen = sorted({int(i) for i, _, _ in trace.frames if i})
            assert logged, f"{trace.tag}: nothing of the cut run in the live log"
            assert len(clustered) + len(logged) == len(set(clustered) | set(logged)), (clustered, logged)
            assert set(seen) <= set(clustered) | set(logged), (trace.tag, seen, clustered, logged)


async def _scenario(tmp_path: Path, stack: ToolStack, sig: signal.Signals) -> None:
    server = AgentServer(tmp_path, stack.agent_env())
    server.start()
    try:
        await server.wait_healthy()
        async with client() as http:
            traces = [Trace(tag=f"{sig.name.lower()}-{i:02d}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
            # One run is caught with its backend call done but not yet answered.
            in_flight = stack.proxy.hold(side_effect_marker(traces[0].tag))
            followers: list[asyncio.Task[Trace]] = []
            for trace in traces:
                status, body = await start_run(http, server.base, run_body(trace.tag))
                assert status == 201, (status, body, server.tail())
                trace.run_id, trace.conversation_id = body["run_id"], body["conversation_id"]
                trace.stream_url = body["stream_url"]
                followers.append(asyncio.create_task(follow(http, server.base, trace, deadline_s=240)))
                await asyncio.sleep(0.1)  # staggered: at the signal, runs are at different steps

            # The signal lands mid-flight: every run is streaming, a few already made
            # their side-effecting call, most are not finished.
            await until(
                lambda: all(_saw(t, "content_chunk") for t in traces)
                and sum(_saw(t, "tool_call_result", SIDE_EFFECT_TOOL) for t in traces) >= RUNS // 4
                and in_flight.reached.is_set(),
                "every run streaming, a quarter past their backend call, one inside it",
                timeout=90,
            )
            unfinished = {t.tag for t in traces if not _saw(t, "message_complete")}
            assert len(unfinished) >= RUNS // 2, "the runs finished before the signal; the test proves nothing"

            mark = server.mark()
            probes: list[str] = []
            if sig == signal.SIGTERM:
                server.send(signal.SIGTERM)
                await _shutdown_started(server, mark)
                probes = await _probe_new_runs_while_draining(server, http)
                code = await server.wait_exit(90)
                assert code is not None, f"the server did not exit after SIGTERM:\n{server.tail()}"
            else:
                server.send(signal.SIGKILL)
                await server.wait_exit(30)
                # Every event its client saw of a run cut short was durable, in the
                # live log (issue 23): the next process carries the run on from there.
                _acknowledged_in_the_live_log(server.db_path, [t for t in traces if t.tag in unfinished])
            exited_at = time.monotonic()
            stack.fake.pause_s = AFTER_EXIT_PAUSE_S
            in_flight.release.set()
            old_log = server.text(mark)
            await server.restart()

            _, pending = await asyncio.wait(followers, timeout=240)
            for task in pending:
                task.cancel()

            stored: dict[str, list[Frame]] = {}
            histories: dict[str, list[dict[str, object]]] = {}
            for trace in traces:
                assert trace.stream_url is not None
                status, frames = await replay(http, server.base, trace.stream_url)
                stored[trace.tag] = frames if status == 200 else []
                conv = await http.get(f"{server.base}/v1/agent/conversations/{trace.conversation_id}")
                histories[trace.tag] = conv.json().get("messages", []) if conv.status_code == 200 else []
    finally:
        server.close()

    problems: dict[str, list[str]] = {}
    for trace in traces:
        found = check_trace(trace, stored[trace.tag])
        # What the log holds beyond what the client had when the old process was
        # gone: a model turn there was run by the next process, which must say so.
        tail = stored[trace.tag][_last_id_before(trace, exited_at) :]
        names = [name for _, name, _ in tail]
        resumed = [orjson.loads(d) for _, n, d in tail if n == "run_resumed"]
        if "message_start" in names and not resumed and "run_interrupted" not in trace.error_codes:
            found.append(f"the next process ran a model turn without run_resumed / run_interrupted: {names[:8]}")
        for data in resumed:
            if "discarded" not in data:
                found.append(f"run_resumed without 'discarded': {data}")
        executed = stack.proxy.side_effects(trace.tag)
        if executed > 1:
            found.append(f"the side-effecting backend call ran {executed} times")
        if trace is traces[0] and executed != 1:
            found.append(f"the call caught in flight reached the backend {executed} times")
        if _side_effect_succeeded(trace) and executed != 1:
            found.append(f"saw the backend call succeed but the backend got it {executed} times")
        users = [m.get("content") for m in histories[trace.tag] if m.get("role") == "user"]
        if tagged(trace.tag) not in users:
            found.append(f"the conversation lacks the user's message (user messages: {users})")
        if sig == signal.SIGTERM and trace.tag in unfinished and trace.ends and trace.ends[0] not in (
            "eof",
            "message_complete",
        ):
            found.append(f"the stream the draining server let go did not end cleanly: {trace.ends}")
        if found:
            problems[trace.tag] = found

    late_accepted = [p for p in probes if p.startswith("2")]
    report = {
        "problems": problems,
        "late_runs_accepted": late_accepted,
        "old_process_log": [
            line for line in old_log.splitlines() if "ERROR" in line or "Traceback" in line or "interrupt" in line
        ][:20],
        "new_process_log": server.grep("ERROR", "Traceback", "resum", since=0)[-20:],
    }
    assert not problems and not late_accepted, orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
    if sig == signal.SIGTERM:  # while draining, a new run is answered 503 with Retry-After
        answered = [p for p in probes if p[0].isdigit()]
        assert answered, f"the draining server answered no request: {probes}"
        assert all(p.startswith("503") and "retry-after=None" not in p for p in answered), probes


@pytest.mark.asyncio(loop_scope="module")  # the module's stack is served in its loop
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
async def test_runs_survive_a_signal_and_a_restart(tmp_path: Path, stack: ToolStack, sig: signal.Signals) -> None:
    await _scenario(tmp_path, stack, sig)
