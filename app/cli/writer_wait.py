"""``agentchat serve`` on a SQLite file another serving process writes: wait, then take over.

Only one process group writes a SQLite file (``storage.sqlite.writer_lock`` says why).
A second ``serve`` on a file whose lock is held does not start the service: it says so
in one log line and waits for the lock, answering on its port meanwhile —

* ``GET /healthz`` 200 (the process is alive and will take over: a liveness probe must
  not kill it);
* ``GET /readyz`` 503 with the reason (which file, which process holds it);
* anything else 503 with ``Retry-After`` (no run is admitted, none is claimed).

When the holder exits — a clean stop, a crash, SIGKILL: the kernel releases the lock —
it takes the lock, stops answering that way and starts the service as usual, which
carries on the runs the other process left unfinished. That is the rolling deploy
(a new container started before the old one stops) and a second ``serve`` started by
mistake, both without a second writer.

Why wait rather than refuse with an exit code: an orchestrator restarts a process that
exits at once with a growing back-off (seconds to minutes), so a rolling deploy would
crash-loop and take over late; a waiting process takes over the moment the old one is
gone, and its ``/readyz`` keeps it out of a load balancer until then. A SIGTERM or
Ctrl-C while waiting stops it at once: it holds nothing.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
import uvicorn

from app.cli.no_websockets import RefuseWebSocket
from app.cli.serving import Stack, http_protocol
from app.ops.logs import uvicorn_log_config
from storage.sqlite.log_settler import SETTLE_EVERY_S
from storage.sqlite.upgrade_guard import older_release_open
from storage.sqlite.writer_lock import INHERITED_FD_ENV, WriterLock

log = logging.getLogger("agentchat.cli")

#: How often a waiting process tries the lock (``flock`` with ``LOCK_NB``: no syscall blocks).
POLL_S = 0.25
#: How often a process waiting for an earlier release's to close the file looks again
#: (``wait_for_older_release``: two file lock probes and a short read, off the loop).
UPGRADE_POLL_S = 2.0
#: ``Retry-After`` of what a waiting process refuses.
RETRY_AFTER_S = 5

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


def waiting_reason(lock: WriterLock) -> str:
    """Why this process waits, and what to do when it was meant to serve beside the other:
    a second ``make run`` on another port in the same checkout (the README's advice when
    8000 is taken) shares the first one's file and waits here, which the bare reason left
    a newcomer to work out."""
    return (
        f"another agentchat serve ({lock.holder()}) writes the database {lock.db_path}; "
        "this process takes over when it exits (to serve beside it instead, give this one "
        "a database of its own: AGENT_DB_PATH)"
    )


def waiting_app(reason: Callable[[], str]) -> Callable[[dict[str, Any], Receive, Send], Any]:
    """The ASGI app of a waiting process (module docstring)."""

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = scope.get("path", "")
        headers = [(b"content-type", b"application/json")]
        body: dict[str, Any]
        if path == "/healthz":
            status, body = 200, {"status": "ok", "writer": "waiting"}
        elif path == "/readyz":
            status = 503
            body = {"ready": False, "checks": {"writer": {"ok": False, "detail": reason()}}}
        else:
            status = 503
            body = {"error": "not_ready", "detail": reason()}
            headers.append((b"retry-after", str(RETRY_AFTER_S).encode()))
        payload = orjson.dumps(body)
        headers.append((b"content-length", str(len(payload)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    return app


class _WaitingServer(uvicorn.Server):
    """uvicorn answering as a waiting process until ``ready()`` says so (``should_exit``)."""

    def __init__(self, config: uvicorn.Config, ready: Callable[[], Awaitable[bool]], every_s: float) -> None:
        super().__init__(config)
        self.ready = ready
        self.every_s = every_s
        #: A SIGTERM/SIGINT came: stop, even if the wait was over meanwhile.
        self.signalled = False

    async def main_loop(self) -> None:
        # uvicorn's own loop ticks every 0.1 s; ``ready`` is asked every ``every_s`` alongside.
        poll = asyncio.create_task(self._poll())
        try:
            await super().main_loop()
        finally:
            poll.cancel()

    async def _poll(self) -> None:
        while not await self.ready():
            await asyncio.sleep(self.every_s)
        self.should_exit = True

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Not uvicorn's own: it records the signal and raises it again once the server
        # has closed, which ``serve``'s SIGTERM handler (and the ``--workers``
        # supervisor's default one) turned into an exit from anywhere. A waiting process
        # holds nothing: the first signal stops it (``wait_for_writer_lock`` returns
        # False, ``serve`` exits 0 as any stop by signal does), a second cuts the close.
        if self.should_exit:
            self.force_exit = True
        self.should_exit = self.signalled = True


async def _answer_until(
    sockets: list[socket.socket],
    stack: Stack,
    reason: Callable[[], str],
    ready: Callable[[], Awaitable[bool]],
    every_s: float,
    *,
    log_format: str,
) -> bool:
    """Answer on ``sockets`` as a waiting process (``waiting_app``) until ``ready()``; False
    when a SIGTERM/SIGINT stopped the wait first."""
    # Duplicates of the listening sockets: uvicorn closes what it served on, and the
    # service serves on the originals afterwards (connections queued meanwhile wait there).
    shadows = [sock.dup() for sock in sockets]
    config = uvicorn.Config(
        waiting_app(reason),
        http=http_protocol(stack),
        lifespan="off",
        access_log=False,
        ws=RefuseWebSocket,
        log_level="warning",
        log_config=uvicorn_log_config(log_format),
        timeout_graceful_shutdown=1,
    )
    server = _WaitingServer(config, ready, every_s)
    try:
        await server.serve(sockets=shadows)
    finally:
        for shadow in shadows:
            shadow.close()
    return not server.signalled


async def wait_for_writer_lock(
    lock: WriterLock, sockets: list[socket.socket], stack: Stack, *, log_format: str
) -> bool:
    """Take ``lock``, answering on ``sockets`` as a waiting process while another group holds
    it; True once held, False when stopped (SIGTERM/SIGINT) before that."""
    if lock.try_acquire():
        return True
    log.warning(
        "waiting to become the database's writer: " + waiting_reason(lock),
        extra={"path": str(lock.db_path), "lock": str(lock.path), "holder": lock.holder()},
    )

    async def acquired() -> bool:
        return lock.try_acquire()

    if not await _answer_until(sockets, stack, lambda: waiting_reason(lock), acquired, POLL_S, log_format=log_format):
        lock.release()  # asked to stop, the lock ours or not: nothing starts
        return False
    if lock.held:
        log.warning("took over as the database's writer", extra={"path": str(lock.db_path)})
    return lock.held


async def wait_for_older_release(
    db_path: Path, sockets: list[socket.socket], stack: Stack, *, log_format: str
) -> bool:
    """With the writer lock held: wait while a process of a release before the live log -
    one that takes no writer lock - has the file open (``storage.sqlite.upgrade_guard``),
    answering on ``sockets`` as a waiting process; True once it is gone (or was never
    there), False when stopped (SIGTERM/SIGINT) first.

    Why wait rather than refuse, as for the lock (module docstring): this is the rolling
    deploy from that release - the new container starts before the old one stops - and
    a refusal would crash-loop it with a growing back-off; waiting, it migrates the file
    and claims the old process's unfinished runs the moment that process is gone, and
    until then neither migrates under it nor claims its live runs (two writers of one
    run's events). The check runs off the event loop (a file lock probe and a read)."""
    version = await asyncio.to_thread(older_release_open, db_path)
    if version is None:
        return True

    def reason() -> str:
        return (
            f"a process of an earlier release (schema version {version}, before the live log; it takes no writer "
            f"lock) has the database {db_path} open; this process migrates the file and takes over when it exits"
        )

    log.warning("waiting to become the database's writer: " + reason(), extra={"path": str(db_path)})

    async def gone() -> bool:
        return await asyncio.to_thread(older_release_open, db_path) is None

    if not await _answer_until(sockets, stack, reason, gone, UPGRADE_POLL_S, log_format=log_format):
        return False
    log.warning("the earlier release's process closed the database; taking over", extra={"path": str(db_path)})
    return True


class LockWatch:
    """One look at the lock file (``watch_writer_lock``'s docstring), shared by the
    asynchronous watch of a serving process and the thread of ``serve --reload``'s
    reloader, which runs no event loop of its own."""

    def __init__(self, lock: WriterLock, *, relock: bool, keep_old: bool = False) -> None:
        self.lock = lock
        self.relock = relock
        self.keep_old = keep_old
        self._reported = False

    def check(self) -> None:
        lock = self.lock
        if lock.intact():
            self._reported = False
            return
        if self.relock and lock.relock(keep_old=self.keep_old):
            log.warning(
                "the database's writer lock file was removed or replaced while held; locked it again",
                extra={"path": str(lock.db_path), "lock": str(lock.path)},
            )
            return
        if not self._reported:
            self._reported = True
            log.error(
                "the database's writer lock file was removed or replaced while this process holds the lock; another "
                "serve on the file would not wait: stop one of them (" + lock.holder() + " holds the new file)",
                extra={"path": str(lock.db_path), "lock": str(lock.path)},
            )


async def watch_writer_lock(lock: WriterLock, *, relock: bool, every_s: float = SETTLE_EVERY_S) -> None:
    """Every ``every_s`` (the live log's settle timer): is the lock file still the one
    this process locked (``WriterLock.intact``)? Removed or replaced while held, it
    excludes nobody: a serve started now would lock a new file and write beside this one.
    With ``relock`` (the process took the lock itself; a worker shares its supervisor's)
    the new file is locked at once, and the gap is this long at most; else, or when
    another process got there first, an ERROR line (once until it is whole again) says
    that this file may have a second writer - stop one of them."""
    watch = LockWatch(lock, relock=relock)
    while True:
        await asyncio.sleep(every_s)
        watch.check()


def watch_writer_lock_thread(lock: WriterLock, stop: threading.Event, every_s: float = SETTLE_EVERY_S) -> None:
    """``watch_writer_lock`` for ``serve --reload``'s reloader (a thread's target; it runs
    until ``stop`` is set): the reloader holds the lock, so it locks a removed file again,
    keeping the old descriptor open (a child being started may have been handed its
    number: ``app.cli.reload_child``). A few syscalls every ``every_s``: no event loop
    there to block."""
    watch = LockWatch(lock, relock=True, keep_old=True)
    while not stop.wait(every_s):
        watch.check()


def share_inherited(lock: WriterLock, env: dict[str, str]) -> bool:
    """A worker of ``--workers``: share its supervisor's lock (``INHERITED_FD_ENV``);
    False when it inherited none that holds this database's lock."""
    raw = env.get(INHERITED_FD_ENV)
    return bool(raw and raw.isdigit() and lock.inherit(int(raw)))


__all__ = [
    "POLL_S",
    "UPGRADE_POLL_S",
    "share_inherited",
    "wait_for_older_release",
    "wait_for_writer_lock",
    "waiting_app",
    "waiting_reason",
    "watch_writer_lock",
    "watch_writer_lock_thread",
]
