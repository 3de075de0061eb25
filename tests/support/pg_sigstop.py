"""Freeze the test PostgreSQL the way a stuck server does: SIGSTOP its postmaster and
every backend, SIGCONT them all when the block ends, however it ends.

TCP stays up meanwhile — the kernel still completes handshakes and takes bytes in — so
neither keepalives nor a connect error tell the client anything: only a deadline of the
client's own does (``storage/postgres/statement_deadline.py``). ``tests/support/pg_freeze.py``
freezes one connection at a chosen point instead; this freezes the whole server.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import TestPostgres

#: A guard only: signals are delivered at once, this is how long a stop may take to show.
STOP_GUARD_S = 10.0


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            # pid (comm) state ppid ...: comm may hold spaces and parentheses
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _state(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@contextlib.contextmanager
def frozen(server: TestPostgres) -> Iterator[list[int]]:
    """SIGSTOP the server's postmaster, then its children (none can be forked once the
    postmaster is stopped); yield their ids; SIGCONT every one of them at the end."""
    postmaster = server.pid
    if postmaster is None:
        pytest.fail("freezing PostgreSQL needs the suite's own server (not AGENT_TEST_DATABASE_URL)", pytrace=False)
    stopped: list[int] = []
    try:
        os.kill(postmaster, signal.SIGSTOP)
        stopped.append(postmaster)
        while new := [c for c in _children(postmaster) if c not in stopped]:
            for child in new:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGSTOP)
                    stopped.append(child)
        deadline = time.monotonic() + STOP_GUARD_S
        # A backend that was exiting as the postmaster stopped stays a zombie ("Z"): it
        # runs nothing, and nobody can reap it until the postmaster goes on.
        while not all(_state(p) in ("T", "t", "Z", "X", "gone") for p in stopped):
            assert time.monotonic() < deadline, f"PostgreSQL's processes did not stop: {stopped}"
            time.sleep(0.01)
        yield stopped
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


__all__ = ["frozen"]
