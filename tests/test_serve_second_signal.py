"""A second SIGTERM (or Ctrl-C) while ``agentchat serve`` drains ends the grace at once
(``app/cli/serving.py``'s ``DrainingServer``), through real processes and real signals.

The newcomer's walkthrough: SIGTERM, then SIGTERM again a moment later, logged
``ERROR the service did not start {"code": 143}`` and exited 0 - the second signal went to
uvicorn's own handler, which raised it again after the close, and ``serve``'s SIGTERM
handler's ``SystemExit`` was taken for a failed start-up; and that second signal did not
shorten anything (the app's close waited the whole grace again). Ctrl-C twice skipped the
app's close (uvicorn's force exit: a traceback from the lifespan). Now the second signal
releases the live runs for the next process at once, the close runs as after one signal,
and the exit code is the one of a single signal (0: the stop that was asked for).

Each run is held inside its backend call (the proxy holds the answer) with a grace of
600 s, so the drain is still waiting when the second signal comes: the old code waited
out the grace and fails the test's bounded wait. A deliberate second signal comes more
than ``SAME_STOP_S`` after the first: one sooner is the same stop delivered twice.

systemd's default stop (``KillMode=control-group``) SIGTERMs every process of the unit
at once: under ``serve --workers 2`` each worker got systemd's SIGTERM and the one its
supervisor forwards, milliseconds apart, took the second for a person's second signal and
released its live runs at once - the drain lost (both workers logged the cut). Now a
second signal within ``SAME_STOP_S`` of the first changes nothing: the run is drained
(its held call released, it finishes and the group exits 0, nothing released); and a
later one still ends the grace.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from app.cli.serving import SAME_STOP_S
from tests.fakes.paced_ollama import run_body, side_effect_marker
from tests.support.procs import DEMO_AUTH, AgentServer, ToolStack, until
from tests.support.procs import tool_stack as make_tool_stack

pytestmark = pytest.mark.slow

DRAINING = "draining: new runs are refused"
SERVING = "agentchat: serving on"
CUT = "a second signal: the grace ends now"
SAME_STOP = "the same stop signalled again"
RELEASED = "released live runs for the next process"
#: Far longer than the test waits for the exit: only a cut grace ends the process in time
#: (and the held backend call does not time out meanwhile).
LONG = {"AGENT_SHUTDOWN_GRACE_S": "600", "AGENT_BACKEND_TIMEOUT_S": "600", "AGENT_TOOL_TIMEOUT_S": "600"}
#: The tests share the module's ``tools`` and run in its event loop (its fakes are served there).
MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def tools(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolStack]:
    """The model fake, the counting proxy and the backend, one for the module: each test
    holds its own run's backend call by its tag. Two words a turn: nothing here is about
    where in a turn the signal lands (the run waits inside its backend call)."""
    async with make_tool_stack(tmp_path_factory.mktemp("tools"), tokens=2, pause_s=0.05) as stack:
        yield stack


async def _past_the_window(since: float) -> None:
    """Until a signal sent now is a second stop, not the first one again (``SAME_STOP_S``
    after ``since``, the first signal's ``time.monotonic()``)."""
    await until(lambda: time.monotonic() > since + SAME_STOP_S + 0.2, "past the same-stop window", 10)


async def _start_held_run(base: str, tag: str) -> None:
    """A run that waits inside its backend call until the test ends."""
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(f"{base}/v1/agent/runs", json=run_body(tag), headers=DEMO_AUTH)
    assert answer.status_code == 201, answer.text


@MODULE_LOOP
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
async def test_a_second_signal_while_serve_drains_ends_the_grace(
    tmp_path: Path, tools: ToolStack, sig: signal.Signals
) -> None:
    server = AgentServer(tmp_path, tools.agent_env(**LONG), name="serve")
    server.ctrl_c = True
    tag = f"cut-{uuid.uuid4().hex[:6]}"
    held = tools.proxy.hold(side_effect_marker(tag))
    server.start()
    try:
        await server.wait_healthy()
        await _start_held_run(server.base, tag)
        await until(held.reached.is_set, "the run inside its backend call", 60)
        first = time.monotonic()
        server.send(sig)
        await until(lambda: bool(server.grep(DRAINING)), "the drain's start", 60)
        await _past_the_window(first)
        server.send(sig)
        code = await server.wait_exit(60)
        log = server.text()
        assert code == 0, f"exit {code}:\n{server.tail(40)}"
        assert "did not start" not in log and "Traceback" not in log, server.tail(40)
        assert server.grep(RELEASED), server.tail(40)
        assert len(server.grep(CUT)) == 1, server.tail(40)
    finally:
        held.release.set()
        server.close()


@MODULE_LOOP
async def test_two_sigterms_to_the_workers_supervisor_end_every_workers_grace(tmp_path: Path, tools: ToolStack) -> None:
    """``serve --workers 2``: the supervisor forwards both signals to each worker; each
    drains on the first, the one still draining (it holds the run) cuts its grace on the
    second, and the supervisor exits 0."""
    env = tools.agent_env(**LONG, AGENT_WORKERS="2")
    server = AgentServer(tmp_path, env, name="supervisor")
    tag = f"cut-{uuid.uuid4().hex[:6]}"
    held = tools.proxy.hold(side_effect_marker(tag))
    server.start()
    try:
        await _both_workers_serving(server)
        await _start_held_run(server.base, tag)
        await until(held.reached.is_set, "the run inside its backend call", 60)
        first = time.monotonic()
        server.send(signal.SIGTERM)
        await until(lambda: len(server.grep(DRAINING)) == 2, "both workers draining", 60)
        await _past_the_window(first)
        server.send(signal.SIGTERM)
        code = await server.wait_exit(60)
        log = server.text()
        assert code == 0, f"exit {code}:\n{server.tail(40)}"
        assert "did not start" not in log and "Traceback" not in log, server.tail(40)
        assert len(server.grep(RELEASED)) == 1, server.tail(40)  # the worker that held the run
        # That worker cuts its grace; the other, with nothing to drain, has usually closed
        # before the second signal (it comes past SAME_STOP_S).
        assert 1 <= len(server.grep(CUT)) <= 2, server.tail(40)
    finally:
        held.release.set()
        server.close()


async def _both_workers_serving(server: AgentServer) -> None:
    """Both workers serving before the signal: a worker it meets still starting stops
    without draining (its own case), and the run reaches its held call in a moment (two
    words a turn), so under load the second worker's start could come after it. >= 2: a
    worker restarted by the supervisor says it again. A group whose worker could not start
    has stopped: said at once, with what it printed."""
    await server.wait_healthy()  # one worker answers; the other may still be starting
    try:
        await until(lambda: len(server.grep(SERVING)) >= 2 or not server.running, "both workers serving", 120)
    except TimeoutError:
        raise AssertionError(f"not both workers serving in 120 s:\n{server.tail()}") from None
    assert server.running, f"the group stopped (exit {server.returncode}):\n{server.tail()}"


async def _two_workers_holding_a_run(server: AgentServer, held: Any, tag: str) -> tuple[int, list[int]]:
    """Both workers serving and a run held inside its backend call: (the supervisor's
    pid, the workers')."""
    await _both_workers_serving(server)
    assert server.pid is not None
    workers = _workers(server.pid)
    assert len(workers) == 2, (workers, server.tail())
    await _start_held_run(server.base, tag)
    await until(held.reached.is_set, "the run inside its backend call", 60)
    return server.pid, workers


def _workers(supervisor: int) -> list[int]:
    """The supervisor's children that run a worker (the reference backend, when it
    started one, has no ``AGENT_WORKERS_DIR``)."""
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return [int(p) for p in children if b"AGENT_WORKERS_DIR=" in Path(f"/proc/{p}/environ").read_bytes()]


@MODULE_LOOP
@pytest.mark.parametrize("workers_first", [False, True], ids=["at-once", "workers-first"])
async def test_systemds_stop_of_every_process_drains_the_workers(
    tmp_path: Path, tools: ToolStack, workers_first: bool
) -> None:
    """systemd's default stop: SIGTERM to the supervisor and both workers at once. Each
    worker gets two SIGTERMs (systemd's and the forwarded one) and drains all the same:
    nothing is cut or released, the run finishes once its held call is let go, and the
    group exits 0 with the grace (600 s) far from over.

    ``at-once`` is systemd's order (the supervisor first, by pid); two signals that reach
    a worker before its handler runs are one to Python, so there the old code cut the
    grace most times, not every time. ``workers-first`` makes each duplicate its own:
    the workers' SIGTERMs first, the supervisor's once both have begun to drain (tens of
    milliseconds later, within ``SAME_STOP_S``) - the old code cut every time."""
    env = tools.agent_env(**LONG, AGENT_WORKERS="2")
    server = AgentServer(tmp_path, env, name="supervisor")
    tag = f"unit-{uuid.uuid4().hex[:6]}"
    held = tools.proxy.hold(side_effect_marker(tag))
    server.start()
    try:
        supervisor, workers = await _two_workers_holding_a_run(server, held, tag)
        first = time.monotonic()
        if workers_first:
            for pid in workers:
                os.kill(pid, signal.SIGTERM)
            await until(lambda: len(server.grep(DRAINING)) == 2, "both workers draining", 60)
            os.kill(supervisor, signal.SIGTERM)
            if time.monotonic() - first >= SAME_STOP_S:  # a machine too loaded to make the case (at-once still does)
                pytest.skip(f"both workers logged their drain only {time.monotonic() - first:.2f} s after their "
                            f"SIGTERM: the supervisor's came past SAME_STOP_S, no duplicate to test")  # fmt: skip
        else:
            for pid in (supervisor, *workers):  # as systemd's KillMode=control-group does
                os.kill(pid, signal.SIGTERM)
        await until(lambda: len(server.grep(DRAINING)) == 2, "both workers draining", 60)
        await _past_the_window(first)  # every duplicate has come (the forwarded ones at once)
        assert server.running, f"exit {server.returncode}:\n{server.tail(40)}"
        assert not server.grep(CUT) and not server.grep(RELEASED), server.tail(40)
        held.release.set()  # the run finishes: the drain's end, long before the grace's
        code = await server.wait_exit(90)
        log = server.text()
        assert code == 0, f"exit {code}:\n{server.tail(40)}"
        assert "Traceback" not in log, server.tail(40)
        assert not server.grep(CUT) and not server.grep(RELEASED), server.tail(40)
        assert len(server.grep(SAME_STOP)) <= 2, server.tail(40)  # once a worker at most
    finally:
        held.release.set()
        server.close()


@MODULE_LOOP
async def test_a_deliberate_signal_after_systemds_stop_ends_the_grace(tmp_path: Path, tools: ToolStack) -> None:
    """The same stop of every process at once, then a person's SIGTERM to the supervisor
    past the window: forwarded, it ends the grace of the worker holding the run (released
    for the next process) and the group exits 0."""
    env = tools.agent_env(**LONG, AGENT_WORKERS="2")
    server = AgentServer(tmp_path, env, name="supervisor")
    tag = f"unit-cut-{uuid.uuid4().hex[:6]}"
    held = tools.proxy.hold(side_effect_marker(tag))
    server.start()
    try:
        supervisor, workers = await _two_workers_holding_a_run(server, held, tag)
        first = time.monotonic()
        for pid in (supervisor, *workers):
            os.kill(pid, signal.SIGTERM)
        await until(lambda: len(server.grep(DRAINING)) == 2, "both workers draining", 60)
        await _past_the_window(first)
        server.send(signal.SIGTERM)
        code = await server.wait_exit(60)
        assert code == 0, f"exit {code}:\n{server.tail(40)}"
        assert len(server.grep(RELEASED)) == 1, server.tail(40)  # the worker that held the run
        # That worker cuts its grace; the other, with nothing to drain, has usually closed
        # before the second signal (it comes past SAME_STOP_S).
        assert 1 <= len(server.grep(CUT)) <= 2, server.tail(40)
    finally:
        held.release.set()
        server.close()
