"""``agentchat``'s quiet exit 141 is for stdout's reader that left (``agentchat docs list |
head``, ``tests/test_cli_kb_process.py``), and for nothing else.

``main`` caught every ``BrokenPipeError`` the command raised: one from a pipe to a child
process that exited, or a socket a server closed, ended the command with exit 141 and not
a word, as if a reader had stopped early - a failure passed off as success-by-SIGPIPE.
Through real processes: the command is ``main``'s own dispatch, and what it writes to is a
real pipe whose reader is gone.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.support.deadline import reap, within
from tests.support.procs import REPO, child_env

#: A command that writes to a pipe whose reader is gone (a child process that exited):
#: the ``BrokenPipeError`` is that pipe's, not stdout's.
COMMAND = """
import os, sys
import app.cli, app.cli.commands

def command(argv):
    print("working")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the child that read it exited
    os.write(write_end, b"input for the child")
    return 0

app.cli.commands.main = command
sys.exit(app.cli.main([]))
"""


async def run(stdout: int, tmp_path: Path) -> tuple[int, str]:
    env = child_env({"AGENT_DB_PATH": str(tmp_path / "agent.db")})
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COMMAND, cwd=REPO, env=env, stdout=stdout, stderr=asyncio.subprocess.PIPE
    )
    try:
        _, err = await within(proc.communicate(), "the command")
    finally:
        await reap(proc, "the command", grace=5)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_broken_pipe_that_is_not_stdouts_is_an_error(tmp_path: Path) -> None:
    """stdout is read to the end: the command's own broken pipe is a failure with its
    traceback (exit 1), not the quiet 141 of a reader that left."""
    read_end, write_end = os.pipe()
    try:
        code, err = await run(write_end, tmp_path)
    finally:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as reader:
            out = reader.read().decode()
    assert code == 1, (code, err)
    assert "BrokenPipeError" in err and ", in command" in err, err  # raised where the command wrote
    assert out == "working\n"


async def test_stdouts_own_broken_pipe_is_still_quiet(tmp_path: Path) -> None:
    """The same command with stdout's reader gone as well: the reader stopped early, so
    exit 141 and nothing on stderr, as before."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        code, err = await run(write_end, tmp_path)
    finally:
        os.close(write_end)
    assert (code, err) == (141, "")
