"""The reference backend's logs follow ``AGENT_LOG_FORMAT`` as the agent's do.

Operator review: under ``AGENT_LOG_FORMAT=json`` ``agentchat backend`` still logged
``INFO:     127.0.0.1:59048 - "GET / HTTP/1.1" 404 Not Found`` (uvicorn's text), so a
log shipper reading JSON lines got lines it could not parse. Now every line is one JSON
object, the access line with the agent's access fields; ``text`` stays as it was.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from app.cli.reference_backend import reference_backend
from app.config import Settings
from tests.support.procs import REPO, child_env
from tests.support.server import free_port
from tests.test_cli import wait_for


def _json_lines(output: str) -> list[dict[str, Any]]:
    """Every non-empty line as JSON (fails on the first line that is not)."""
    lines = [line for line in output.splitlines() if line.strip()]
    assert lines, "nothing was logged"
    parsed = []
    for line in lines:
        try:
            parsed.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pytest.fail(f"not a JSON line: {line!r}\n--- whole output:\n{output}")
    return parsed


def _run_backend(tmp_path: Path, log_format: str, port: int | None = None) -> str:
    """``agentchat backend`` with ``AGENT_LOG_FORMAT``, one request for ``/`` (404); its
    output (stdout and stderr: uvicorn's text access log goes to stdout)."""
    port = free_port() if port is None else port
    env = child_env({"AGENT_LOG_FORMAT": log_format, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    cmd = [sys.executable, "-m", "app.cli", "backend", "--port", str(port), "--db", str(tmp_path / "b.sqlite3")]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert wait_for(f"http://127.0.0.1:{port}/healthz", proc).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=5).status_code == 404
    finally:
        proc.terminate()  # a graceful stop: uvicorn logs its shutdown too
        out, _ = proc.communicate(timeout=30)
    return out.decode()


def test_agentchat_backend_logs_json_lines_under_agent_log_format_json(tmp_path: Path) -> None:
    lines = _json_lines(_run_backend(tmp_path, "json"))
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines), lines
    access = [line for line in lines if line.get("path") == "/"]
    assert len(access) == 1, lines
    assert access[0]["method"] == "GET" and access[0]["status"] == 404 and access[0]["client_ip"] == "127.0.0.1"
    assert any(line["logger"] == "uvicorn.error" for line in lines), lines  # uvicorn's own lines too


def test_agentchat_backend_text_logs_are_unchanged(tmp_path: Path) -> None:
    err = _run_backend(tmp_path, "text")
    assert '"GET / HTTP/1.1" 404' in err, err
    assert not any(line.startswith("{") for line in err.splitlines()), err


def test_agentchat_backend_says_where_it_listens(tmp_path: Path) -> None:
    """Walking the docs as a newcomer: ``agentchat backend`` logged ``Started server process``
    and ``Application startup complete`` but never its address - it listens on the sockets
    the CLI bound, and uvicorn names no address for given sockets. Now its one line is
    uvicorn's own ``Uvicorn running on http://HOST:PORT``, in either log format."""
    port = free_port()
    said = f"Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)"
    assert said in _run_backend(tmp_path / "text", "text", port)
    port = free_port()
    lines = _json_lines(_run_backend(tmp_path / "json", "json", port))
    said = f"Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)"
    assert [line["logger"] for line in lines if line["message"] == said] == ["uvicorn.error"], lines


def test_the_backend_beside_serve_logs_in_the_agents_format(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """``serve`` starts the backend as a child writing to the same stderr: in JSON when the
    agent logs JSON (``args.log_format``, set by the CLI's logging set-up)."""
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    args = argparse.Namespace(no_backend=False, backend_port=free_port(), log_format="json")
    with reference_backend(settings, args, 0, "info") as backend:
        assert backend is not None
        assert httpx.get(f"{backend.url}/", timeout=5).status_code == 404
    lines = _json_lines(capfd.readouterr().err)
    assert [line["status"] for line in lines if line.get("path") == "/"] == [404], lines
