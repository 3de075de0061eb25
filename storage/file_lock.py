"""An exclusive ``flock`` on a lock file, tried without waiting: the one way this project
takes a lock of processes on one machine.

Two locks use it: the SQLite file's writer lock (``storage.sqlite.writer_lock``: one
writer group per file) and the background jobs' leader among the workers on one file
(``app.ops.leader.FileLock``, in the workers' runtime directory). Both need the same
four things, which is why they share this rather than each writing the ``open``/``flock``
dance:

* **never blocks**: ``LOCK_NB``, so it is safe on an event loop; a lock another open file
  holds is ``None`` at once;
* **dies with its holder**: an ``flock`` belongs to the open file, so the kernel releases
  it when the last descriptor of it closes — SIGKILL included, no stale lock to clean;
* **stays in its process**: the descriptor is opened close-on-exec (PEP 446), so no
  child (an MCP stdio server, ``subprocess``) keeps the lock after the holder is gone; a
  holder that means to hand it on (``serve --workers``) passes it explicitly;
* **on the file the path names**: a lock file removed or replaced between our ``open``
  and our ``flock`` (its holder gone, a clean-up) would be locked by us and by whoever
  opens the path next — so the lock only counts when the path still names the file that
  was locked (same device and inode), else it is tried again on the new file.

The holder's pid is written into the file (``write_pid``) only to name it in a waiting
process's message. Files named after the process that made them (the workers' sockets,
the supervisor's directory) are judged by ``process_alive``: a dead one's can go.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


def try_lock_file(path: Path) -> int | None:
    """Open (create, mode 0600) ``path`` and take an exclusive ``flock`` on it without
    waiting: the open, non-inheritable descriptor that holds the lock, or ``None`` when
    another open file holds it. The caller closes the descriptor to release it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # not inheritable (PEP 446)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        if names(path, fd):
            return fd
        # The file was removed or replaced between our open and our lock: a lock on it
        # excludes nobody who opens the path now.
        os.close(fd)


def names(path: Path, fd: int) -> bool:
    """Whether ``path`` is the file open on ``fd`` (same device and inode)."""
    try:
        st, now = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)


def write_pid(fd: int) -> None:
    """This process's pid as the file's whole content, for a waiting process's message."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def process_alive(pid: int) -> bool:
    """Whether a process ``pid`` runs. A zombie does not (killed, its parent has not
    reaped it yet: a container whose first process reaps no orphans keeps them for
    good). A pid reused by another process reads as alive: what is named after it is
    kept, never removed wrongly."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it runs
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:  # no /proc here, or it ended just now: as ``kill`` said
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


__all__ = ["names", "process_alive", "try_lock_file", "write_pid"]
