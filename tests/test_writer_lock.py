"""One writer process group per SQLite file (``storage.sqlite.writer_lock``,
``app/cli/writer_wait.py``), with real ``agentchat serve`` processes on one file.

Before the lock, a second ``serve`` on a file another one was serving claimed that
one's live runs at start-up and carried them on beside it: the first process's next
write of each run collided with the second's, and it ended the run for its clients
with a ``storage_unavailable`` error the file never kept (the stored run completed in
the other process). Here the second process waits: ``/healthz`` 200, ``/readyz`` 503
naming the holder, a new run 503 with ``Retry-After``, nothing claimed — and when the
first is SIGKILLed it takes over and carries the runs on, each client seeing every
event once and exactly one ending.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import httpx
import pytest

from storage.sqlite.writer_lock import WriterLock, lock_path
from tests.fakes.paced_ollama import run_body
from tests.support.group_ready import until_ready
from tests.support.procs import (
    PYTHON,
    AgentServer,
    ManagedProcess,
    Trace,
    check_trace,
    child_env,
    client,
    follow,
    replay,
    start_run,
    tool_stack,
    until,
)
from tests.support.server import free_port

pytestmark = pytest.mark.slow  # real server processes on one file

RUNS = 3
#: The fake model's pause between words once the first process is dead: the slow pacing
#: only keeps the runs mid-turn until the kill; what the second carries on need not crawl.
AFTER_KILL_PAUSE_S = 0.005


def quiet_env(db: Path) -> dict[str, str]:
    """A serve on ``db`` that needs nothing outside it: the offline answerer, no embedder,
    no sample knowledge base, one local user (these tests are about the file's lock)."""
    return {"AGENT_LLM_PROVIDER": "extractive", "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false",
            "AGENT_AUTH": "none", "AGENT_DB_PATH": str(db)}


def _streaming(trace: Trace) -> bool:
    return any(name == "content_chunk" for _, name, _ in trace.frames)


async def _waiting(server: AgentServer | AgentServerView, http: httpx.AsyncClient) -> dict[str, object]:
    """Until ``server`` answers as a waiting process: its ``/readyz`` body."""
    seen: list[tuple[int, object]] = []

    async def answered() -> bool:
        status, body = await server.readyz(http)
        seen.append((status, body))
        return status == 503 and body is not None and "writer" in body.get("checks", {})

    deadline = asyncio.get_running_loop().time() + 60
    while not await answered():
        assert server.running, server.tail()
        assert asyncio.get_running_loop().time() < deadline, (seen[-3:], server.tail())
        await asyncio.sleep(0.05)
    return seen[-1][1]  # type: ignore[return-value]


async def test_a_second_serve_on_the_file_waits_then_takes_over_when_the_first_dies(tmp_path: Path) -> None:
    async with tool_stack(tmp_path, tokens=30, pause_s=0.1) as stack:
        env = stack.agent_env()
        first = AgentServer(tmp_path, env, name="first")
        second = AgentServer(tmp_path, env, name="second")  # the same AGENT_DB_PATH, its own port
        assert first.db_path == second.db_path
        try:
            first.start()
            await first.wait_ready()
            async with client() as http:
                traces = [Trace(tag=f"w{i}-{uuid.uuid4().hex[:6]}") for i in range(RUNS)]
                followers = []
                for trace in traces:
                    status, body = await start_run(http, first.base, run_body(trace.tag))
                    assert status == 201, (status, body)
                    trace.run_id, trace.stream_url = body["run_id"], body["stream_url"]
                    followers.append(asyncio.create_task(follow(http, first.base, trace, deadline_s=120)))
                await until(lambda: all(_streaming(t) for t in traces), "every run streaming", timeout=60)

                second.start()
                body = await _waiting(second, http)
                detail = str(body["checks"]["writer"]["detail"])  # type: ignore[index]
                assert f"pid {first.pid}" in detail and str(first.db_path) in detail, detail
                assert (await http.get(f"{second.base}/healthz")).status_code == 200  # alive: not to be killed
                refused = await http.post(f"{second.base}/v1/agent/runs", json=run_body("late"), timeout=5)
                assert refused.status_code == 503 and refused.headers.get("retry-after"), refused.text
                assert second.grep("waiting to become the database's writer"), second.tail()
                assert not second.grep("carrying on runs"), second.tail()

                # The first process's runs go on undisturbed while the second waits.
                await until(lambda: any(t.last_id >= 20 for t in traces), "runs well under way", timeout=60)
                assert second.running and (await second.readyz(http))[0] == 503
                assert not first.grep("could not be stored", "storage write rejected"), first.tail()

                await first.kill()  # SIGKILL: the kernel releases the lock
                stack.fake.pause_s = AFTER_KILL_PAUSE_S  # the pacing only had to outlast the kill
                for task in followers:
                    task.cancel()
                await asyncio.gather(*followers, return_exceptions=True)
                await second.wait_ready(timeout=60)
                assert second.grep("took over as the database's writer"), second.tail()
                for trace in traces:
                    trace.outcome = "pending"
                done = await asyncio.gather(*(follow(http, second.base, t, deadline_s=120) for t in traces))
                for trace in done:
                    _, stored = await replay(http, second.base, str(trace.stream_url))
                    assert check_trace(trace, stored) == [], (trace.tag, check_trace(trace, stored), second.tail())
                    assert stack.proxy.side_effects(trace.tag) <= 1
        finally:
            first.close()
            second.close()


async def test_the_workers_of_one_serve_share_the_lock_and_a_second_serve_waits(tmp_path: Path) -> None:
    """``serve --workers 2`` is one group: both workers serve (they inherit the
    supervisor's lock); a second ``serve`` on the file waits while any of them lives,
    and a SIGTERM stops it while it waits."""
    db = tmp_path / "agent.sqlite3"
    base_env = quiet_env(db)
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend"]
    group = ManagedProcess("group", [*argv, "--workers", "2"], child_env(base_env), tmp_path / "group.log")
    second = AgentServer(tmp_path, base_env, name="second")
    try:
        group.start()
        await until(lambda: len(group.grep("serving on")) >= 2 or not group.running, "both workers serving", 90)
        assert len(group.grep("serving on")) >= 2, group.tail()
        assert lock_path(db).exists()
        second.start()
        async with httpx.AsyncClient() as http:
            await _waiting(second, http)
            # The group answers ready (a loaded machine may take a while: waited for, not
            # probed once with a short timeout), and no worker of it ever waited for the
            # file's lock - the group's own log says so, whichever worker answered.
            seen = await until_ready(http, port, group)
            assert not any('"writer"' in body for _, body in seen), (seen, group.tail())
            assert not group.grep("waiting to become"), group.tail()
        second.send(signal.SIGTERM)  # a waiting process holds nothing: it stops at once
        assert await second.wait_exit(30) in (0, 143), second.tail()
    finally:
        group.close()
        second.close()


def _workers(supervisor: int) -> list[int]:
    """The ``--workers`` supervisor's serving children (``--listen-fd`` in their argv)."""
    pids = []
    for raw in Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split():
        try:
            if b"--listen-fd" in Path(f"/proc/{raw}/cmdline").read_bytes():
                pids.append(int(raw))
        except OSError:  # gone meanwhile
            continue
    return sorted(pids)


async def test_a_worker_restarted_after_the_lock_file_was_removed_serves(tmp_path: Path) -> None:
    """Third review: with the lock file removed under ``serve --workers 2``, a worker
    restarted afterwards refused its inherited descriptor (the path names another file
    now) and waited for the new file - here locked by this test, as by a serve started
    after the removal - on the group's own socket: 503 to part of the group's traffic.
    It shares the group's lock whatever the path names: it serves."""
    db = tmp_path / "agent.sqlite3"
    env = quiet_env(db)
    port = free_port()
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend",
            "--workers", "2"]
    group = ManagedProcess("group", argv, child_env(env), tmp_path / "group.log")
    other = WriterLock(db)  # what a serve started after the removal locks: the new file
    try:
        supervisor = group.start()
        await until(lambda: len(group.grep("serving on")) >= 2 or not group.running, "both workers serving", 90)
        assert len(group.grep("serving on")) >= 2, group.tail()
        lock_path(db).unlink()
        assert other.try_acquire()
        killed = _workers(supervisor)[0]
        os.kill(killed, signal.SIGKILL)
        await until(lambda: len(group.grep("serving on")) >= 3 or len(group.grep("waiting to become")) > 0
                    or not group.running, "the restarted worker serving (or waiting)", 90)
        assert not group.grep("waiting to become"), group.tail()
        assert killed not in _workers(supervisor) and len(_workers(supervisor)) == 2, group.tail()
        async with httpx.AsyncClient() as http:
            answers = [(await http.get(f"http://127.0.0.1:{port}/readyz", timeout=5)).status_code for _ in range(20)]
        assert answers == [200] * 20, (answers, group.tail())
    finally:
        group.close()
        other.release()


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def test_a_waiting_serve_starts_its_reference_backend_only_once_it_writes(tmp_path: Path) -> None:
    """A serve waiting for the file started its reference backend first: a second
    ``python -m backend`` on the same ``backend.sqlite3`` beside the holder's. Now the
    lock comes first; the backend starts when the serve takes over."""
    db = tmp_path / "agent.sqlite3"
    base_env = quiet_env(db)
    first = AgentServer(tmp_path, base_env, name="first")
    second = AgentServer(tmp_path, base_env, name="second")
    backend_port = free_port()
    second.argv = [a for a in second.argv if a != "--no-backend"] + ["--backend-port", str(backend_port)]
    try:
        first.start()
        await first.wait_ready()
        second.start()
        async with httpx.AsyncClient() as http:
            await _waiting(second, http)
            assert not _listening(backend_port), "a waiting serve started a reference backend"
            await first.kill()
            await second.wait_ready(timeout=90)
            assert (await http.get(f"http://127.0.0.1:{backend_port}/healthz", timeout=5)).status_code == 200
    finally:
        first.close()
        second.close()


