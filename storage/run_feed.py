"""How a process learns that another process committed events of a run.

An engine shared by several processes (PostgreSQL) offers a ``RunFeed``: a process
``watch``-es a run and is woken when new events of it commit anywhere. Where they fit,
the notification carries the events themselves (``RunWatch.carried``), so a replica
following a run on another replica needs no read per token; where they do not — an
oversized step, a reconnect, a lost notification — ``must_read`` says "read the log".
The log stays the single source of truth either way.

The feed also carries cancels asked for on another process (``subscribe_cancels``), so
the process executing the run stops it at once, and each process's word of which runs
executing elsewhere it has clients attached to (``announce_followers``, read by
``app.runs.presence``), so the process executing a chat does not cancel it as abandoned
while its client reads it through another.

SQLite used by one process has no feed: its live runs are followed in memory. Several
worker processes on one SQLite file (``agentchat serve --workers``) feed each other over
Unix sockets (``storage.sqlite.worker_feed``). Both feeds keep their watchers and cancel
subscribers in one ``RunWatchers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from storage.feed_payload import decode_payload
from storage.records import RunEvent

#: A watcher that falls this far behind stops collecting carried events and reads the
#: log instead (bounds the memory a stalled reader can pin).
MAX_CARRIED = 4096


async def set_within(event: asyncio.Event, timeout_s: float) -> bool:
    """Whether ``event`` is set within ``timeout_s``.

    Not ``asyncio.wait_for(event.wait(), timeout_s)``: on Python 3.11 that waits in a
    task of its own and, when the caller's cancel lands as the event is set, returns
    instead of raising - the cancel is lost, and a loop that stops only on cancellation
    (a follower, a wait for another replica's run) goes on as if never asked to stop.
    ``asyncio.timeout`` waits in the caller's own task, where a cancel is never lost."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return event.is_set()
    return True


def raise_if_cancel_lost() -> None:
    """Raise ``CancelledError`` if the current task was asked to stop and the request
    was swallowed on the way. On Python 3.11 ``asyncio.wait_for`` loses a cancel that
    lands as its call completes (psycopg's pool waits for a connection that way: any
    store read under contention), yet the task's ``cancelling()`` count keeps it. A loop
    that stops only on cancellation calls this after each read, so it ends at its next
    turn instead of going on for ever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


@dataclass(slots=True)
class RunWatch:
    """What the feed has for one watcher of one run since it last looked."""

    woke: asyncio.Event = field(default_factory=asyncio.Event)
    carried: list[RunEvent] = field(default_factory=list)
    #: Read the log: the first look, and after a notification without its events.
    must_read: bool = True

    def take(self) -> tuple[list[RunEvent], bool]:
        """The carried events and whether the log must be read, emptied; clears
        ``woke`` first, so a notification after this call wakes the next wait."""
        self.woke.clear()
        carried, must_read = self.carried, self.must_read
        self.carried, self.must_read = [], False
        return carried, must_read

    async def wait(self, timeout_s: float) -> bool:
        """Until a notification since the last ``take`` or ``timeout_s``; whether one came
        (``set_within``: a cancel meanwhile is never lost)."""
        return await set_within(self.woke, timeout_s)

    def deliver(self, events: list[RunEvent] | None) -> None:
        """A notification: its events, or ``None`` when they did not fit in it."""
        if events is None or len(self.carried) + len(events) > MAX_CARRIED:
            self.carried, self.must_read = [], True
        else:
            self.carried.extend(events)
        self.woke.set()


class RunFeed(Protocol):
    def watch(self, run_id: str) -> contextlib.AbstractContextManager[RunWatch]: ...

    def subscribe_cancels(self, callback: Callable[[str | None], None]) -> None:
        """``callback(run_id)`` when a cancel of the run is asked for on any process;
        ``callback(None)`` when one may have been missed (look in the store)."""
        ...

    def announce_followers(self, payload: str) -> None:
        """Tell every process (this one too) ``payload``, a word of ``app.runs.presence``:
        sent in the background, in the order announced; a word lost is not sent again."""
        ...

    def subscribe_followers(self, callback: Callable[[str], None]) -> None:
        """``callback(payload)`` for every word ``announce_followers`` sent, on any process."""
        ...


class RunWatchers:
    """The local side of a feed, shared by every engine's: who watches which run, who
    wants to hear of cancels, and handing each of them what arrived. The transports
    (PostgreSQL's ``LISTEN``, the sibling workers' sockets) only decide what arrived."""

    __slots__ = ("_by_run", "_cancel_subscribers", "_followers_subscribers", "_log")

    def __init__(self, log: logging.Logger) -> None:
        self._by_run: dict[str, list[RunWatch]] = {}
        self._cancel_subscribers: list[Callable[[str | None], None]] = []
        self._followers_subscribers: list[Callable[[str], None]] = []
        self._log = log

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[RunWatch]:
        """What arrives for ``run_id`` from now on (the holder calls ``take`` before each
        look at the log, so nothing committed between a look and a wait is missed)."""
        watch = RunWatch()
        self._by_run.setdefault(run_id, []).append(watch)
        try:
            yield watch
        finally:
            watchers = self._by_run.get(run_id)
            if watchers is not None:
                with contextlib.suppress(ValueError):
                    watchers.remove(watch)
                if not watchers:
                    del self._by_run[run_id]

    def subscribe_cancels(self, callback: Callable[[str | None], None]) -> None:
        self._cancel_subscribers.append(callback)

    def subscribe_followers(self, callback: Callable[[str], None]) -> None:
        self._followers_subscribers.append(callback)

    @property
    def watched(self) -> int:
        return sum(len(w) for w in self._by_run.values())

    def deliver(self, payload: str) -> None:
        """A run's notification (``storage.feed_payload``) to that run's watchers."""
        run_id = payload.partition("\n")[0].rpartition(":")[0]
        watchers = self._by_run.get(run_id)
        if not watchers:  # most notifications are for runs nobody here follows
            return
        _, events = decode_payload(payload)
        for watch in watchers:
            watch.deliver(events)

    def read_all(self) -> None:
        """Something may have been missed (a reconnect, a broken socket): every watcher
        reads the log."""
        for watchers in self._by_run.values():
            for watch in watchers:
                watch.deliver(None)

    def cancel(self, run_id: str | None) -> None:
        """A cancel of ``run_id`` (``None``: one may have been missed) to every subscriber."""
        for callback in self._cancel_subscribers:
            try:
                callback(run_id)
            except Exception:  # one subscriber's bug must not stop the feed
                self._log.exception("a cancel subscriber failed", extra={"run_id": run_id})

    def followers(self, payload: str) -> None:
        """A process's word of its followers (``announce_followers``) to every subscriber."""
        for callback in self._followers_subscribers:
            try:
                callback(payload)
            except Exception:  # one subscriber's bug must not stop the feed
                self._log.exception("a followers subscriber failed")
