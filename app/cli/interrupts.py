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

Before that handler is in place - the seconds ``agentchat`` spends importing the service
on a loaded machine, parsing, reading settings - SIGTERM had the default action and the
command died without a word, and Ctrl-C printed a traceback. ``early_sigterm`` is
installed first thing (``app.cli.main``, before the heavy imports): the first SIGTERM
raises ``Terminated`` (and puts the default action back, as above), which ``main`` turns
into one line and exit 143 as it does ``KeyboardInterrupt`` into one line and 130. The
command's own handling (the loop's handler here, ``serve``'s drain) replaces it once set.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from types import FrameType
from typing import Any

#: The exit code of a command ended by SIGTERM (128 + the signal's number).
EXIT_TERMINATED = 128 + signal.SIGTERM
#: The exit code of a command ended by Ctrl-C (128 + SIGINT's number, the shell's code).
EXIT_INTERRUPTED = 128 + signal.SIGINT

#: What ``signal.signal`` returns and takes: a handler, ``SIG_DFL``/``SIG_IGN``, or ``None``.
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Terminated(BaseException):
    """SIGTERM came before the command's own handling was in place (``early_sigterm``).
    A ``BaseException``, as ``KeyboardInterrupt`` is: no ``except Exception`` takes it."""


def _terminated(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
    raise Terminated


def early_sigterm() -> Handler:
    """Make the first SIGTERM raise ``Terminated`` from here on; the handler it replaces
    (``None`` off the main thread, where no handler can be installed: nothing changes)."""
    try:
        return signal.signal(signal.SIGTERM, _terminated)
    except ValueError:  # not the main thread
        return None


def end_early_sigterm() -> None:
    """A command takes over: ``early_sigterm``'s handler must not stay for its run, nor
    be put back as "the previous handler" by one that restores what it replaced.

    Raised from a signal handler, ``Terminated`` lands wherever the main thread is; inside
    one of the event loop's callbacks, asyncio logs it ("Exception in callback") and goes
    on, the future that callback was to resolve never is, and a command without handling
    of its own waited for ever (the review of 43e264c: ``keywords prune``, ``compact``).
    So every command replaces it where its own handling starts, never earlier (a SIGTERM
    before that would again end it without a word): the one-off commands when
    ``cancelled_by_sigterm`` installs the loop's handler, ``serve`` with its drain, the
    ``--workers`` supervisor with its own (here, first), ``backend`` by ``exec``."""
    try:
        if signal.getsignal(signal.SIGTERM) is _terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except ValueError:  # not the main thread: ``early_sigterm`` installed nothing
        pass


def restore_sigterm(previous: Handler) -> None:
    """Put back what ``early_sigterm`` replaced (a test calling ``main`` in-process)."""
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def command_name(argv: list[str]) -> str:
    """``agentchat <command>`` as far as ``argv`` says, for the one line (before parsing)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return f"agentchat {command}" if command else "agentchat"


@dataclass(slots=True)
class Termination:
    """Whether SIGTERM came; ``main`` reads it to tell a SIGTERM from another cancel."""

    received: bool = False


async def cancelled_by_sigterm(work: Coroutine[Any, Any, int], termination: Termination) -> int:
    """Run ``work``; the first SIGTERM meanwhile cancels it (and a second one has the
    default action: the process ends at once). The cancel propagates out of
    ``asyncio.run`` with ``termination.received`` set."""
    import asyncio  # here: ``app.cli.main`` imports this module before anything heavy

    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_sigterm() -> None:
        termination.received = True
        loop.remove_signal_handler(signal.SIGTERM)  # back to the default action
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)  # replaces ``early_sigterm``'s
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread, or no signals here
        return await work
    try:
        return await work
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


__all__ = [
    "EXIT_INTERRUPTED",
    "EXIT_TERMINATED",
    "Terminated",
    "Termination",
    "cancelled_by_sigterm",
    "command_name",
    "early_sigterm",
    "end_early_sigterm",
    "restore_sigterm",
]
