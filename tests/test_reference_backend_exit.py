"""The reference backend that ``agentchat serve`` started beside the agent says when it dies.

Walking the README as a newcomer: with the backend child gone (killed, crashed), ``serve``
logged nothing and served on, every workflow and table tool failing, ``/readyz`` saying
only ``not reachable (ConnectError)``. Now its end is one ERROR line saying what to do;
the ordinary stop on the way out says nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import time
from pathlib import Path

import pytest

from app.cli.reference_backend import reference_backend
from app.config import Settings
from tests.support.server import free_port

GUARD_S = 60.0


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
