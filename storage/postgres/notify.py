"""Live run events across replicas: PostgreSQL's own ``LISTEN/NOTIFY``.

Every committed step that adds events to a run's log sends ``NOTIFY run_events,
'<run_id>:<last_seq>'`` in its own transaction (``runs.step_statements``), so the
notification is delivered exactly when — and only if — the events are durable, in
commit order. One listener per process holds a dedicated connection (outside the pool)
with ``LISTEN run_events`` and wakes the local followers of that run, which then read
the new events from the store (``events_after``): the log stays the single source of
truth, and a notification carries no event data (so its 8000-byte payload limit and a
lost notification never lose an event — followers also re-read on a slow poll).

When the connection drops, the listener reconnects with backoff and wakes every
follower once (they re-read whatever they may have missed meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import psycopg

from storage.postgres.runs import NOTIFY_CHANNEL

log = logging.getLogger("agentchat.storage")


class RunEventsListener:
    """Wakes local followers when another process (or this one) commits a run's events."""

    def __init__(
        self, url: str, *, connect_timeout_s: float = 10.0, application_name: str = "agentchat-listen"
    ) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.connected = asyncio.Event()
        self.notifications = 0
        self.reconnects = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="run-events-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def watch(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever new events of ``run_id`` were committed (the holder
        clears it before each read, so no wake-up between a read and a wait is lost)."""
        woke = asyncio.Event()
        self._watchers.setdefault(run_id, set()).add(woke)
        try:
            yield woke
        finally:
            watchers = self._watchers.get(run_id)
            if watchers is not None:
                watchers.discard(woke)
                if not watchers:
                    del self._watchers[run_id]

    @property
    def watched(self) -> int:
        return sum(len(w) for w in self._watchers.values())

    def _wake(self, run_id: str) -> None:
        for woke in self._watchers.get(run_id, ()):
            woke.set()

    def _wake_all(self) -> None:
        for watchers in self._watchers.values():
            for woke in watchers:
                woke.set()

    async def _listen(self) -> None:
        attempt = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self.url,
                    autocommit=True,
                    connect_timeout=max(1, int(self.connect_timeout_s)),
                    application_name=self.application_name,
                )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                attempt += 1
                if attempt == 1:
                    log.warning("run events listener cannot connect; retrying", extra={"error": str(exc)[:300]})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** min(attempt, 5)))
                continue
            self._conn = conn
            try:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                if attempt or self.reconnects:
                    log.info("run events listener connected again")
                attempt = 0
                self.connected.set()
                self._wake_all()  # whatever was committed while we were away
                async for note in conn.notifies():
                    self.notifications += 1
                    run_id, _, _seq = note.payload.rpartition(":")
                    self._wake(run_id or note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("run events listener lost its connection", extra={"error": str(exc)[:300]})
            finally:
                self.connected.clear()
                self._conn = None
                with contextlib.suppress(Exception):
                    await conn.close()
            self.reconnects += 1
            await asyncio.sleep(0.2)
