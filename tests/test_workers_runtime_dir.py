"""The workers' runtime directory in the system's temporary one is removed with its group.

Workers of ``agentchat serve --workers`` on one SQLite file meet in ``<db>.workers``, or,
where that path is too long for a Unix socket's address, in ``$TMPDIR/agentchat-<hash>``
(``storage.sqlite.runtime_dir``). Nothing removed that one: each worker took
its socket away but left its ``.metrics`` file or the leader's lock file, so every
``--workers`` start on a long path (every test's ``tmp_path``) left a directory in
``/tmp`` for good — 1,260 of them after a few days of test runs.

Through real processes and real signals:

- a SIGTERM stops the group and the directory is gone (and the supervisor's own);
- a group SIGKILLed leaves its files (nothing runs on the way out); the next group on
  the same file removes the dead workers' files (and the dead supervisor's own
  directory) when it starts, and the meeting place when it stops.

Each test's groups use a temporary directory of their own (``TMPDIR``): every
``--workers`` start on the machine - another test's, on another xdist worker - removes
the directories of supervisors that are gone, so in the shared one a killed group's
directory could be removed before this test looked at what it left.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.file_lock import process_alive
from storage.sqlite.runtime_dir import runtime_dir
from tests.support.procs import OFFLINE_SERVE_ENV, AgentServer, until

pytestmark = pytest.mark.slow

EXTRACTIVE = {**OFFLINE_SERVE_ENV, "AGENT_WORKERS": "2"}


@pytest.fixture
def own_tmpdir(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """A temporary directory only this test's groups use (module docstring): ``TMPDIR``
    for them, ``tempfile.gettempdir()`` here. Short, so a Unix socket's path in it fits."""
    private = tempfile.mkdtemp(prefix="acw-")
    monkeypatch.setattr(tempfile, "tempdir", private)
    try:
        yield {"TMPDIR": private}
    finally:
        shutil.rmtree(private, ignore_errors=True)


def long_db(tmp_path: Path) -> Path:
    """A database whose ``<db>.workers`` is too long for a socket: the workers meet in
    the system's temporary directory."""
    db = tmp_path / ("d" * 80) / "agent.sqlite3"
    db.parent.mkdir()
    directory = runtime_dir(db)
    assert directory.parent == Path(tempfile.gettempdir()) and directory.name.startswith("agentchat-"), directory
    return db


def pids_in(directory: Path, suffix: str) -> set[int]:
    """The pids named by ``<pid>-<token><suffix>`` files in ``directory``."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return set()
    return {int(name.split("-", 1)[0]) for name in names if name.endswith(suffix)}


def workers_dir(supervisor_pid: int) -> Path | None:
    """The supervisor's own directory (``AGENT_WORKERS_DIR``), read from a worker of it."""
    for child in Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split():
        for entry in Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
            if entry.startswith(b"AGENT_WORKERS_DIR="):
                return Path(entry.split(b"=", 1)[1].decode())
    return None


async def serving(group: AgentServer, directory: Path) -> set[int]:
    """Until both workers listen in ``directory`` (sockets and metrics) and one leads; their pids."""
    await group.wait_healthy()

    def both() -> bool:
        socks = pids_in(directory, ".sock")
        return len(socks) == 2 and pids_in(directory, ".metrics") >= socks and (directory / "leader.lock").exists()

    await until(both, f"two workers in {directory}", 60)
    return pids_in(directory, ".sock")


async def test_a_sigterm_stops_the_group_and_removes_its_directory(tmp_path: Path, own_tmpdir: dict[str, str]) -> None:
    db = long_db(tmp_path)
    directory = runtime_dir(db)
    group = AgentServer(tmp_path, EXTRACTIVE | own_tmpdir | {"AGENT_DB_PATH": str(db)}, name="group")
    group.start()
    assert group.pid is not None
    try:
        await serving(group, directory)
        own = workers_dir(group.pid)
        assert own is not None and own.is_dir()
        # Each worker's "serving on" line names it as a person counts (it said 0/2 and 1/2).
        await until(lambda: len(re.findall(r"\[worker \d+/2\]", group.text())) == 2, "both serving lines", 30)
        assert sorted(re.findall(r"\[worker (\d+/2)\]", group.text())) == ["1/2", "2/2"], group.tail(40)
        # The supervisor's lines about a worker name it the same way (they said 0 and 1:
        # a restarted "worker":0 beside its own "[worker 1/2]").
        named = re.findall(r'worker started[", {]*worker":"(\d+/2)"', group.text())  # JSON or text lines
        assert sorted(named) == ["1/2", "2/2"], group.tail(40)
        group.send(signal.SIGTERM)
        code = await group.wait_exit(90)
        assert code == 0, f"exit {code}:\n{group.tail(40)}"
        left = os.listdir(directory) if directory.exists() else None
        assert left is None, f"{directory} left behind with {left}:\n{group.tail(40)}"
        assert not own.exists()
    finally:
        group.close()


async def test_the_next_group_removes_a_killed_groups_files_and_then_the_directory(
    tmp_path: Path, own_tmpdir: dict[str, str]
) -> None:
    db = long_db(tmp_path)
    directory = runtime_dir(db)
    env = EXTRACTIVE | own_tmpdir | {"AGENT_DB_PATH": str(db)}
    killed = AgentServer(tmp_path, env, name="killed")
    killed.start()
    assert killed.pid is not None
    try:
        dead = await serving(killed, directory)
        own = workers_dir(killed.pid)
        assert own is not None and own.is_dir()
        for pid in (*dead, killed.pid):  # SIGKILL, the supervisor and both workers: nobody cleans up
            os.kill(pid, signal.SIGKILL)
        await killed.wait_exit(30)
        await until(lambda: not any(process_alive(p) for p in dead), "the killed workers gone", 30)
        assert pids_in(directory, ".sock") == dead and own.is_dir()  # what a killed group leaves

        again = AgentServer(tmp_path, env, port=killed.port, name="again")
        again.start()
        try:
            live = await serving(again, directory)
            assert not live & dead
            assert not (pids_in(directory, ".sock") | pids_in(directory, ".metrics")) & dead, os.listdir(directory)
            assert not own.exists()  # the killed supervisor's own directory
            again.send(signal.SIGTERM)
            code = await again.wait_exit(90)
            assert code == 0, f"exit {code}:\n{again.tail(40)}"
            assert not directory.exists(), os.listdir(directory)
        finally:
            again.close()
    finally:
        killed.close()
