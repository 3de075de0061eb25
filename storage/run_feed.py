"""How a process learns that another process committed events of a run.

An engine shared by several processes (PostgreSQL) offers a ``RunFeed``: a process
``watch``-es a run and is woken when new events of it commit anywhere. Where they fit,
the notification carries the events themselves (``RunWatch.carried``), so a replica
following a run on another replica needs no read per token; where they do not — an
oversized step, a reconnect, a lost notification — ``must_read`` says "read the log".
The log stays the single source of truth either way.

The feed also carries cancels asked for on another process (``subscribe_cancels``), so
the process executing the run stops it at once.

An engine used by one process only (SQLite) has no feed: its live runs are followed
in memory, and a cancel asked for in another process on the same file is found by the
run's owner on its next look at the store (``RunStore.cancel_requests``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from storage.records import RunEvent

#: A watcher that falls this far behind stops collecting carried events and reads the
#: log instead (bounds the memory a stalled reader can pin).
MAX_CARRIED = 4096


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
