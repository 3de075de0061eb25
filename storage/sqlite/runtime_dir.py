"""Where the workers of one SQLite file meet, and who removes it.

The workers of ``agentchat serve --workers`` on one file share a directory: each serves
its run feed (``storage.sqlite.worker_feed``) and its ``/metrics`` (``app/ops/
worker_metrics.py``) on a Unix socket there, ``<pid>-<token>.sock`` and
``<pid>-<token>.metrics``, and they elect the background jobs' leader by the lock file
``leader.lock`` (``app/ops/leader.py``). It is ``<db>.workers`` beside the file, or,
where that path is too long for a socket's address, ``agentchat-<hash of the file's
path, its directory and the user>`` in the system's temporary directory (``runtime_dir``).

Each worker removes its own sockets on a clean exit, but the leader's lock file stays
(no worker can tell it is the last one to need it), and a group killed by SIGKILL
removes nothing: so the directory stayed for good — in the temporary directory, one
per file ever served with ``--workers`` (631 of them on a test machine, beside 626
directories of killed supervisors: ``app/cli/workers.py``). So
``tidy_runtime_dir`` removes the files of workers that no longer run (their pid is in
the name) and, once nothing live is left, the leader's lock file (only when nobody holds
it) and the directory itself. It is run by the ``--workers`` supervisor before it starts
its workers (what a killed group left) and after they have all stopped, and by each
worker's feed as it closes (the last one out: a group whose supervisor was killed, or
workers started without one).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import stat
import tempfile
from pathlib import Path

from storage.file_lock import process_alive, try_lock_file

#: The background jobs' leader lock among the workers (``app.ops.leader.FileLock``).
LEADER_LOCK = "leader.lock"
#: A worker's file: ``<pid>-<token>.<kind>`` (``.sock``, ``.metrics``).
_WORKER_FILE = re.compile(r"(\d+)-[0-9a-f]+\.[a-z]+")
#: Room kept in a socket path for the longest name put there (``<pid>-<token>.metrics``).
_LONGEST_NAME = len("/4194304-0123abcd.metrics")
#: Linux's bound on a Unix socket path (``sun_path``: 108 bytes with its final NUL).
_SUN_PATH_MAX = 107


def runtime_dir(db_path: str | Path) -> Path:
    """The directory where the workers of one database file meet: next to the file,
    ``<db>.workers``; where that path is too long for a Unix socket's address, a
    directory of the system's temporary one named after the file (``agentchat-<hash>``),
    the same for every worker of the file.

    The name is a hash of the file's absolute path, this user's id and the device and
    inode of the file's directory (when it exists; ``serve`` makes it before any worker
    starts): a path alone can name different files that meet in one temporary
    directory — containers sharing ``/tmp`` (a pod's volume, a bind mount), each with
    its own database at the same path — and their groups shared one leader lock (the
    background jobs of one never ran) and each other's feed; and two users serving one
    file (one group at a time: the writer lock) found the other's private directory
    there and their workers could not start."""
    path = Path(db_path).absolute()
    beside = path.with_name(path.name + ".workers")
    if len(os.fsencode(beside)) + _LONGEST_NAME <= _SUN_PATH_MAX:
        return beside
    try:
        info = os.stat(path.parent)
        where = f"{info.st_dev}:{info.st_ino}"
    except OSError:
        where = ""
    key = b"\0".join((os.fsencode(path), str(os.getuid()).encode(), where.encode()))
    digest = hashlib.sha256(key).hexdigest()[:20]
    return Path(tempfile.gettempdir()) / f"agentchat-{digest}"


def make_runtime_dir(directory: Path) -> None:
    """Create ``directory`` private to this user, or check that it is: a directory of
    the shared temporary one could have been made by someone else first."""
    directory.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise PermissionError(f"{directory} is not a directory private to this user; remove it or fix its mode")


def tidy_runtime_dir(directory: Path) -> bool:
    """Remove the files of workers that no longer run from ``directory``, and, when
    nothing live is left there, the leader's lock file and ``directory`` itself; whether
    the directory is gone. A few system calls, none that waits (the lock is tried with
    ``LOCK_NB``, a dead pid's socket with a non-blocking connect): fine on an event loop.
    Files not of this layout are never touched, and keep the directory. Clean-up at
    best: a file it may not remove (an ``OSError``) is left, and so is the directory
    (``False``), never an error for the caller."""
    try:
        return _tidy(directory)
    except OSError:
        return False


def _tidy(directory: Path) -> bool:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return True
    live = False
    for name in names:
        if name == LEADER_LOCK:
            continue
        match = _WORKER_FILE.fullmatch(name)
        if match is None or not _left_by_the_dead(directory / name, int(match.group(1))):
            live = True
            continue
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()  # a dead worker's: nobody listens there
    if live:
        return False
    if LEADER_LOCK in names:
        # Held: a worker runs (one whose socket is not there yet, or gone already). Not
        # held: locked here while it is removed, so a worker campaigning for it meanwhile
        # finds its path no longer names the file it opened and makes a new one
        # (``storage.file_lock``) instead of leading on a removed file.
        fd = try_lock_file(directory / LEADER_LOCK)
        if fd is None:
            return False
        try:
            with contextlib.suppress(FileNotFoundError):
                (directory / LEADER_LOCK).unlink()
        finally:
            os.close(fd)
    with contextlib.suppress(FileNotFoundError, OSError):
        directory.rmdir()  # not empty: a worker arrived meanwhile, and the directory is its
    return not directory.exists()


def worker_gone(path: Path) -> bool:
    """Whether the worker that made ``path`` (``<pid>-<token>.<kind>``) has ended, by the
    rule ``tidy_runtime_dir`` removes by; a name not of this layout: no. For a sibling
    refused at its socket (``storage.sqlite.worker_feed``): a worker starting binds its
    socket before it listens, and is refused meanwhile though it runs."""
    match = _WORKER_FILE.fullmatch(path.name)
    return match is not None and _left_by_the_dead(path, int(match.group(1)))


def _left_by_the_dead(path: Path, pid: int) -> bool:
    """Whether the worker that made ``path`` has ended: no process ``pid`` runs here, and,
    for a socket, nobody listens on it. Not the pid alone: where the directory is shared
    with workers of another pid namespace (two containers with one temporary directory
    and a database at the same path meet in one ``agentchat-<hash>``), their pids name
    nothing here — a group's start and close removed the other group's live sockets (seen
    with real groups, one under ``unshare --pid``). The connect is the feed's own test of
    a sibling (``ConnectionRefusedError``: nobody there) and does not wait."""
    return not process_alive(pid) and not _listening(path)


def _listening(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``: a non-blocking
    connect, so a full backlog (``EAGAIN``) or an error it cannot judge counts as
    someone there."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except FileNotFoundError:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(os.fsencode(path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True
    return True


__all__ = ["LEADER_LOCK", "make_runtime_dir", "runtime_dir", "tidy_runtime_dir", "worker_gone"]
