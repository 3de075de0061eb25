"""The reference backend that ``agentchat serve`` started beside the agent is started again
when it dies, and ``/readyz`` says so.

Walking the README as a newcomer: with the backend child gone (killed, crashed), ``serve``
logged nothing and served on, every workflow and table tool failing, ``/readyz`` saying
only ``not reachable (ConnectError)``; then (80b5a09) it logged one ERROR line and still
served on without it. Now each exit is an ERROR line and the backend is started again,
with a back-off and a bounded number of restarts within a window; ``/readyz``
``checks.backend.kept_by_serve`` shows the keeper's state, and once it has given up,
``detail`` says the backend stays down and what to do. The ordinary stop says nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cli.backend_keeper import BackendKeeper
from app.cli.reference_backend import reference_backend
from app.config import Settings
from app.ops.backend_state import read_state, readiness_of
from app.rooms import BackendComponent
from tests.fakes.paced_ollama import PacedOllama
from tests.support.procs import (
    DEMO_AUTH,
    OFFLINE_SERVE_ENV,
    PYTHON,
    AgentServer,
    ManagedProcess,
    child_env,
    until,
)
from tests.support.server import free_port, serve_app

pytestmark = pytest.mark.slow

GUARD_S = 60.0
SERVING = "agentchat: serving on"
STARTED = "reference backend started beside the agent"
DRAINING = "draining: new runs are refused"


def _children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _backend_pid(serve_pid: int) -> int | None:
    """The ``python -m backend`` child of ``serve``, when it has one."""
    for child in _children_of(serve_pid):
        try:
            argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"backend" in argv and b"-m" in argv:
            return child
    return None


async def test_serve_starts_a_killed_backend_again_and_readyz_says_so(tmp_path: Path) -> None:
    backend_port = free_port()
    server = AgentServer(tmp_path, {})
    server.argv = [a for a in server.argv if a != "--no-backend"] + ["--backend-port", str(backend_port)]
    server.start()
    try:
        body = await server.wait_ready()
        assert body["checks"]["backend"]["kept_by_serve"] == {"state": "running", "restarts": 0}
        first = _backend_pid(server.pid or 0)
        assert first is not None, server.tail()
        os.kill(first, signal.SIGKILL)

        last: dict[str, Any] = {}
        async with httpx.AsyncClient() as http:

            async def answered_again() -> bool:
                _, body = await server.readyz(http)
                backend = (body or {}).get("checks", {}).get("backend", {})
                last.clear()
                last.update(backend)
                kept = backend.get("kept_by_serve", {})
                return backend.get("reachable") is True and kept.get("restarts") == 1

            deadline = time.monotonic() + GUARD_S
            while not await answered_again():
                assert time.monotonic() < deadline, f"not back within {GUARD_S} s: {last}\n{server.tail()}"
                await asyncio.sleep(0.05)
            assert last["kept_by_serve"] == {"state": "running", "restarts": 1, "last_exit": "signal SIGKILL"}
            assert "detail" not in last
            # The workflow/table backend itself answers again, from a new process.
            assert (await http.get(f"http://127.0.0.1:{backend_port}/healthz")).status_code == 200
        second = _backend_pid(server.pid or 0)
        assert second is not None and second != first
        said = server.grep("the reference backend exited (signal SIGKILL): starting it again in 0.5 s "
                           "(restart 1 of at most 5 within 60 s)")
        assert len(said) == 1, server.tail()
        assert server.grep("the reference backend answers again (restarted 1 time)"), server.tail()
    finally:
        server.close()


async def test_a_backend_that_keeps_exiting_is_given_up_and_readyz_says_what_to_do(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A child that exits at once every time: restarted ``restart_limit`` times, then not
    again - one ERROR line, and ``/readyz``'s backend check says it stays down and what to do."""
    caplog.set_level(logging.INFO, logger="agentchat.cli")
    argv = [PYTHON, "-c", "raise SystemExit(3)"]
    first = subprocess.Popen(argv)
    state_file = tmp_path / "backend.state.json"
    keeper = BackendKeeper(argv, "http://127.0.0.1:9", first, state_file, restart_limit=2, first_delay_s=0.05)
    keeper.start()
    try:
        deadline = time.monotonic() + GUARD_S
        while (state := read_state(state_file)) is None or state.state != "given_up":
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.02)
        assert state.restarts == 2 and state.exits == 3 and state.last_exit == "code 3"
        exits = [r.getMessage() for r in caplog.records if r.getMessage().startswith("the reference backend exited")]
        assert exits == [
            "the reference backend exited (code 3): starting it again in 0.05 s (restart 1 of at most 2 within "
            "60 s); workflow and table tools fail meanwhile",
            "the reference backend exited (code 3): starting it again in 0.1 s (restart 2 of at most 2 within "
            "60 s); workflow and table tools fail meanwhile",
            "the reference backend exited (code 3), 3 times within 60 s: not started again; workflow and table "
            "tools fail until agentchat serve is restarted",
        ]
        shown, detail = readiness_of(state)
        assert shown == {"state": "given_up", "restarts": 2, "last_exit": "code 3"}
        assert detail == (
            "the reference backend agentchat serve started exited 3 times within 60 s (last: code 3) and is not "
            "restarted again: workflow and table tools fail until agentchat serve is restarted (its log says why "
            "the backend exited)"
        )
        async with httpx.AsyncClient() as http:  # /readyz's check, against the port nothing answers on
            nobody = f"http://127.0.0.1:{free_port()}"
            check = await BackendComponent(nobody, http, None, "demo", state_file).readiness()
        assert check["reachable"] is False and check["kept_by_serve"] == shown and check["detail"] == detail
    finally:
        keeper.stop()
    assert not state_file.exists()


