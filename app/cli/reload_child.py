"""The serving child of ``agentchat serve --reload``: one writer group with its reloader.

uvicorn's reloader starts the app in a child (``multiprocessing``'s spawn) and starts it
again on every change; the reloader holds the SQLite file's writer lock
(``storage.sqlite.writer_lock``) across those restarts. The child used to hold nothing:
a SIGKILL of the reloader released the lock while the child went on serving and writing
the file, and a second ``serve`` then took the lock and claimed the same runs - two
writers. So the child, as a worker of ``--workers`` does,

* shares the reloader's open lock file (the descriptor crosses the spawn as uvicorn's
  sockets do, ``multiprocessing.reduction.DupFd``): the lock lives while either does;
* gets SIGTERM when the reloader dies (``app.cli.children.follow_parent``), and stops
  with a clean close instead of serving on alone;
* keeps neither the lock nor the listening socket inheritable, so nothing it starts
  (an MCP stdio server under uvloop) holds them after it exits.
"""

from __future__ import annotations

import os
import socket
from multiprocessing.reduction import DupFd
from typing import Any

import uvicorn

from app.cli.children import follow_parent
from storage.sqlite.writer_lock import WriterLock


class ReloadChild:
    """uvicorn's ``target`` in the reloader: pickled into each child it starts."""

    def __init__(
        self, config: uvicorn.Config, db_path: str | None, lock_fd: int | None, parent: int,
        lock: WriterLock | None = None,
    ) -> None:
        self.config = config
        self.db_path = db_path
        self.lock_fd = lock_fd
        self.parent = parent
        #: In the reloader: its lock, whose descriptor changes when the watch locks a
        #: removed lock file again (``app.cli.writer_wait.watch_writer_lock_thread``).
        self.lock = lock

    def __reduce__(self) -> tuple[Any, ...]:
        # DupFd while the child is being spawned: the descriptor is passed to it
        # (``pass_fds``), where ``detach`` gives its number back. The lock's current one:
        # a child started after a relock shares the new file.
        fd = self.lock.fileno() if self.lock is not None and self.lock.held else self.lock_fd
        shared = None if fd is None else DupFd(fd)
        return (_rebuilt, (self.config, self.db_path, shared, self.parent))

    def __call__(self, sockets: list[socket.socket] | None = None) -> None:
        follow_parent(self.parent)
        for sock in sockets or ():
            sock.set_inheritable(False)
        if self.db_path is not None and self.lock_fd is not None:
            lock = WriterLock(self.db_path)
            if not lock.inherit(self.lock_fd):
                raise SystemExit("agentchat serve --reload: the reloader's writer lock did not reach its child")
        uvicorn.Server(self.config).run(sockets=sockets)


def _rebuilt(config: uvicorn.Config, db_path: str | None, shared: Any, parent: int) -> ReloadChild:
    fd = None if shared is None else int(shared.detach())
    return ReloadChild(config, db_path, fd, parent)


def reload_child(config: uvicorn.Config, lock: WriterLock | None) -> ReloadChild:
    """The target for ``uvicorn.supervisors.ChangeReload`` in this (the reloader) process."""
    if lock is None or not lock.held:
        return ReloadChild(config, None, None, os.getpid())
    return ReloadChild(config, str(lock.db_path), lock.fileno(), os.getpid(), lock)


__all__ = ["ReloadChild", "reload_child"]
