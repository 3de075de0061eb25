"""Deadlines for the waits of a test: a wait that can never end fails, naming what it awaited.

A test that waits for something that never comes (a gate a server never reaches, a line
a child never prints, a condition never met) must not hang the run: pytest-timeout ends
it after 300 s with stacks, but a clear failure long before that says *what* was awaited.
The deadlines are guards only — generous, never a measure of speed; every wait still
ends as soon as its condition holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: The default guard for a wait in a test (a loaded 2-core CI machine included).
GUARD_S = 60.0


async def within(awaitable: Awaitable[T], what: str, timeout: float = GUARD_S) -> T:
    """``await awaitable``, failing the test if it has not finished after ``timeout`` s.

    A ``TimeoutError`` raised by the awaitable itself passes through unchanged; only the
    guard's own expiry becomes the ``AssertionError`` that names ``what``."""
    guard = asyncio.timeout(timeout)
    try:
        async with guard:
            return await awaitable
    except TimeoutError:
        if guard.expired():
            raise AssertionError(f"timed out after {timeout} s waiting for {what}") from None
        raise


async def until(
    predicate: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = GUARD_S, step: float = 0.01
) -> None:
    """Poll ``predicate`` (sync or async) every ``step`` s until it holds; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        held = predicate()
        if inspect.isawaitable(held):  # a check that itself never answers fails as well
            held = await within(held, what, max(deadline - time.monotonic(), step))
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(step)


async def reap(
    proc: asyncio.subprocess.Process, what: str, *, grace: float = 10, terminate: bool = True, killed_s: float = 10
) -> int:
    """End a child started with ``asyncio.create_subprocess_exec``; its exit code.

    SIGTERM (unless ``terminate`` is false: a child told to end some other way) and
    ``grace`` s to exit, then SIGKILL and ``killed_s`` more; a child that outlives that
    fails the test, naming ``what``. It watches the exit code rather
    than awaiting ``Process.wait()``: a ``wait()`` begun before the child exits also waits
    for the child's pipes to close, for ever when a grandchild (a reloader's server,
    a browser's helpers) keeps them open."""
    if proc.returncode is None:
        if terminate:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        await _exited(proc, grace)
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        if not await _exited(proc, killed_s):
            raise AssertionError(f"{what} (pid {proc.pid}) did not end within {killed_s} s of SIGKILL")
    assert proc.returncode is not None
    return proc.returncode


async def _exited(proc: asyncio.subprocess.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while proc.returncode is None and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return proc.returncode is not None


__all__ = ["GUARD_S", "reap", "until", "within"]
