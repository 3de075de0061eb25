"""Which worker runs the background jobs: one process of those sharing a lock file.

Several workers on one SQLite file (``agentchat serve --workers``) would each run the
retention pass, keyword pruning and the start-up back-fills — the same work N times,
and N writers queueing on the file's one write lock for it. The workers elect one
leader instead: whoever holds an exclusive ``flock`` on ``<runtime dir>/leader.lock``.
The kernel releases the lock when its holder dies however it dies (SIGKILL included),
and the others try again every ``retry_s``, so the jobs move to another worker within
that long. ``flock`` with ``LOCK_NB`` never blocks, so it runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("agentchat.ops")


@dataclass(slots=True)
class FileLeader:
    """Leads while it holds ``path``'s exclusive lock; see the module docstring."""

    path: Path
    retry_s: float = 2.0
    #: Set once this process leads (it leads until it exits).
    leading: asyncio.Event = field(default_factory=asyncio.Event)
    _fd: int | None = None
    _task: asyncio.Task[None] | None = None
    _jobs: list[asyncio.Task[Any]] = field(default_factory=list)

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def start(self) -> None:
        if self._task is None and not self.try_lead():
            self._task = asyncio.create_task(self._campaign(), name="background-leader")

    def try_lead(self) -> bool:
        """Take the lock if nobody holds it; whether this process leads now."""
        if self.is_leader:
            return True
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
        os.write(fd, f"{os.getpid()}\n".encode())
        self.leading.set()
        log.info("this worker runs the background jobs", extra={"pid": os.getpid()})
        return True

    async def _campaign(self) -> None:
        while not self.try_lead():
            await asyncio.sleep(self.retry_s)

    def when_leading(self, job: Callable[[], Awaitable[Any]], name: str) -> asyncio.Task[Any]:
        """A task that runs ``job()`` once this process leads (at once if it does)."""

        async def wait_then_run() -> Any:
            await self.leading.wait()
            return await job()

        task = asyncio.create_task(wait_then_run(), name=name)
        self._jobs.append(task)
        return task

    async def aclose(self) -> None:
        for task in [self._task, *self._jobs]:
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._fd is not None:
            os.close(self._fd)  # releases the lock: a sibling takes the jobs over
            self._fd = None
        self.leading.clear()


__all__ = ["FileLeader"]
