"""SIGTERM ends a one-off command the way Ctrl-C does.

``asyncio.run`` turns Ctrl-C into a cancel of the command's task, so ``agentchat ingest``
says what stands (its report, what was stored, what is built later) before it exits 130.
SIGTERM - what a container runtime, systemd or ``timeout`` sends - had the default
action instead: the process died at once, mid-batch, without a word. Here SIGTERM
cancels the same task, and ``main`` exits 143 (128 + 15, the shell's code for it).

Only the first SIGTERM: it puts the default action back, so a second one ends the
process at once. Cancelling again would interrupt the close the first one started
(the knowledge base's SQLite connections left open, whose threads the interpreter then
waits for at exit: a process that said "terminated" and never ended).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

#: The exit code of a command ended by SIGTERM (128 + the signal's number).
EXIT_TERMINATED = 128 + signal.SIGTERM


@dataclass(slots=True)
class Termination:
    """Whether SIGTERM came; ``main`` reads it to tell a SIGTERM from another cancel."""

    received: bool = False


async def cancelled_by_sigterm(work: Coroutine[Any, Any, int], termination: Termination) -> int:
    """Run ``work``; the first SIGTERM meanwhile cancels it (and a second one has the
    default action: the process ends at once). The cancel propagates out of
    ``asyncio.run`` with ``termination.received`` set."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_sigterm() -> None:
        termination.received = True
        loop.remove_signal_handler(signal.SIGTERM)  # back to the default action
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        return await work
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


__all__ = ["EXIT_TERMINATED", "Termination", "cancelled_by_sigterm"]
