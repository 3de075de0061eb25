"""The CLI runs the reference backend in its own process (``python -m backend``): started
beside the agent and answering before the agent is, stopped when the agent stops."""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.cli import commands as cli
from app.cli import serving
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
    with reference_backend(settings, args, 0, "warning") as backend:
        assert backend is not None
        url = backend.url
        resp = httpx.get(f"{url}/v1/workflow/trigger-types", headers=DEMO, timeout=5)  # up before we get here
        assert resp.status_code == 200 and resp.json()
    assert (tmp_path / "backend.sqlite3").exists()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/healthz", timeout=2)


def test_no_backend_when_one_is_configured(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {"AGENT_DB_PATH": str(tmp_path / "agent.sqlite3"), "AGENT_BACKEND_URL": "http://127.0.0.1:9"}
    )
    with reference_backend(settings, argparse.Namespace(no_backend=False, backend_port=None), 0, "info") as backend:
        assert backend is None
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
    commands = _commands(capsys.readouterr().out)
    assert "serve" in commands and "compact" in commands
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if "(docs/cli.md)" in line)
    assert [c for c in commands if f"`{c}`" not in row and f"agentchat {c}`" not in row] == []


def _commands(help_text: str) -> list[str]:
    """The commands a ``--help`` lists under ``commands:`` (``COMMAND``, then one a line)."""
    listed = help_text.split("\n  COMMAND\n", 1)[1]
    return re.findall(r"^    ([a-z][a-z-]*)\b", listed, re.MULTILINE)


