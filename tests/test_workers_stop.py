"""``agentchat serve --workers``' supervisor always exits after SIGTERM, in bounded time
(``app/cli/workers.py``), through real processes and real signals.

- A SIGTERM that arrives while the supervisor is starting a worker — one of the first, or
  one restarted after a crash — reaches that worker too, and the supervisor exits 0 with
  its runtime directory removed. The start is held at a gate (``tests/support/
  gated_supervisor.py``: the child waits between ``fork`` and ``exec``, so the parent is
  inside ``Popen``) — the window a loaded machine opens at random. Before, the signal
  either killed the supervisor (its handler was installed after the first workers
  started) or was forwarded to the workers known so far, and the one being started kept
  the supervisor waiting for ever.
- A worker that does not stop (SIGSTOPped: it cannot act on SIGTERM) is SIGKILLed once
  the stop deadline passes, and the supervisor exits 1 instead of waiting for ever; the
  run that worker held is not lost: the next start carries it on to its end.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import orjson
import pytest

from tests.fakes.paced_ollama import run_body, side_effect_marker
from tests.support.procs import OFFLINE_SERVE_ENV, PYTHON, AgentServer, Trace, check_trace, follow, replay, until
from tests.support.procs import tool_stack as make_tool_stack
from tests.test_workers import pinned_clients, saw, start_on

pytestmark = pytest.mark.slow

EXTRACTIVE = {**OFFLINE_SERVE_ENV, "AGENT_WORKERS": "2"}


def gated_supervisor(tmp_path: Path, env: dict[str, str], *args: str, name: str) -> AgentServer:
    """The supervisor of two ``agentchat serve`` workers, as ``tests/support/gated_supervisor.py``."""
    server = AgentServer(tmp_path, env, name=name)
    server.argv = [PYTHON, "-m", "tests.support.gated_supervisor", "--port", str(server.port), "--workers", "2", *args]
    return server


def children(pid: int) -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}
    except FileNotFoundError:
        return set()


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet has stopped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def workers_dir(worker_pid: int) -> Path:
    """The supervisor's runtime directory, as its worker was given it (``AGENT_WORKERS_DIR``)."""
    environ = Path(f"/proc/{worker_pid}/environ").read_bytes().split(b"\0")
    (found,) = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"AGENT_WORKERS_DIR=")]
    return Path(found.decode())


async def until_gate_waits(fifo: Path, supervisor: AgentServer, timeout_s: float = 60) -> int:
    """A write end of ``fifo`` once a worker start waits at the gate (its reader opened
    it: a non-blocking open for writing succeeds only then)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:
                raise
        assert supervisor.running, f"the supervisor exited:\n{supervisor.tail(40)}"
        assert time.monotonic() < deadline, f"no worker start reached the gate:\n{supervisor.tail(40)}"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("start", ["first", "restart"])
async def test_a_sigterm_while_a_worker_starts_stops_that_worker_too(tmp_path: Path, start: str) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    # Starts 0 and 1 are the first two workers; start 2 replaces the one killed below.
    gate_at = "1" if start == "first" else "2"
    supervisor = gated_supervisor(
        tmp_path, EXTRACTIVE, "--gate", str(fifo), "--gate-spawn", gate_at, name=f"gated-{start}"
    )
    supervisor.start()
    assert supervisor.pid is not None
    try:
        if start == "restart":
            await supervisor.wait_healthy()
            first = children(supervisor.pid)
            assert len(first) == 2, first
            os.kill(min(first), signal.SIGKILL)  # the supervisor starts another in its place
        writer = await until_gate_waits(fifo, supervisor)
        workers = children(supervisor.pid)  # the one at the gate among them
        (directory,) = {workers_dir(p) for p in workers if is_worker(p)}
        assert directory.is_dir()

        supervisor.send(signal.SIGTERM)  # the supervisor is inside Popen for the gated worker
        os.write(writer, b"go")
        os.close(writer)

        code = await supervisor.wait_exit(60)
        assert code == 0, f"exit {code}:\n{supervisor.tail(40)}"
        assert not [p for p in workers if alive(p)], supervisor.tail(40)
        assert not directory.exists()
    finally:
        supervisor.close()


def is_worker(pid: int) -> bool:
    """Whether the child ``pid`` runs a worker already: the one waiting at the gate has
    not reached ``exec`` and still shows the supervisor's own environment."""
    return b"AGENT_WORKERS_DIR=" in Path(f"/proc/{pid}/environ").read_bytes()


async def test_a_worker_that_does_not_stop_is_killed_at_the_deadline_and_its_run_carried_on(tmp_path: Path) -> None:
    stop_after_s = 4.0
    # Two words a turn: the run is placed by the held backend call, not by the pacing.
    async with make_tool_stack(tmp_path, tokens=2, pause_s=0.05) as tools:
        env = tools.agent_env(AGENT_WORKERS="2", AGENT_RUN_LEASE_S="2")
        supervisor = gated_supervisor(tmp_path, env, "--grace", "0", "--stop-after", str(stop_after_s), name="hung")
        supervisor.start()
        stopped: list[int] = []
        try:
            await supervisor.wait_healthy()
            tag = f"hung-{uuid.uuid4().hex[:6]}"
            held = tools.proxy.hold(side_effect_marker(tag))  # the run waits on A, mid-way
            async with pinned_clients(supervisor.base, 1) as pins:
                (a,), (b,) = pins.values()
                started = await start_on(a, run_body(tag))
            trace = Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"])
            await until(held.reached.is_set, "the run on worker A inside its backend call", 60)

            os.kill(a.pid, signal.SIGSTOP)  # A can no longer act on a SIGTERM
            stopped.append(a.pid)
            supervisor.send(signal.SIGTERM)
            # B drains and exits; A is killed once the deadline passes: a bounded wait.
            code = await supervisor.wait_exit(stop_after_s + 60)
            assert code == 1, f"exit {code}:\n{supervisor.tail(40)}"
            assert supervisor.grep("past the stop deadline"), supervisor.tail(40)
            assert not alive(a.pid) and not alive(b.pid)
            held.release.set()

            # The acknowledged run is not lost: the next start carries it on to its end.
            again = AgentServer(tmp_path, env | {"AGENT_WORKERS": "1"}, port=supervisor.port, name="after")
            again.start()
            try:
                await again.wait_healthy()
                async with httpx.AsyncClient(timeout=httpx.Timeout(30, connect=5)) as http:
                    await follow(http, again.base, trace, deadline_s=120)
                    status, stored = await replay(http, again.base, trace.stream_url or "")
                assert not check_trace(trace, stored if status == 200 else []), (trace.frames[-3:], again.tail(40))
                assert saw(trace, "run_resumed")
                assert orjson.loads(trace.frames[-1][2])["status"] == "completed"
                assert tools.proxy.side_effects(tag) <= 1
            finally:
                again.close()
        finally:
            supervisor.close()
            for pid in stopped:  # a stopped worker would outlive its supervisor's death signal
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
