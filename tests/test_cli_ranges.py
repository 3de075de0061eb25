"""Every number option of ``agentchat`` is range-checked by argparse (``app/cli/ranges.py``):
one ``error:`` line and exit 2, before anything starts, through the real command line.

The newcomer's walkthrough: ``serve --port 99999`` served on 34463 (the port modulo
65536) while ``AGENT_PORT=99999`` was refused, ``serve --backend-port 70000`` and
``backend --port 70001`` ended in tracebacks (the first saying "already in use?"),
``serve --grace -5`` was taken. An option that sets a setting has that setting's range
(``app.config_env``'s bounds), checked here against ``Settings.from_env`` too.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from app.config import ConfigError, Settings
from tests.support.deadline import reap, within
from tests.support.procs import REPO, child_env

CASES = [
    (["serve", "--port", "99999"], "agentchat serve: error: argument --port: must be between 0 and 65535"),
    (["serve", "--backend-port", "70000"],
     "agentchat serve: error: argument --backend-port: must be between 1 and 65535"),
    (["serve", "--grace", "-5"], "agentchat serve: error: argument --grace: must be between 0 and 3600"),
    (["serve", "--grace", "nan"], "agentchat serve: error: argument --grace: must be between 0 and 3600"),
    (["serve", "--workers", "0"], "agentchat serve: error: argument --workers: must be between 1 and 256"),
    (["serve", "--port", "eighty"], "agentchat serve: error: argument --port: not an integer: 'eighty'"),
    (["backend", "--port", "70001"], "agentchat backend: error: argument --port: must be between 1 and 65535"),
    (["compact", "--run-events-days", "-1"],
     "agentchat compact: error: argument --run-events-days: must be between 0 and 36500"),
    (["compact", "--conversation-days", "40000"],
     "agentchat compact: error: argument --conversation-days: must be between 0 and 36500"),
    (["keywords", "prune", "--min-usage", "2", "--older-than", "-1"],
     "agentchat keywords prune: error: argument --older-than: must be between 0 and 36500"),
    (["keywords", "prune", "--min-usage", "0", "--older-than", "30"],
     "agentchat keywords prune: error: argument --min-usage: must be between 1 and 1000000"),
    (["migrate-db", "--to", "postgresql://nowhere/x", "--batch-rows", "0"],
     "agentchat migrate-db: error: argument --batch-rows: must be between 1 and 1000000"),
]  # fmt: skip


async def agentchat(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    """``python -m app.cli ARGV``: exit code, stdout, stderr (a command that does not end
    within the guard - one that went on to serve - fails the test)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app.cli", *argv, cwd=REPO,
        env=child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        out, err = await within(proc.communicate(), f"agentchat {' '.join(argv)}", 60)
    finally:
        await reap(proc, "agentchat", grace=5)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize(("argv", "line"), CASES, ids=[" ".join(a) for a, _ in CASES])
async def test_a_number_out_of_range_is_one_error_line_and_exit_2(tmp_path: Path, argv: list[str], line: str) -> None:
    code, out, err = await agentchat(tmp_path, *argv)
    assert code == 2, (code, err)
    assert err.splitlines()[-1] == line, err
    assert "Traceback" not in err and out == ""
    assert not (tmp_path / "agent.db").exists()  # nothing started


async def test_the_last_port_leaves_no_port_for_the_reference_backend(tmp_path: Path) -> None:
    """``serve --port 65535`` would put the reference backend on 65536 (port + 1): one
    line naming the ways out, exit 2, instead of a traceback."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", 65535))
        except OSError:
            pytest.skip("port 65535 is taken on this machine")
    code, out, err = await agentchat(tmp_path, "serve", "--host", "127.0.0.1", "--port", "65535")
    assert code == 2, (code, err)
    assert err.splitlines() == [
        "agentchat: the reference backend's port would be 65536; "
        "pick one with --backend-port, or --no-backend or AGENT_BACKEND_URL"
    ], err
    assert out == ""


@pytest.mark.parametrize(
    ("variable", "inside", "outside"),
    [
        ("AGENT_PORT", "65535", "65536"),
        ("AGENT_SHUTDOWN_GRACE_S", "3600", "3600.5"),
        ("AGENT_WORKERS", "256", "257"),
        ("AGENT_KEYWORD_MIN_USAGE", "1", "0"),
        ("AGENT_KEYWORD_MAX_AGE_DAYS", "36500", "36501"),
        ("AGENT_RUN_EVENTS_RETENTION_DAYS", "0", "-1"),
    ],
)
def test_the_options_ranges_are_the_settings_ranges(tmp_path: Path, variable: str, inside: str, outside: str) -> None:
    """The variable behind each option accepts and refuses at the same edges the option does."""
    env = {"AGENT_DB_PATH": str(tmp_path / "agent.db")}
    Settings.from_env({**env, variable: inside})
    with pytest.raises(ConfigError, match=variable):
        Settings.from_env({**env, variable: outside})
