"""Following a run that executes in another process (another replica).

The run's log in the store is the source of truth: a remote follower reads the events
after its position with ``events_after``, sends them, and waits to be woken by the
store's feed (PostgreSQL ``LISTEN/NOTIFY``: every committed step notifies) — or, should a
notification be lost, by a slow poll. It ends after ``message_complete``; ids are the
stored ones, so a client resumes with ``Last-Event-ID`` on any replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Protocol

from events import MessageComplete
from storage.interfaces import RunStore


class RunFeed(Protocol):
    def watch(self, run_id: str) -> contextlib.AbstractContextManager[asyncio.Event]: ...


@contextlib.contextmanager
def _no_feed() -> Iterator[asyncio.Event]:
    yield asyncio.Event()


async def follow_stored(
    store: RunStore,
    feed: RunFeed | None,
    run_id: str,
    after: int,
    *,
    idle: float,
    poll_s: float = 2.0,
    batch: int = 1000,
) -> AsyncIterator[bytes | None]:
    """SSE bytes of the stored events of ``run_id`` after ``after``, live, until its
    terminal event; ``None`` after ``idle`` seconds without events (send a heartbeat)."""
    pos = max(0, after)
    last_sent = time.monotonic()
    with feed.watch(run_id) if feed is not None else _no_feed() as woke:
        while True:
            woke.clear()  # before the read: a commit after it wakes the wait below
            events = await store.events_after(run_id, pos, limit=batch)
            if events:
                parts: list[bytes] = []
                done = False
                for ev in events:
                    if ev.seq != pos + 1:  # never skip: wait for the gap to commit
                        break
                    parts.append(ev.wire)
                    pos = ev.seq
                    if ev.event == MessageComplete.name:
                        done = True
                        break
                if parts:
                    yield b"".join(parts)
                    last_sent = time.monotonic()
                if done:
                    return
                if parts:
                    continue
            wait = min(poll_s, max(0.05, idle - (time.monotonic() - last_sent)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woke.wait(), wait)
            if not woke.is_set() and time.monotonic() - last_sent >= idle:
                yield None
                last_sent = time.monotonic()
