"""One writer process group per SQLite file: an exclusive ``flock`` on ``<db>.writer.lock``.

Why: every guarantee of a run's events on SQLite rests on one group of processes writing
the file. A lone ``agentchat serve`` claims every unfinished run at start-up (nobody else
can hold one), and the live log's check that an event comes after its run's last one is
kept per writer connection (``storage.sqlite.live_log``). The workers of one
``serve --workers`` are one group: they fence each other by lease epochs and tell each
other what they commit. Two groups on one file — a new container started before the old
one exits, ``agentchat serve`` started twice on different ports — are neither: the
second claims the first's live runs and both write them (on the old layout the second
write of a seq failed and the first process ended its runs with an error its clients
saw but the file never kept; on the live log both rows were kept).

So ``serve`` holds this lock for its whole life: a lone process takes it, the
``--workers`` supervisor takes it and hands the open file to its workers (an inherited
descriptor shares the lock: one group, one lock), and the kernel releases it when the
last holder dies, SIGKILL included — no stale lock to clean up. ``flock`` with
``LOCK_NB`` never blocks, so it is safe on an event loop; the holder's pid is written
into the file only to name it in a waiting process's message.

One-off commands (``compact``, ``migrate-db``, ``kb …``) do not take it: they never
write a live run's events (compaction folds settled runs only, a settle moves rows
without changing a seq, a conversation delete refuses live runs), so they cannot break
what the lock protects, and they must keep working beside a running service.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

#: The lock file beside the database: ``<db>.writer.lock``.
SUFFIX = ".writer.lock"
#: The environment variable naming the inherited lock descriptor (``serve --workers``).
INHERITED_FD_ENV = "AGENT_WRITER_LOCK_FD"


def lock_path(db_path: str | Path) -> Path:
    path = Path(db_path)
    return path.with_name(path.name + SUFFIX)


class WriterLock:
    """The exclusive lock of one SQLite file's writer group (module docstring)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.path = lock_path(db_path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def fileno(self) -> int:
        if self._fd is None:
            raise RuntimeError("the writer lock is not held")
        return self._fd

    def try_acquire(self) -> bool:
        """Take the lock if no other group holds it, without waiting; whether it is ours."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return True

    def inherit(self, fd: int) -> bool:
        """A worker of ``serve --workers``: ``fd`` is its supervisor's open lock file.
        True when it is this database's lock file and its lock is held (``flock`` on a
        descriptor that shares the holder's open file succeeds at once)."""
        try:
            st, mine = os.fstat(fd), os.stat(self.path)
        except OSError:
            return False
        if (st.st_dev, st.st_ino) != (mine.st_dev, mine.st_ino):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        self._fd = fd
        return True

    def holder(self) -> str:
        """Who holds the lock, for a message: ``pid N`` (as the holder wrote it) or ``another process``."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.path.read_text(encoding="ascii").strip() or "0")
            if pid > 0:
                return f"pid {pid}"
        return "another process"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["INHERITED_FD_ENV", "SUFFIX", "WriterLock", "lock_path"]
