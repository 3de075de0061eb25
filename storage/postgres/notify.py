"""Live run events across replicas: PostgreSQL's own ``LISTEN/NOTIFY``.

Every committed step that adds events to a run's log sends ``NOTIFY run_events`` in its
own transaction (``runs.step_statements``), so the notification is delivered exactly
when — and only if — the events are durable, in commit order. Its payload carries the
events themselves when they fit (``notify_payload``): a replica following the run takes
them from the notification and reads the log only when they did not fit, on a gap, after
a reconnect, or on a slow poll against a lost notification. One listener per process
holds a dedicated connection (outside the pool) with ``LISTEN run_events`` and hands each
notification to the local watchers of its run (``RunWatch``).

The same connection listens for cancels asked for on any replica (``run_cancels``,
payload: the run id) and hands each to the process's cancel subscribers (the run
manager), which cancel the run if it executes here, and for each replica's word of which
runs it has clients attached to (``run_followers``, ``app.runs.presence``): sent here too,
through ``send`` (a pooled connection, never the listening one, which ``notifies()``
holds), one at a time in the order announced.

When the connection drops, every watcher reads its log at once (a follower learns of an
outage then, not at its quiet poll); the listener reconnects with backoff and tells every
watcher to read the log once more (whatever was committed meanwhile), and every cancel subscriber to
look in the store (``None``: a cancel may have been missed).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from storage.postgres.runs import CANCEL_CHANNEL, NOTIFY_CHANNEL
from storage.run_feed import RunWatch, RunWatchers

log = logging.getLogger("agentchat.storage")

#: Channel of each replica's word of its followers of runs elsewhere (``app.runs.presence``).
FOLLOWERS_CHANNEL = "run_followers"
#: ``send``'s statement: ``pg_notify`` outside any other transaction (a word is not a write).
FOLLOWERS_SQL = f"SELECT pg_notify('{FOLLOWERS_CHANNEL}', %s)"
#: Words waiting to be sent at most (the oldest are dropped past it: while the database
#: does not answer, each replica's beat adds one every ``FollowerPresence.beat_s``).
OUTBOX = 1000


class RunEventsListener:
    """Hands a run's committed events (or "read the log") to its local watchers, whichever
    process committed them."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout_s: float = 10.0,
        application_name: str = "agentchat-listen",
        send: Callable[[str, str], Awaitable[object]] | None = None,
    ) -> None:
        self.url = url
        #: ``send(sql, payload)``: runs ``FOLLOWERS_SQL`` (``None``: words are not sent).
        self.send = send
        self._outbox: deque[str] = deque(maxlen=OUTBOX)
        self._sender: asyncio.Task[None] | None = None
        self._send_failing = False
        #: ``close()`` was called: words announced later (followers detaching after the
        #: storage closed, at shutdown) are dropped, never sent through a closed pool.
        self._closed = False
        self.connect_timeout_s = connect_timeout_s
        self.application_name = application_name
        self._hub = RunWatchers(log)
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self.connected = asyncio.Event()
        self.notifications = 0
        self.reconnects = 0
        #: Why the listener is not listening now (``None`` while it listens).
        self.last_error: str | None = None

    def status(self) -> dict[str, Any]:
        """``/readyz``'s ``db.run_feed`` and ``/metrics``: whether this replica hears other
        replicas' run events and cancels now. While it does not, a stream of a run
        executing elsewhere reads its log at the quiet poll (every 10 s), and a cancel
        asked elsewhere reaches a run here at the lease-claim pace: slower, not lost."""
        listening = self.connected.is_set()
        out: dict[str, Any] = {"listening": listening, "reconnects": self.reconnects}
        if not listening and self.last_error is not None:
            out["detail"] = f"not listening ({self.last_error}): runs elsewhere are followed at the quiet poll"
        return out

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._listen(), name="run-events-listener")

    async def close(self) -> None:
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._sender
            self._sender = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    def watch(self, run_id: str) -> contextlib.AbstractContextManager[RunWatch]:
        return self._hub.watch(run_id)

    def subscribe_cancels(self, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(run_id)`` for every cancel asked for on any replica, and
        ``callback(None)`` after a reconnect (look in the store: one may have been missed)."""
        self._hub.subscribe_cancels(callback)

    def subscribe_followers(self, callback: Callable[[str], None]) -> None:
        self._hub.subscribe_followers(callback)

    def announce_followers(self, payload: str) -> None:
        """Send ``payload`` on ``run_followers`` in the background, after those before it.
        Ignored once closed: a stream's follower may detach after the storage closed (a
        stream uvicorn cancelled at its shutdown timeout ends during the app's shutdown),
        and a sender started then would only fail on the closed pool (or be left pending
        when the loop ends); the other replicas let this word lapse (``ttl_s``)."""
        if self.send is None or self._closed:
            return
        self._outbox.append(payload)
        if self._sender is None or self._sender.done():
            # A context of its own: not the request's deadline (``storage.request_scope``)
            # of whichever stream happened to announce first.
            self._sender = asyncio.get_running_loop().create_task(
                self._send_outbox(), name="run-followers-send", context=contextvars.Context()
            )

    async def _send_outbox(self) -> None:
        assert self.send is not None
        while self._outbox:
            payload = self._outbox.popleft()
            try:
                await self.send(FOLLOWERS_SQL, payload)
            except Exception as exc:  # a word lost lapses at its replicas (``ttl_s``)
                if not self._send_failing:
                    log.warning(
                        "cannot tell other replicas which runs are followed here", extra={"error": str(exc)[:300]}
                    )
                self._send_failing = True
            else:
                self._send_failing = False

    @property
    def watched(self) -> int:
        return self._hub.watched

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
                self.last_error = f"cannot connect: {type(exc).__name__}: {exc}"[:300]
                if attempt == 1:
                    log.warning("run events listener cannot connect; retrying", extra={"error": str(exc)[:300]})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** min(attempt, 5)))
                continue
            self._conn = conn
            try:
                await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                await conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                await conn.execute(f"LISTEN {FOLLOWERS_CHANNEL}")
                if attempt or self.reconnects:
                    log.info("run events listener connected again")
                attempt = 0
                self.last_error = None
                self.connected.set()
                self._hub.read_all()  # whatever was committed while we were away
                if self.reconnects:
                    self._hub.cancel(None)
                async for note in conn.notifies():
                    self.notifications += 1
                    if note.channel == CANCEL_CHANNEL:
                        self._hub.cancel(note.payload)
                    elif note.channel == FOLLOWERS_CHANNEL:
                        self._hub.followers(note.payload)
                    else:
                        self._hub.deliver(note.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"lost its connection: {type(exc).__name__}: {exc}"[:300]
                log.warning("run events listener lost its connection", extra={"error": str(exc)[:300]})
                # Every follower reads its log now instead of at its quiet poll (10 s): an
                # outage reaches its clients as an error at once, and events committed just
                # before the drop, whose notifications were lost with it, are not waited for.
                self._hub.read_all()
            finally:
                self.connected.clear()
                self._conn = None
                with contextlib.suppress(Exception):
                    await conn.close()
            self.reconnects += 1
            await asyncio.sleep(0.2)
