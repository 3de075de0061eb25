"""The deadlines of the suite's own waits (``tests/support/deadline.py``): a wait that can
never end fails, naming what it awaited, instead of hanging the run."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest

from tests.support.deadline import reap, until, within


async def test_a_wait_that_never_ends_fails_naming_what_it_awaited() -> None:
    with pytest.raises(AssertionError, match="waiting for the gate that nobody opens"):
        await within(asyncio.Event().wait(), "the gate that nobody opens", 0.05)


async def test_a_wait_that_ends_returns_its_value_and_a_timeout_of_its_own_passes_through() -> None:
    async def answer() -> int:
        return 42

    async def own_timeout() -> None:
        raise TimeoutError("the awaited call's own timeout")

    assert await within(answer(), "the answer") == 42
    with pytest.raises(TimeoutError, match="own timeout"):
        await within(own_timeout(), "a call with its own timeout")


async def test_until_polls_sync_and_async_conditions_and_fails_naming_the_condition() -> None:
    seen: list[int] = []

    def counted() -> bool:
        seen.append(1)
        return len(seen) >= 3

    async def never() -> bool:
        return False

    async def hangs() -> bool:
        await asyncio.Event().wait()
        return True

    await until(counted, "three looks", step=0)
    assert len(seen) == 3
    with pytest.raises(AssertionError, match="waiting for a condition that never holds"):
        await until(never, "a condition that never holds", timeout=0.05)
    with pytest.raises(AssertionError, match="waiting for a check that never answers"):
        await until(hangs, "a check that never answers", timeout=0.05)


async def test_reap_ends_a_child_whose_own_child_keeps_its_pipes_where_a_bare_wait_would_hang() -> None:
    """A ``Process.wait()`` begun before the child exits also waits for its pipes to close:
    the child ends on SIGTERM, the ``sleep`` it started keeps its stdout open."""
    proc = await asyncio.create_subprocess_exec(
        "sh", "-c", "sleep 60 & echo $!; exec sleep 61",
        stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    grandchild = int(await within(proc.stdout.readline(), "the grandchild's pid"))
    bare_wait = asyncio.create_task(proc.wait())
    try:
        assert await reap(proc, "the shell") == -signal.SIGTERM
        # The hang reap() avoids: the child is gone, its wait() is not (the pipe is held).
        done, _ = await asyncio.wait({bare_wait}, timeout=0.2)
        assert not done
    finally:
        os.kill(grandchild, signal.SIGKILL)
    assert await within(bare_wait, "the pipe to close with the grandchild") == -signal.SIGTERM


async def test_reap_terminates_a_child_that_runs_on() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)", stdin=asyncio.subprocess.DEVNULL
    )
    assert await reap(proc, "a sleeping child") == -signal.SIGTERM


async def test_reap_without_terminate_lets_a_child_told_to_end_exit_by_itself() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(7)", stdin=asyncio.subprocess.PIPE
    )
    assert proc.stdin is not None
    proc.stdin.write(b"done\n")
    await proc.stdin.drain()
    assert await reap(proc, "a child told to end", terminate=False) == 7