def _help(capsys: pytest.CaptureFixture[str], main: Any, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_help_texts_say_what_the_backend_is_in_plain_words(capsys: pytest.CaptureFixture[str]) -> None:
    """A newcomer met "Ichor-compatible" in the help with nothing to say what it is: the
    help names what the reference backend is (the workflow/table REST service the tools
    call), and no help text uses the project's name for it."""
    from backend.__main__ import main as backend_main

    top = _help(capsys, cli.main, [])
    commands = _commands(top)
    assert "backend" in commands
    texts = {"agentchat": top, "python -m backend": _help(capsys, backend_main, [])}
    for command in commands:
        texts[f"agentchat {command}"] = _help(capsys, cli.main, [command])
    assert [name for name, text in texts.items() if "ichor" in text.lower()] == []
    flat = {name: " ".join(text.split()) for name, text in texts.items()}
    assert "backend run the bundled reference backend alone (the workflow/table REST service" in flat["agentchat"]
    assert "workflow/table REST service" in flat["agentchat serve"]
    for name in ("agentchat backend", "python -m backend"):
        assert "workflow and table-configuration REST service" in flat[name], flat[name]
        assert "caller's own token" in flat[name], flat[name]


def test_ingest_help_says_which_bucket_it_fills_without_bucket(capsys: pytest.CaptureFixture[str]) -> None:
    """``--bucket BUCKET  bucket to ingest into (created on the first document)`` left a
    newcomer guessing where ``agentchat ingest DIR`` alone puts the files."""
    text = " ".join(_help(capsys, cli.main, ["ingest"]).split())
    assert "--bucket BUCKET bucket to ingest into (default: default, " in text, text

class _Execed(Exception):
    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self.argv = argv


def _backend_port(monkeypatch: pytest.MonkeyPatch, *argv: str) -> int:
    """The port ``agentchat backend`` would exec ``python -m backend`` with."""

    def execv(path: str, args: list[str]) -> None:
        raise _Execed(args)

    def bind_any(host: str, port: int, **kwargs: Any) -> list[socket.socket]:
        """A free port, whatever was asked: only the port on the command line is looked at
        here, and another process on this machine may hold 8001."""
        sockets = real_bind(host, 0, **kwargs)
        bound.extend(sockets)
        return sockets

    bound: list[socket.socket] = []
    real_bind = serving.bind_sockets
    monkeypatch.setattr(cli.os, "execv", execv)
    monkeypatch.setattr(serving, "bind_sockets", bind_any)
    try:
        with pytest.raises(_Execed) as execed:
            cli.main(["backend", *argv])
    finally:
        # The sockets the backend would have listened on, closed through their objects: an
        # os.close of their numbers (as here before) left each object to close its number
        # again when the garbage collector freed it (the exception's frames hold it: that
        # can be minutes later, in another test of this worker), and by then the number
        # was another's - an event loop's epoll (OSError EBADF from its poll), a socket.
        for sock in bound:
            sock.close()
    args = execed.value.argv
    assert args[1:3] == ["-m", "backend"], args
    assert args.count("--fd") == len(bound) > 0, args  # each bound socket handed on
    return int(args[args.index("--port") + 1])


def test_agentchat_backend_on_a_taken_port_says_so_in_one_line_as_serve_does(tmp_path: Path) -> None:
    """``agentchat backend`` on a port in use printed uvicorn's ~40-line traceback (after the
    backend had started, migrated and seeded its database) and exit code 3; ``serve`` says
    it in one line with exit code 1. Now the backend's is that line too, and nothing starts."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        db = tmp_path / "solo.sqlite3"
        env = {**os.environ, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")}
        done = subprocess.run([sys.executable, "-m", "app.cli", "backend", "--port", str(port), "--db", str(db)],
                              capture_output=True, text=True, timeout=120, env=env)
        served = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", str(port), "--no-backend"],
                                capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.splitlines() == [
        f"agentchat backend: cannot listen on 127.0.0.1:{port}: the port is already in use "
        "(another agentchat? pick another with --port)"
    ]
    assert not db.exists()  # refused before the backend started
    assert served.returncode == 1 and served.stderr.splitlines() == [
        f"agentchat: cannot listen on 127.0.0.1:{port}: the port is already in use "
        "(another agentchat? pick another with --port or AGENT_PORT)"
    ]


def test_the_reference_backend_has_one_default_port(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``agentchat backend`` listened on 8081 while ``serve`` starts the backend on its own
    port plus one (8001): one default now, the same for ``agentchat backend``, ``python -m
    backend`` and ``serve``."""
    from backend.__main__ import DEFAULT_PORT

    monkeypatch.setenv("AGENT_DB_PATH", str(tmp_path / "agent.sqlite3"))
    monkeypatch.delenv("AGENT_PORT", raising=False)
    serve_default = Settings.from_env({}).port + 1  # serve: --backend-port, else its port + 1
    assert _backend_port(monkeypatch) == serve_default == DEFAULT_PORT == 8001
    monkeypatch.setenv("AGENT_PORT", "9000")
    assert _backend_port(monkeypatch) == 9001  # where `serve` on AGENT_PORT=9000 starts it
    assert _backend_port(monkeypatch, "--port", "7001") == 7001
    monkeypatch.setenv("AGENT_PORT", "0")  # any free port for the agent: no neighbour to take
    assert _backend_port(monkeypatch) == DEFAULT_PORT


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as done:
        cli.main(argv)
    assert done.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_command_groups_speak_in_commands_not_argparse_names(capsys: pytest.CaptureFixture[str]) -> None:
    """``agentchat docs`` said ``the following arguments are required: docs_command`` and
    ``agentchat keywords`` ``… kw_command`` (argparse's internal names). Every group, the
    top level included, now names its commands, and every group's ``--help`` says what it
    is for."""
    groups = {"": _commands(_help(capsys, cli.main, []))}
    for command in groups[""]:
        text = _help(capsys, cli.main, [command])
        if "\n  COMMAND\n" in text:
            groups[command] = _commands(text)
            description = text.split("\n\n", 2)[1]
            assert not description.startswith(("options:", "positional")), (command, text)
    assert set(groups) == {"", "buckets", "docs", "keywords"}
    assert groups["docs"] == ["list", "rm"] and groups["keywords"] == ["prune"]
    for group, commands in groups.items():
        wrong = _error(capsys, [*group.split(), "nosuch"])
        assert "_command" not in wrong and "argument COMMAND: invalid choice: 'nosuch'" in wrong, wrong
        if group == "buckets":  # `agentchat buckets` alone lists them
            continue
        prefix = f"agentchat {group}".strip()
        assert _error(capsys, group.split()) == f"{prefix}: error: choose one of: {', '.join(commands)}"



def test_a_missing_argument_names_only_what_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    """``agentchat buckets create`` alone said ``the following arguments are required: name,
    FIELD:TYPE`` (Python 3.11's argparse counts an empty ``nargs="*"`` as missing), while
    ``buckets create NAME`` with no field makes a bucket: only the name is required."""
    assert _error(capsys, ["buckets", "create"]) == (
        "agentchat buckets create: error: the following arguments are required: name"
    )

@pytest.mark.parametrize(("argv", "line"), [
    (["docs"], "agentchat docs: error: choose one of: list, rm"),
    (["keywords"], "agentchat keywords: error: choose one of: prune"),
])
def test_a_group_without_its_command_says_which_there_are(argv: list[str], line: str, tmp_path: Path) -> None:
    """As a person sees it: usage, one line naming the commands, exit code 2, no database touched."""
    env = {**os.environ, "AGENT_DB_PATH": str(tmp_path / "agent.sqlite3")}
    done = subprocess.run([sys.executable, "-m", "app.cli", *argv], capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"usage: agentchat {argv[0]} [-h] COMMAND ...", line]
    assert list(tmp_path.iterdir()) == []
