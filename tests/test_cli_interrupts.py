"""SIGTERM ends a one-off command as Ctrl-C does (``app/cli/interrupts.py``), through a
real process and real signals. The whole ``agentchat ingest`` case is in
``tests/test_cli_kb_process.py``; here, what the second SIGTERM does."""

from __future__ import annotations

import asyncio
import signal
import sys
import textwrap
from pathlib import Path

from tests.support.deadline import reap, within
from tests.support.procs import REPO, child_env

COMMAND = textwrap.dedent(
    """
    import asyncio, sys, threading
    from app.cli.interrupts import EXIT_TERMINATED, Termination, cancelled_by_sigterm

    async def work() -> int:
        try:
            print("running", flush=True)  # the SIGTERM handler is in place by now
            await asyncio.sleep(600)
        except asyncio.CancelledError:
            # The close the first SIGTERM starts: while it runs, a thread the interpreter
            # waits for at exit is open (aiosqlite's connection threads are such), and
            # only the close's end lets it go.
            release = threading.Event()
            threading.Thread(target=release.wait, daemon=False).start()
            print("closing", flush=True)
            await asyncio.sleep(600)
            release.set()
            raise
        return 0

    termination = Termination()
    try:
        sys.exit(asyncio.run(cancelled_by_sigterm(work(), termination)))
    except asyncio.CancelledError:
        sys.exit(EXIT_TERMINATED if termination.received else 1)
    """
)


async def test_a_second_sigterm_during_the_close_ends_the_process_at_once(tmp_path: Path) -> None:
    """The first SIGTERM starts the command's close; a second one ends the process then
    and there (the default action). It used to cancel the close too, leaving a thread
    the interpreter waited for at exit: a process that never ended."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", COMMAND, cwd=REPO, env=child_env({}),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        line = await within(proc.stdout.readline(), "the command running", 60)
        assert line.strip() == b"running", line
        proc.send_signal(signal.SIGTERM)
        line = await within(proc.stdout.readline(), "the close under way", 60)
        assert line.strip() == b"closing", line
        proc.send_signal(signal.SIGTERM)
        code = await within(proc.wait(), "the process after its second SIGTERM", 30)
        assert code == -signal.SIGTERM, code
    finally:
        await reap(proc, "the command", grace=5)
