"""``tidy_runtime_dir`` (``storage/sqlite/runtime_dir.py``): what it removes from the workers'
meeting place and when it removes the directory itself. Through the tests of real
``serve --workers`` groups in ``tests/test_workers_runtime_dir.py``; here each rule alone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from storage.file_lock import try_lock_file
from storage.sqlite.runtime_dir import LEADER_LOCK, make_runtime_dir, tidy_runtime_dir


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def meeting(tmp_path: Path, *names: str) -> Path:
    directory = tmp_path / "agent.sqlite3.workers"
    make_runtime_dir(directory)
    for name in names:
        (directory / name).touch()
    return directory


def test_dead_workers_files_and_an_unheld_leader_lock_go_with_the_directory(tmp_path: Path) -> None:
    dead = dead_pid()
    directory = meeting(tmp_path, f"{dead}-0a1b2c3d.sock", f"{dead}-0a1b2c3e.metrics", LEADER_LOCK)
    assert tidy_runtime_dir(directory)
    assert not directory.exists()
    assert tidy_runtime_dir(directory)  # already gone: nothing to do


def test_a_live_workers_files_keep_the_directory_and_the_dead_ones_go(tmp_path: Path) -> None:
    dead, live = dead_pid(), os.getpid()
    directory = meeting(tmp_path, f"{dead}-0a1b2c3d.sock", f"{live}-0a1b2c3e.sock", f"{live}-0a1b2c3f.metrics",
                        LEADER_LOCK)  # fmt: skip
    assert not tidy_runtime_dir(directory)
    assert sorted(os.listdir(directory)) == sorted([f"{live}-0a1b2c3e.sock", f"{live}-0a1b2c3f.metrics", LEADER_LOCK])


def test_a_held_leader_lock_keeps_the_directory(tmp_path: Path) -> None:
    """A worker holds the lock whose sockets are not there (yet, or any more)."""
    directory = meeting(tmp_path)
    fd = try_lock_file(directory / LEADER_LOCK)
    assert fd is not None
    try:
        assert not tidy_runtime_dir(directory)
        assert os.listdir(directory) == [LEADER_LOCK]
    finally:
        os.close(fd)
    assert tidy_runtime_dir(directory)


def test_a_file_not_of_the_workers_is_left_and_keeps_the_directory(tmp_path: Path) -> None:
    directory = meeting(tmp_path, "notes.txt", LEADER_LOCK)
    assert not tidy_runtime_dir(directory)
    assert sorted(os.listdir(directory)) == sorted(["notes.txt", LEADER_LOCK])


def test_a_socket_someone_listens_on_stays_whatever_its_pid_reads_here(tmp_path: Path) -> None:
    """A worker of another pid namespace (containers sharing the temporary directory):
    its pid is no process here, but it listens. A socket nobody listens on goes."""
    dead = dead_pid()
    directory = tmp_path / "w"
    make_runtime_dir(directory)
    listening, left = directory / f"{dead}-0a1b2c3d.sock", directory / f"{dead}-0a1b2c3e.metrics"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as closed:  # fmt: skip
        server.bind(str(listening))
        server.listen(1)
        closed.bind(str(left))  # bound, then its process ended: nobody listens
        closed.close()
        assert not tidy_runtime_dir(directory)
        assert os.listdir(directory) == [listening.name]
    assert tidy_runtime_dir(directory)  # its listener gone too
    assert not directory.exists()