async def test_a_backend_that_cannot_be_started_again_is_given_up_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No child at all (its interpreter gone: a virtualenv made anew under a running
    ``serve``; no memory to fork): the start's error ended the keeper's thread, and
    ``/readyz`` said ``restarting`` for ever with nothing more in the log. Each failed start
    counts as an exit: the restarts back off, then end as for a child that keeps exiting."""
    caplog.set_level(logging.INFO, logger="agentchat.cli")
    first = subprocess.Popen([PYTHON, "-c", "raise SystemExit(3)"])
    state_file = tmp_path / "backend.state.json"
    gone = [str(tmp_path / "venv-made-anew" / "python"), "-m", "backend"]
    keeper = BackendKeeper(gone, "http://127.0.0.1:9", first, state_file, restart_limit=2, first_delay_s=0.05)
    keeper.start()
    try:
        deadline = time.monotonic() + GUARD_S
        while (state := read_state(state_file)) is None or state.state != "given_up":
            # before: the thread died at the first start, the state left at restarting
            assert keeper._thread is not None and keeper._thread.is_alive(), (state, caplog.text)
            assert time.monotonic() < deadline, caplog.text
            await asyncio.sleep(0.02)
        assert (state.restarts, state.exits) == (0, 3), state
        assert state.last_exit is not None and state.last_exit.startswith("not started: FileNotFoundError"), state
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert said[0].startswith("the reference backend exited (code 3): starting it again"), said
        assert said[-1].startswith("the reference backend exited (not started: FileNotFoundError"), said
        assert said[-1].endswith("3 times within 60 s: not started again; workflow and table tools fail until "
                                 "agentchat serve is restarted"), said
    finally:
        keeper.stop()
    assert not state_file.exists()


def test_the_ordinary_stop_logs_no_exit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentchat.cli")
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    args = argparse.Namespace(no_backend=False, backend_port=free_port())
    with reference_backend(settings, args, 0, "warning") as backend:
        assert backend is not None
        assert read_state(backend.state_file) is not None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not backend.state_file.exists()


async def test_ctrl_c_reaches_serve_alone_and_the_backend_serves_the_drain(tmp_path: Path) -> None:
    """A terminal's Ctrl-C (SIGINT to ``serve``'s whole process group) reached the backend
    child as well: it stopped at once, while ``serve`` drained its live runs - whose workflow and table tools
    then failed against it - and the watcher logged the ordinary stop as the backend dying
    ("... fail until agentchat serve is restarted"). The child sits in a session of its
    own, as ``serve --workers``' workers do: ``serve`` stops it once the drain is over.
    A request whose body never finishes keeps the drain open while the backend is asked."""
    port = free_port()
    env = child_env({**OFFLINE_SERVE_ENV, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_PORT": str(port)})
    argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
            "--backend-port", str(free_port())]  # fmt: skip
    serve = ManagedProcess("serve", argv, env, tmp_path / "serve.log")
    serve.ctrl_c = True
    serve.start()
    held: asyncio.StreamWriter | None = None
    try:
        await until(lambda: bool(serve.grep(SERVING)) or not serve.running, "serve listening", GUARD_S)
        [started] = [orjson.loads(line) for line in serve.grep(STARTED)]
        _, held = await asyncio.open_connection("127.0.0.1", port)
        held.write(b"POST /v1/agent/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 100\r\n\r\n{\"mess")  # fmt: skip
        await held.drain()
        assert serve.pid is not None
        os.killpg(serve.pid, signal.SIGINT)  # its own session: the group is serve's (and, before, the backend's)
        await until(lambda: bool(serve.grep(DRAINING)), "the drain's start", GUARD_S)
        async with httpx.AsyncClient(timeout=5) as http:
            assert (await http.get(f"{started['url']}/healthz")).status_code == 200  # before: ConnectError
        held.close()
        held = None
        assert await serve.wait_exit(GUARD_S) == 0, serve.tail(40)
        assert not serve.grep("the reference backend exited"), serve.tail(40)
        with pytest.raises(ProcessLookupError):
            os.kill(started["backend_pid"], 0)  # stopped on the way out all the same
    finally:
        if held is not None:
            held.close()
        serve.close()



async def test_a_stop_that_signals_serve_and_its_backend_together_is_no_crash(tmp_path: Path) -> None:
    """systemd's default stop (``KillMode=control-group``) SIGTERMs every process of the
    unit, the backend with ``serve``: the backend ended at once while ``serve`` drained its
    live run, and the keeper logged an ERROR ("exited (signal SIGTERM): starting it
    again"). An exit on SIGTERM while ``serve`` stops - the backend's signal sent first
    here - is one INFO line, and the backend is started again for the drain, whose
    workflow and table tools still reach it; it stops with ``serve`` after the drain."""
    fake = PacedOllama(tokens=2, pause_s=0.05, flow=())
    fake.streaming_until = asyncio.Event()  # the run stays live, and the drain open, until set
    async with serve_app(fake.app) as ollama_url:
        port = free_port()
        env = child_env({"AGENT_LLM_PROVIDER": "ollama", "OLLAMA_HOST": ollama_url, "OLLAMA_MODEL": fake.model,
                         "AGENT_EMBEDDER": "none", "AGENT_INGEST_SAMPLE_KB": "false", "AGENT_SHUTDOWN_GRACE_S": "600",
                         "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_PORT": str(port)})  # fmt: skip
        argv = [PYTHON, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
                "--backend-port", str(free_port())]  # fmt: skip
        serve = ManagedProcess("serve", argv, env, tmp_path / "serve.log")
        serve.start()
        try:
            await until(lambda: bool(serve.grep(SERVING)) or not serve.running, "serve listening", GUARD_S)
            [started] = [orjson.loads(line) for line in serve.grep(STARTED)]
            async with httpx.AsyncClient(timeout=30) as http:
                body = {"message": "hello", "context_type": "workflow", "context": {}}
                run = await http.post(f"http://127.0.0.1:{port}/v1/agent/runs", json=body, headers=DEMO_AUTH)
                assert run.status_code == 201, run.text
                await until(lambda: fake.chats >= 1, "the run's turn streaming", GUARD_S)
                assert serve.pid is not None
                os.kill(started["backend_pid"], signal.SIGTERM)  # as systemd does: every process of the unit
                os.kill(serve.pid, signal.SIGTERM)
                await until(lambda: bool(serve.grep(DRAINING)), "the drain's start", GUARD_S)
                await until(lambda: bool(serve.grep("the reference backend answers again")) or not serve.running,
                            "the backend started again for the drain", GUARD_S)  # fmt: skip
                assert (await http.get(f"{started['url']}/healthz")).status_code == 200, serve.tail(40)
            again = _backend_pid(serve.pid)
            assert again is not None and again != started["backend_pid"], serve.tail(40)
            [said] = [orjson.loads(line) for line in serve.grep("the reference backend was stopped with serve")]
            assert said["level"] == "INFO", said
            assert not serve.grep("the reference backend exited"), serve.tail(40)  # before: its ERROR line
            fake.streaming_until.set()  # the run ends, and with it the drain
            assert await serve.wait_exit(GUARD_S) is not None, serve.tail(40)
            assert not serve.grep('"level":"ERROR"', '"level":"WARNING","logger":"agentchat.cli"'), serve.tail(40)
            with pytest.raises(ProcessLookupError):
                os.kill(again, 0)  # the backend started for the drain stopped with serve
        finally:
            fake.streaming_until.set()
            serve.close()
