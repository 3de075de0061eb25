"""The reference backend that ``agentchat serve`` started beside the agent says when it dies.

Walking the README as a newcomer: with the backend child gone (killed, crashed), ``serve``
logged nothing and served on, every workflow and table tool failing, ``/readyz`` saying
only ``not reachable (ConnectError)``. Now its end is one ERROR line saying what to do;
the ordinary stop on the way out says nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import time
from pathlib import Path

import httpx
import orjson
import pytest

from app.cli.reference_backend import reference_backend
from app.config import Settings
from tests.support.procs import OFFLINE_SERVE_ENV, PYTHON, ManagedProcess, child_env, until
from tests.support.server import free_port

GUARD_S = 60.0
SERVING = "agentchat: serving on"
STARTED = "reference backend started beside the agent"
DRAINING = "draining: new runs are refused"


def _wait_for_record(caplog: pytest.LogCaptureFixture, message: str) -> logging.LogRecord:
    deadline = time.monotonic() + GUARD_S
    while time.monotonic() < deadline:
        for record in caplog.records:
            if record.getMessage().startswith(message):
                return record
        time.sleep(0.02)
    raise AssertionError(f"timed out after {GUARD_S} s waiting for a log line {message!r}")


def test_a_backend_that_dies_under_serve_is_one_error_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentchat.cli")
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    args = argparse.Namespace(no_backend=False, backend_port=free_port())
    with reference_backend(settings, args, 0, "warning") as url:
        started = _wait_for_record(caplog, "reference backend started beside the agent")
        pid = started.__dict__["pid"]
        os.kill(pid, signal.SIGKILL)
        died = _wait_for_record(caplog, "the reference backend exited")
    assert died.levelno == logging.ERROR
    assert died.getMessage() == (
        f"the reference backend exited (code {-signal.SIGKILL}): workflow and table tools fail until "
        "agentchat serve is restarted"
    )
    assert died.__dict__["url"] == url and died.__dict__["pid"] == pid


def test_the_ordinary_stop_logs_no_exit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agentchat.cli")
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    args = argparse.Namespace(no_backend=False, backend_port=free_port())
    with reference_backend(settings, args, 0, "warning") as url:
        assert url is not None
        _wait_for_record(caplog, "reference backend started beside the agent")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


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
            os.kill(started["pid"], 0)  # stopped on the way out all the same
    finally:
        if held is not None:
            held.close()
        serve.close()
