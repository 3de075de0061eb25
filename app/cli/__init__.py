"""``agentchat``, the command line: ``serve``, ``ingest``, ``backend``, ``migrate-db`` and more.

The parser and dispatch (``commands``), ``serve`` (``serve``), the knowledge-base
commands (``kb``), the database move (``migrate``), ``keywords prune`` (``keywords``),
the reference backend (``reference_backend``), the CLI's database (``database``), a
knowledge base on its own storage (``kb_file``), uvicorn with a drain on SIGTERM
(``serving``) and garbage-collector settings (``gcpolicy``). ``python -m app.cli`` runs ``main``, as does
the console script.

``main`` imports the commands only once SIGTERM and Ctrl-C are answered (``interrupts``):
the import takes seconds on a loaded machine, and a signal then used to end the command
without a word (SIGTERM) or with a traceback (Ctrl-C).
"""

from __future__ import annotations

import os
import select
import sys

from app.cli.gcpolicy import tune_for_start
from app.cli.interrupts import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    command_name,
    early_sigterm,
    restore_sigterm,
)

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE (13), as a shell reports a tool SIGPIPE ended


def main(argv: list[str] | None = None) -> int:
    """``agentchat``: SIGTERM or Ctrl-C before the command handles them itself ends it
    with one line on stderr and exit code 143 or 130; output piped into a reader that
    stopped reading (``| head``) ends it quietly with 141."""
    previous = early_sigterm()
    args = sys.argv[1:] if argv is None else argv
    try:
        tune_for_start()
        without_httpx_cli()
        from app.cli.commands import main as run_command

        code = run_command(argv)
        sys.stdout.flush()  # here, not at exit, where a reader that left is a BrokenPipeError
        return code
    except BrokenPipeError:
        if not stdout_reader_gone():
            raise  # another pipe's or socket's (a child process, a server): an error like any other
        # `agentchat docs list | head`: the reader has what it wanted. Quiet, as a shell tool
        # killed by SIGPIPE; stdout onto /dev/null, or the exit's flush raises it again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Terminated:
        print(f"{command_name(args)}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"{command_name(args)}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        restore_sigterm(previous)


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has left: then a BrokenPipeError
    is stdout's, and ``main`` ends quietly. Any other - a write to a child process that
    exited, a socket a server closed - is the command's own failure and must not pass for
    a reader that stopped early. The kernel says so without writing: polled, the write end
    of a pipe with no reader is in error (POLLERR), a socket whose peer left hung up."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no stdout, or not a file
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def without_httpx_cli() -> None:
    """httpx, on import, loads its own command-line client (``httpx._main``: rich,
    pygments, click) whenever those are installed - as they are beside the dev tools -
    ~50 ms of CPU of every ``agentchat`` process start, for a client nothing here runs.
    A ``None`` in ``sys.modules`` makes that import fail, and httpx then defines its
    ``httpx.main`` as a stub that says the CLI extra is missing: httpx itself is the same.
    Only before httpx is first imported; never replaces a loaded module."""
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


__all__ = ["main", "stdout_reader_gone", "without_httpx_cli"]
