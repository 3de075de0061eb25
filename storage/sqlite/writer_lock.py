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
into the file only to name it in a waiting process's message (the try itself:
``storage.file_lock``, shared with the background jobs' leader lock).

The lock file sits beside the file SQLite opens: the path with its symlinks resolved
(``lock_path``). No descriptor of it is inheritable past the group (a worker's copy came
from ``pass_fds``): uvloop starts subprocesses - MCP stdio servers - without closing
inherited descriptors, and one lingering after the group would hold the lock for ever.
The lock is on the file, not on its name: a lock file removed (or replaced) while held
lets the next process lock a new one. A lock is only taken on the file the path still
names (checked after the ``flock``), and the holder checks now and then (``intact``,
``relock``; ``app.cli.writer_wait.watch_writer_lock``).

One-off commands (``compact``, ``kb …``) do not take it: they never write a live
run's events (compaction folds settled runs only, a settle moves rows without changing
a seq, a conversation delete refuses live runs), so they cannot break what the lock
protects, and they must keep working beside a running service. They only ask whether a
group holds it (``held_by_a_group``), to leave the file free between their bulk writes
(``storage.sqlite.group_gap``). ``migrate-db`` does, for
its whole copy: it refuses a file a serve has open anyway, and a serve started during
the copy waits for it instead of writing rows the copy has passed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from storage.file_lock import names, try_lock_file, write_pid

#: The lock file beside the database: ``<db>.writer.lock``.
SUFFIX = ".writer.lock"
#: The environment variable naming the inherited lock descriptor (``serve --workers``).
INHERITED_FD_ENV = "AGENT_WRITER_LOCK_FD"


def lock_path(db_path: str | Path) -> Path:
    """``<db>.writer.lock`` beside the file SQLite opens: the path with its symlinks
    resolved (``os.path.realpath``), as SQLite resolves them - a serve given a symlink to
    another's file locks the same lock file, not one beside the link."""
    path = Path(os.path.realpath(db_path))
    return path.with_name(path.name + SUFFIX)


class WriterLock:
    """The exclusive lock of one SQLite file's writer group (module docstring)."""

    def __init__(self, db_path: str | Path) -> None:
        self.db_path = Path(db_path)
        self.path = lock_path(db_path)
        self._fd: int | None = None
        #: Descriptors ``relock(keep_old=True)`` replaced, closed by ``release``.
        self._retired: list[int] = []

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
        fd = try_lock_file(self.path)  # storage.file_lock: no wait, no child, this very file
        if fd is None:
            return False
        self._fd = fd
        write_pid(fd)
        return True

    def inherit(self, fd: int) -> bool:
        """A worker of ``serve --workers``: ``fd`` is its supervisor's open lock file.
        True when it is an open file whose lock this group holds (``flock`` on a
        descriptor that shares the holder's open file succeeds at once).

        Whatever the path names now: the supervisor holds the lock on this open file for
        the group's life, so it is the group's lock even when the lock file was removed
        or replaced meanwhile (``intact`` is False then). Refusing it would make a worker
        restarted after that wait for the new file on the group's own socket - 503 to
        part of the group's traffic while its siblings serve. The worker's watch
        (``app.cli.writer_wait.watch_writer_lock``) reports the removed file at ERROR,
        once, as its siblings' do."""
        try:
            os.fstat(fd)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        # ``pass_fds`` made it inheritable in this worker: uvloop's subprocesses (MCP
        # stdio servers) do not close inherited descriptors, and a child lingering after
        # this group exits would hold the lock - the next serve would wait for ever.
        os.set_inheritable(fd, False)
        self._fd = fd
        return True

    def intact(self) -> bool:
        """Whether the lock file's path still names the file this process locked. Not
        when it was removed or replaced while held (an operator cleaning "stale" lock
        files, a reset script): a serve started then would lock a new file and write
        beside this one. ``storage.sqlite.log_settler`` asks at its timer."""
        return self._fd is not None and names(self.path, self._fd)

    def relock(self, *, keep_old: bool = False) -> bool:
        """The lock file was removed or replaced while held (``intact`` is False): lock
        the file the path names now, if nobody else has, and keep that one instead.
        ``keep_old``: the old descriptor stays open until ``release`` (``serve --reload``'s
        reloader: a child being started may have been handed its number a moment ago)."""
        old = self._fd
        if old is None:
            return False
        self._fd = None
        if self.try_acquire():
            if keep_old:
                self._retired.append(old)
            else:
                os.close(old)
            return True
        self._fd = old
        return False

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
        while self._retired:
            os.close(self._retired.pop())


def held_by_a_group(db_path: str | Path) -> bool:
    """Whether a writer group (a ``serve``) holds the lock of the file at ``db_path``,
    asked by a process outside any group (``storage.sqlite.group_gap``) without taking
    the lock for longer than the question: a shared ``flock`` tried without waiting and
    dropped at once (closing the descriptor), on a lock file that is never created here.
    Shared, so two one-off commands asking at once do not take each other for a group;
    a ``serve`` whose own try falls in those microseconds waits ``POLL_S`` and takes it
    then (``app.cli.writer_wait``). A lock file this process may not open counts as held:
    the answer only decides whether to leave gaps between writes."""
    path = lock_path(db_path)
    try:
        fd = os.open(path, os.O_RDONLY)  # not inheritable (PEP 446)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # BlockingIOError: an exclusive holder
        return True
    finally:
        os.close(fd)
    return False


__all__ = ["INHERITED_FD_ENV", "SUFFIX", "WriterLock", "held_by_a_group", "lock_path"]
