"""Sub-command groups (``agentchat docs list|rm``, ``keywords prune``, ``buckets …``) that
speak to a person, not in argparse's internal names.

Why: argparse names a missing or wrong sub-command by its ``dest``, so ``agentchat docs``
said ``the following arguments are required: docs_command`` and ``agentchat keywords``
``… kw_command``. A group made here shows ``COMMAND`` in its usage and an error, lists
its commands under a title with a description in ``--help``, and a missing command is
``choose one of: list, rm``. argparse itself cannot say that (its required-argument
message takes the metavar), so the group is optional to argparse and the command line
is checked after parsing (``check_commands``): a group left without its command holds
a ``MissingCommand`` that knows its parser and its choices.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

#: What a group's commands are called in its usage, its ``--help`` and its errors.
COMMAND_METAVAR = "COMMAND"


@dataclass(frozen=True, slots=True)
class MissingCommand:
    """The value of a group's ``dest`` until one of its commands is given."""

    parser: argparse.ArgumentParser
    sub: Any  # argparse's ``_SubParsersAction``: its ``choices`` are the commands, in order

    def fail(self) -> None:
        """``usage: …`` and ``error: choose one of: list, rm`` on stderr, exit code 2."""
        self.parser.error(f"choose one of: {', '.join(self.sub.choices)}")

    def __bool__(self) -> bool:  # a missing command reads as none given (``if args.x:``)
        return False


def command_group(
    parser: argparse.ArgumentParser, *, dest: str, description: str | None = None, required: bool = True
) -> Any:
    """The sub-parsers of ``parser`` as a group of commands: ``COMMAND`` in its usage and
    errors, its commands under ``commands:`` (after ``description``) in ``--help``. A
    ``required`` group without its command fails in ``check_commands`` (``choose one of:
    …``); an optional one leaves ``dest`` ``None``."""
    sub = parser.add_subparsers(
        dest=dest, title="commands", description=description, metavar=COMMAND_METAVAR, required=False
    )
    parser.set_defaults(**{dest: MissingCommand(parser, sub) if required else None})
    return sub


def check_commands(args: argparse.Namespace) -> None:
    """Fail, as argparse would (usage, one line, exit code 2), for the first group on the
    command line that was left without its command."""
    for value in vars(args).values():
        if isinstance(value, MissingCommand):
            value.fail()


__all__ = ["COMMAND_METAVAR", "MissingCommand", "check_commands", "command_group"]
