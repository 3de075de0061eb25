"""A pytest plugin: says at the end of a session which ``agentchat-*`` directories it left
in the system's temporary directory.

``serve --workers`` on a long database path (every test's ``tmp_path``) meets in
``$TMPDIR/agentchat-<hash>`` (``storage/sqlite/runtime_dir.py``), its supervisor in
``$TMPDIR/agentchat-workers-<pid>-…`` (``app/cli/workers.py``); both are removed when
the group stops (or by the next group when it was killed, and by the harness's
``AgentServer.close``). 1,260 such directories had piled up in ``/tmp`` before anyone
noticed: this makes a new leak visible in the run that causes it.

A warning in the summary, not a failure: other sessions on the machine (a benchmark,
another checkout's tests) may make such directories at the same time, so a directory
that appeared meanwhile is not proven to be this session's. Only the controller reports
(under pytest-xdist the workers share its temporary directory).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

PATTERN = "agentchat-*"
_BEFORE = pytest.StashKey[frozenset[str]]()


def _present() -> frozenset[str]:
    return frozenset(p.name for p in Path(tempfile.gettempdir()).glob(PATTERN))


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        config.stash[_BEFORE] = _present()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    before = config.stash.get(_BEFORE, None)
    if before is None:
        return
    left = sorted(_present() - before)
    if left:
        terminalreporter.write_sep("=", "agentchat runtime directories left behind", yellow=True)
        what = "1 directory" if len(left) == 1 else f"{len(left)} directories"
        terminalreporter.write_line(
            f"{what} {PATTERN} appeared in {tempfile.gettempdir()} during this session and stayed "
            f"(another session running meanwhile may have made some): "
            f"{', '.join(left[:20])}{' …' if len(left) > 20 else ''}"
        )
