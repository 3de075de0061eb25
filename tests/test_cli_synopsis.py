"""The synopsis at the top of ``docs/cli.md`` shows every option each command takes.

It is the block a newcomer scans for a command's flags; ``ingest --rehash`` and
``backend --host`` / ``--db`` were missing from it (said only in the prose further down,
or only in ``--help``). The options are read from each command's own ``--help``, as a
person would, so a flag added later without its line here fails this test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [
    ("serve",), ("ingest",), ("docs", "list"), ("docs", "rm"), ("buckets", "create"), ("buckets", "rm"),
    ("keywords", "prune"), ("backend",), ("migrate-db",), ("compact",),
]
OPTION = re.compile(r"(?<![\w-])--[a-z][a-z-]*")


def _synopsis_lines() -> list[str]:
    text = (ROOT / "docs" / "cli.md").read_text()
    block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_synopsis_shows_every_option_of_the_command(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app.cli", *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    usage = done.stdout.split("\n\n", 1)[0]  # the usage paragraph: every option, once
    options = set(OPTION.findall(usage)) - {"--help"}
    lines = [line for line in _synopsis_lines() if line.startswith("agentchat " + " ".join(command) + " ")]
    assert lines, f"no synopsis line for agentchat {' '.join(command)}"
    shown = set(OPTION.findall(" ".join(line.split("#", 1)[0] for line in lines)))
    assert options - shown == set()
