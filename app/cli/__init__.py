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

import sys

from app.cli.interrupts import (
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    Terminated,
    command_name,
    early_sigterm,
    restore_sigterm,
)


def main(argv: list[str] | None = None) -> int:
    """``agentchat``: SIGTERM or Ctrl-C before the command handles them itself ends it
    with one line on stderr and exit code 143 or 130."""
    previous = early_sigterm()
    args = sys.argv[1:] if argv is None else argv
    try:
        from app.cli.commands import main as run_command

        return run_command(argv)
    except Terminated:
        print(f"{command_name(args)}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"{command_name(args)}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        restore_sigterm(previous)


__all__ = ["main"]
