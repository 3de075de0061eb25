"""Which supervisors' directories (``agentchat-workers-<pid>-…``, ``app/cli/workers.py``)
the next ``serve --workers`` removes from the system's temporary directory.

A directory is its supervisor's for as long as that process holds the lock on the
directory's ``supervisor.lock``: not for as long as a process with the pid in its name
runs. A temporary directory shared between containers (a pod's shared volume, a
bind-mounted ``/tmp``) holds the directories of supervisors in other pid namespaces,
whose pid names nothing here (seen: a supervisor started under ``unshare --pid``
removed the live directory of a supervisor outside), or a live process of its own (pid
1 in every container: a killed container's directory stayed for good)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from app.cli.workers import RUNTIME_PREFIX, remove_dead_runtime_directories, runtime_directory

#: The file a running supervisor holds locked (``app.cli.workers.OWNER_LOCK``).
OWNER_LOCK = "supervisor.lock"


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system's temporary directory, for these tests only (the machine's holds
    other sessions' supervisors)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def named_for(directory: Path, pid: int) -> Path:
    """``directory`` as a supervisor whose pid reads ``pid`` here would have named it."""
    suffix = directory.name[len(RUNTIME_PREFIX):].split("-", 1)[1]
    renamed = directory.with_name(f"{RUNTIME_PREFIX}{pid}-{suffix}")
    os.rename(directory, renamed)
    return renamed


def test_a_live_supervisors_directory_stays_whatever_its_pid_reads_here(temp_root: Path) -> None:
    """A supervisor of another pid namespace: its pid is no process here."""
    with runtime_directory() as directory:
        elsewhere = named_for(directory, dead_pid())
        try:
            remove_dead_runtime_directories(temp_root)
            assert elsewhere.is_dir(), "a running supervisor's directory was removed"
        finally:
            os.rename(elsewhere, directory)
    assert not directory.exists()  # and its own supervisor removes it at the end


def test_a_dead_supervisors_directory_goes_though_its_pid_runs_here(temp_root: Path) -> None:
    """Pid 1 of a killed container, or a pid reused: nobody holds the lock any more."""
    directory = temp_root / f"{RUNTIME_PREFIX}{os.getpid()}-abcd1234"
    directory.mkdir(mode=0o700)
    (directory / OWNER_LOCK).touch(mode=0o600)
    (directory / "123-0a1b2c3d.metrics").touch()
    remove_dead_runtime_directories(temp_root)
    assert not directory.exists()


def test_the_directory_is_never_seen_unlocked(temp_root: Path) -> None:
    """Made and locked under a hidden name the sweep does not look at, then renamed."""
    with runtime_directory() as directory:
        assert directory.name.startswith(f"{RUNTIME_PREFIX}{os.getpid()}-")
        assert [p.name for p in temp_root.iterdir()] == [directory.name]
        fd = os.open(directory / OWNER_LOCK, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)


def test_a_directory_without_the_lock_file_is_judged_by_its_pid(temp_root: Path) -> None:
    """Made before supervisors locked theirs: as its name's pid says."""
    dead = temp_root / f"{RUNTIME_PREFIX}{dead_pid()}-abcd1234"
    live = temp_root / f"{RUNTIME_PREFIX}{os.getpid()}-abcd1235"
    for directory in (dead, live):
        directory.mkdir(mode=0o700)
    remove_dead_runtime_directories(temp_root)
    assert not dead.exists() and live.is_dir()