async def test_a_waiting_serve_stops_on_one_signal_like_a_serving_one_and_a_waiting_group_takes_over(
    tmp_path: Path,
) -> None:
    """A serve waiting for the file (alone, or a ``--workers 2`` supervisor before any
    worker) holds nothing: one SIGTERM stops it at once, exit 0 as a serving one's stop
    by signal (main's ``DrainingServer``), with no traceback. uvicorn's own handler, which
    the waiting server used, raised the signal again after its close: exit 143 alone,
    death by the signal in the supervisor. A group left waiting takes over with both
    workers once the holder is SIGKILLed."""
    db = tmp_path / "agent.sqlite3"
    env = quiet_env(db)
    lone = AgentServer(tmp_path, env, name="lone")
    waiting = AgentServer(tmp_path, env, name="waiting")
    procs: list[ManagedProcess] = [lone, waiting]

    def group(name: str, port: int) -> ManagedProcess:
        argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-backend",
                "--workers", "2"]
        proc = ManagedProcess(name, argv, child_env(env), tmp_path / f"{name}.log")
        procs.append(proc)
        return proc

    try:
        lone.start()
        await lone.wait_ready()
        async with httpx.AsyncClient() as http:
            # The three waiters start together (each only waits for the holder's lock).
            stopped_port, taking_port = free_port(), free_port()
            stopped, taking = group("stopped", stopped_port), group("taking", taking_port)
            for proc in (waiting, stopped, taking):
                proc.start()
            await _waiting(waiting, http)
            waiting.send(signal.SIGTERM)
            assert await waiting.wait_exit(30) == 0, waiting.tail()
            assert not waiting.grep("Traceback", "did not start"), waiting.tail()

            for proc, port in ((stopped, stopped_port), (taking, taking_port)):
                await _waiting(AgentServerView(port, proc), http)
                assert not proc.grep("serving on"), proc.tail()
            stopped.send(signal.SIGTERM)
            assert await stopped.wait_exit(30) == 0, stopped.tail()
            assert not stopped.grep("Traceback"), stopped.tail()

            await lone.kill()
            await until(lambda: len(taking.grep("serving on")) >= 2 or not taking.running, "both workers serving", 90)
            assert taking.running, taking.tail()
            # Both workers serve: the group answers ready (waited for, not probed once: a
            # loaded machine may answer late), and none of them as a waiting process.
            seen = await until_ready(http, taking_port, taking)
            assert not any('"writer"' in body for _, body in seen), (seen, taking.tail())
    finally:
        # The group serving the file first: a process's close waits up to TIDY_GUARD_S
        # (tests/support/procs.py) for the file's workers' directory to hold nothing
        # live, so closing the dead ones while ``taking`` served waited 3 s each.
        for proc in reversed(procs):
            proc.close()


class AgentServerView:
    """``_waiting``'s view of a process serving on ``port`` (a ``--workers`` group)."""

    def __init__(self, port: int, proc: ManagedProcess) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.proc = proc

    @property
    def running(self) -> bool:
        return self.proc.running

    def tail(self) -> str:
        return self.proc.tail()

    async def readyz(self, http: httpx.AsyncClient) -> tuple[int, dict[str, object] | None]:
        try:
            response = await http.get(f"{self.base}/readyz", timeout=5)
        except httpx.HTTPError:
            return 0, None
        body = response.json() if response.headers.get("content-type", "").startswith("application/json") else None
        return response.status_code, body if isinstance(body, dict) else None
