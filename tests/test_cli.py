"""The CLI runs the reference backend in its own process (``python -m backend``): started
beside the agent and answering before the agent is, stopped when the agent stops."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.cli import commands as cli
from app.cli.reference_backend import reference_backend
from app.config import Settings
from tests.support.server import free_port

REPO = Path(__file__).resolve().parents[1]

DEMO = {"Authorization": "Bearer demo-bob"}


def wait_for(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        try:
            return httpx.get(url, headers=DEMO, timeout=2)
        except httpx.TransportError:
            time.sleep(0.05)
    raise AssertionError(f"{url} did not answer within {timeout_s} s")


def test_serve_runs_the_backend_in_its_own_process_and_stops_it(tmp_path: Path) -> None:
    settings = Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")})
    args = argparse.Namespace(no_backend=False, backend_port=free_port())
    with reference_backend(settings, args, 0, "warning") as url:
        assert url is not None
        resp = httpx.get(f"{url}/v1/workflow/trigger-types", headers=DEMO, timeout=5)  # up before we get here
        assert resp.status_code == 200 and resp.json()
    assert (tmp_path / "backend.sqlite3").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=2)


def test_no_backend_when_one_is_configured(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_BACKEND_URL": "http://127.0.0.1:9"}
    )
    with reference_backend(settings, argparse.Namespace(no_backend=False, backend_port=None), 0, "info") as url:
        assert url is None
    assert not (tmp_path / "backend.sqlite3").exists()


def test_agentchat_backend_becomes_python_m_backend(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "solo.sqlite3"
    cmd = [sys.executable, "-m", "app.cli", "backend", "--port", str(port), "--db", str(db)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        resp = wait_for(f"http://127.0.0.1:{port}/v1/workflow/trigger-types", proc)
        assert resp.status_code == 200 and resp.json()
        assert db.exists()
        cmdline = Path(f"/proc/{proc.pid}/cmdline")
        if cmdline.exists():  # Linux: the same process now runs the backend module, not the CLI
            argv = cmdline.read_bytes().split(b"\0")
            assert argv[1:3] == [b"-m", b"backend"], argv
    finally:
        proc.terminate()
        proc.wait(15)


def test_the_readme_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    """README's row for docs/cli.md lists every ``agentchat`` command (``compact`` was left out)."""
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    commands = re.search(r"\{([a-z,-]+)\}", capsys.readouterr().out)
    assert commands is not None
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if "(docs/cli.md)" in line)
    assert [c for c in commands.group(1).split(",") if f"`{c}`" not in row and f"agentchat {c}`" not in row] == []
