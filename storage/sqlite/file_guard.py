"""Is the SQLite file this process opened still the one at its path, and writable?

A running server holds its database, ``-wal`` and ``-shm`` open. Removing or replacing
any of them under it changes nothing SQLite notices: every write still succeeds — into
an unlinked inode that vanishes with the process, or into a WAL the file on disk no
longer has — so everything acknowledged afterwards is lost at the next restart. And the
``-shm`` is memory-mapped: cut short under the mapping, the next access kills the
process with SIGBUS. So the database is *checked*, not assumed:

* at open, the device and inode of the three files are recorded (``-wal``/``-shm`` when
  they first appear: SQLite creates them with the first connection);
* ``check`` (a few ``stat`` calls: run it off the event loop) compares them again. A
  file removed, replaced by another inode, or a ``-shm`` shorter than it was, is *lost*
  — for good: writing on would write into the wrong file, so nothing is written until a
  restart opens the file at the path again. A file that is there but not writable by
  this process (``os.access``) is *unwritable* — until it is writable again.

The engine runs ``check`` before every write transaction (on the writer's thread, so the
write never lands in a lost file) and on a timer (``/readyz`` and live runs learn of it
even while nothing writes). Reads look at the flag those checks leave (``raise_if_lost``):
once the file is known lost, a read is refused too — answered from the unlinked file, a
run live at the loss was listed ``running`` long after it had ended.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.errors import DatabaseLost, StorageUnavailable

log = logging.getLogger("agentchat.storage")

SUFFIXES = ("", "-wal", "-shm")


@dataclass(frozen=True, slots=True)
class FileIdentity:
    device: int
    inode: int


class DatabaseFileGuard:
    """The identity of one database's files, and what has gone wrong with them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._seen: dict[str, FileIdentity] = {}
        self._shm_size = 0
        #: Why the file at the path is no longer the one opened (sticky until restart).
        self.lost: str | None = None
        #: Why a file cannot be written now (clears when it can again).
        self.unwritable: str | None = None
        #: Called once, from the thread that noticed, when the file is first found lost.
        self.on_lost: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    @property
    def problem(self) -> str | None:
        return self.lost or self.unwritable

    def check(self) -> str | None:
        """Look at the files now; the problem found (``None``: all is well). Blocking."""
        with self._lock:
            if self.lost is not None:
                return self.lost
            lost, unwritable = self._inspect()
            if lost is not None:
                self.lost = lost
                log.error(
                    "the database file changed under the running server; nothing more is written "
                    "until it is restarted",
                    extra={"path": str(self.path), "reason": lost},
                )
                listeners = list(self.on_lost)
            else:
                listeners = []
                if unwritable != self.unwritable:
                    if unwritable is not None:
                        where = {"path": str(self.path), "reason": unwritable}
                        log.error("the database cannot be written", extra=where)
                    else:
                        log.warning("the database can be written again", extra={"path": str(self.path)})
                self.unwritable = unwritable
        for listener in listeners:
            try:
                listener(lost or "")
            except Exception:  # one listener must not keep the others from hearing it
                log.exception("database-lost listener raised")
        return self.problem

    def raise_if_unsafe(self) -> None:
        """``StorageUnavailable`` unless a write may go to this file now. Blocking."""
        problem = self.check()
        if self.lost is not None:
            raise DatabaseLost(f"database file {self.path}: {self.lost} (restart the server)")
        if problem is not None:
            raise StorageUnavailable(f"database file {self.path}: {problem}")

    def raise_if_lost(self) -> None:
        """``DatabaseLost`` once the file is *known* removed or replaced (by a write's
        check or the timer's): reads refuse then, rather than answer from a file that is
        no longer the database. Only the cached flag is read — no ``stat`` per query on
        the hot path; the timer finds a loss within ``file_check_s``. Non-blocking."""
        lost = self.lost
        if lost is not None:
            raise DatabaseLost(f"database file {self.path}: {lost} (restart the server)")

    def set_aside_orphans(self) -> list[Path]:
        """After the connections closed on a lost database: move its ``-wal``/``-shm``
        aside where they are still the ones opened. They belong to a database no longer
        at the path; left there, the next process to open the path would replay this
        WAL into whatever file is there now. Moved, not deleted: kept for forensics.
        Blocking."""
        moved: list[Path] = []
        if self.lost is None:
            return moved
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for suffix in SUFFIXES[1:]:
            file = self.path.with_name(f"{self.path.name}{suffix}")
            try:
                st = os.stat(file)
            except OSError:
                continue
            if self._seen.get(suffix) != FileIdentity(st.st_dev, st.st_ino):
                continue  # someone else's file now: not ours to move
            target = file.with_name(f"{file.name}.orphaned-{stamp}")
            try:
                os.replace(file, target)
            except OSError as exc:
                log.error("could not move aside a lost database's file", extra={"path": str(file), "error": str(exc)})
                continue
            moved.append(target)
        if moved:
            log.warning(
                "moved aside the write-ahead files of the lost database",
                extra={"path": str(self.path), "moved_to": [str(m) for m in moved]},
            )
        return moved

    def _inspect(self) -> tuple[str | None, str | None]:
        unwritable: str | None = None
        for suffix in SUFFIXES:
            name = f"{self.path.name}{suffix}"
            file = self.path.with_name(name)
            try:
                st = os.stat(file)
            except FileNotFoundError:
                if suffix in self._seen or suffix == "":
                    return f"{name} was removed", None
                continue  # -wal/-shm not created yet
            except OSError as exc:
                return None, f"{name} cannot be inspected: {exc.strerror or exc}"
            identity = FileIdentity(st.st_dev, st.st_ino)
            known = self._seen.setdefault(suffix, identity)
            if known != identity:
                return f"{name} was replaced by another file", None
            if suffix == "-shm":
                if st.st_size < self._shm_size:
                    return f"{name} was cut short ({st.st_size} of {self._shm_size} bytes)", None
                self._shm_size = st.st_size
            if unwritable is None and not os.access(file, os.R_OK | os.W_OK):
                unwritable = f"{name} is not writable by this process"
        return None, unwritable
