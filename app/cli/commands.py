"""``agentchat``'s parser and dispatch: every command's options, then the command.

Each command lives in a module of its own with its options beside it: ``serve``
(``app/cli/serve.py``), the knowledge-base commands ``ingest``, ``buckets`` and ``docs``
(``app/cli/kb.py``), ``migrate-db`` (``app/cli/migrate.py``), ``compact``
(``app/cli/compact.py``), ``keywords prune`` (``app/cli/keywords.py``) and ``backend``
(``app/cli/reference_backend.py``). Those modules import only what their parsers need at
the top (the standard library, ``app.cli``'s own small helpers and ``app.config_env``'s
bounds), and the rest - asyncio, the settings, logging's formatters, the storage, the
knowledge base, uvicorn and the app - when their command runs: ``agentchat --help`` or
``agentchat ingest --help`` then costs a fraction of the import of a command that runs
(``tests/test_cli_startup_imports.py`` names what none of them imports).

The reference backend (``backend/``) always runs in its own process (``python -m backend``):
the agent talks to it over HTTP only, as it would to the real one, and never imports it.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from app.cli.compact import add_compact_command, run_compact
from app.cli.groups import check_commands, command_group
from app.cli.interrupts import EXIT_TERMINATED, Termination, cancelled_by_sigterm
from app.cli.kb import add_kb_commands, run_kb_command
from app.cli.keywords import add_keywords_command, run_prune_keywords
from app.cli.migrate import add_migrate_command, run_migrate_db
from app.cli.reference_backend import add_backend_command, run_backend
from app.cli.serve import add_serve_command, run_serve

if TYPE_CHECKING:
    from app.config import Settings


def _settings() -> Settings:
    """The settings from the environment, imported once a command runs: the settings'
    module and its checks are no part of building the parser (``--help``)."""
    from app.config import ConfigError, Settings

    try:
        return Settings.from_env()
    except ConfigError as exc:
        print(f"agentchat: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentchat")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``, with the installed version looked up only when it is asked for:
    argparse's own action takes the string when the parser is built, and the lookup
    (``importlib.metadata`` and a scan of the installed distributions) cost every
    command, every ``serve`` included, ~25 ms of CPU. Prints what argparse's would."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:  # fmt: skip
        parser._print_message(f"agentchat {_version()}\n", sys.stdout)
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentchat", description="Streaming agent-chat service.")
    parser.add_argument("--version", action=_VersionAction)
    sub = command_group(parser, dest="command",
                        description="agentchat COMMAND --help says more of each; docs/cli.md has them all")
    add_serve_command(sub)
    add_kb_commands(sub)
    add_migrate_command(sub)
    add_compact_command(sub)
    add_keywords_command(sub)
    add_backend_command(sub)

    args = parser.parse_args(argv)
    check_commands(args)  # a group without its command: `choose one of: list, rm`, exit code 2
    # numpy work (query embeddings, vector scans) runs in worker threads beside the event
    # loop; multi-threaded BLAS on top of that fights the loop for the cores. Must be set
    # before numpy is first imported, which nothing above has done.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # JSON lines for the service (log shippers), readable text for the other commands
    # (progress bars, one-off output); AGENT_LOG_FORMAT chooses for all of them.
    from app.ops.logs import configure_logging  # its JSON formatter: not for --help

    try:
        args.log_format = configure_logging(default_format="json" if args.command == "serve" else "text")
    except ValueError as exc:
        print(f"agentchat: {exc}", file=sys.stderr)
        return 2
    if args.command == "serve":
        try:
            return run_serve(args, _settings())
        except KeyboardInterrupt:
            return 0
    if args.command == "backend":
        return run_backend(args, _settings())
    if args.command == "keywords":
        return _one_off(args, run_prune_keywords(args, _settings()))
    if args.command == "migrate-db":
        return _one_off(args, run_migrate_db(args, _settings()))
    if args.command == "compact":
        return _one_off(args, run_compact(args, _settings()))
    return _one_off(args, run_kb_command(args, _settings()))


def _one_off(args: argparse.Namespace, work: Coroutine[Any, Any, int]) -> int:
    """Run a one-off command: Ctrl-C or SIGTERM cancel it (its ``finally`` blocks close
    its storage), then one line on stderr and exit 130 or 143."""
    import asyncio  # a command that runs, not the parser: ``--help`` never needs it

    termination = Termination()
    try:
        return asyncio.run(cancelled_by_sigterm(work, termination))
    except KeyboardInterrupt:  # Ctrl-C: ``ingest`` has said what stands (``app/cli/kb.py``)
        print(f"agentchat {args.command}: interrupted", file=sys.stderr)
        return 130
    except asyncio.CancelledError:  # SIGTERM, the same way (``app/cli/interrupts.py``)
        if not termination.received:
            raise
        print(f"agentchat {args.command}: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED


if __name__ == "__main__":
    raise SystemExit(main())
