"""Whether this process knows PostgreSQL is away, so a request is refused at once.

Why: during an outage every request that needed the database waited the pool's whole
timeout (``AGENT_DB_POOL_TIMEOUT_S``, 10 s) for a connection the pool could not open,
although the replica already knew the database was down — walking two replicas
through a 40 s PostgreSQL stop, clients and load-balancer connections piled up behind
waits whose outcome was known. The pool's own connection attempts say it: while the
last attempt failed the way an absent server fails (refused, reset, timed out, the
server shutting down) and the pool holds no idle connection, a request's wait can only
end in 503, so it gets that 503 at once (``refuse_if_down``): after joining the one
attempt to connect in flight, which a stopped server refuses in milliseconds and a
frozen one leaves unanswered for at most ``REQUEST_WAIT_S`` — and which serves the
request if the database has just come back.

The state ends with the first sign the database answers: a connection opened (by the
pool or by this module's probe), a statement answered on any connection. While it
lasts a probe opens a connection every ``PROBE_INTERVAL_S`` (each attempt at most
``PROBE_WAIT_S``; one at a time), so this process keeps trying though no request
reaches the pool, and ends the state within that interval of the database's return:
the request after it is served (the probe's success has the pool open connections
at once, though its own attempt may be sleeping a backoff delay: ``pool_refill.py``).
A single failed attempt refuses nothing: the probe tries again at once, and only a
second failure in a row (``FAILURES_TO_REFUSE``) makes the database known away; an
answered statement or a connection opened meanwhile resets the count.

A failed connection attempt counts when it has no SQLSTATE, class 08 (connection
exception) or 57P (operator intervention). psycopg gives a failed *connection* no
SQLSTATE at all, so a server that answers but refuses new connections (too many
clients, a bad password, connections not allowed) counts as away too: requests are then
refused at once where they would have waited the pool's timeout for a connection it
cannot open, and a connection another request returns ends the state (an answered
statement). Telling those apart would mean matching libpq's message texts, which
follow the server's language setting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import AsyncConnection

from storage.errors import StorageUnavailable

log = logging.getLogger("agentchat.storage")

#: Failed connection attempts in a row (the pool's, then the probe's at once) before
#: requests are refused: one failure alone may be a blip among answered statements.
FAILURES_TO_REFUSE = 2
#: How often the probe tries to borrow a connection while the database is known away.
PROBE_INTERVAL_S = 0.5
#: How long one probe waits for its connection (a frozen server accepts TCP, then says nothing).
PROBE_WAIT_S = 2.0
#: How long a request waits for that attempt before it is refused (a frozen server's
#: attempt runs its whole ``PROBE_WAIT_S``; a stopped one refuses in milliseconds).
REQUEST_WAIT_S = 1.0


def says_unreachable(exc: BaseException) -> bool:
    """A failed attempt that says no connection can be had now: the server away, or (no
    SQLSTATE either: psycopg gives none to a failed connection) refusing new ones."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith(("08", "57P"))


class Reachability:
    """What the last connection attempts said, the refusals made on it, and the probe
    that runs while the database is known away."""

    def __init__(self) -> None:
        #: ``time.monotonic()`` of the failed attempt that began the current outage.
        self.down_since: float | None = None
        self.last_error: str | None = None
        #: Requests refused at once because the database was known away.
        self.refused = 0
        #: Outages seen (a failed attempt after an answered one).
        self.outages = 0
        self._failures_in_a_row = 0
        self._first_failure: float | None = None
        #: Tries the database once within the given seconds (``bind``: the pool's owner).
        self._probe: Callable[[float], Awaitable[None]] | None = None
        self._probing: asyncio.Task[None] | None = None
        self._in_flight: asyncio.Task[bool] | None = None
        self._closed = False

    def bind(self, probe: Callable[[float], Awaitable[None]]) -> None:
        """How to try the database once (the pool this object watches is built with its
        ``connection_class``, so the probe comes after)."""
        self._probe = probe

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def connection_class(self) -> type[AsyncConnection[Any]]:
        """A connection class for this pool whose ``connect`` tells this object how it went."""
        seen = self

        class ObservedConnection(AsyncConnection[Any]):
            @classmethod
            async def connect(cls, conninfo: str = "", **kwargs: Any) -> ObservedConnection:  # type: ignore[override]
                try:
                    conn = await super().connect(conninfo, **kwargs)
                except Exception as exc:
                    seen.attempt_failed(exc)
                    raise
                seen.answered()
                return conn

        return ObservedConnection

    def attempt_failed(self, exc: BaseException) -> None:
        """A connection attempt failed: if it says the server is away, the probe tries at
        once, and a second failure in a row makes the database known away."""
        if not says_unreachable(exc) or self._closed:
            return
        self.last_error = f"{type(exc).__name__}: {exc}"[:300]
        self._failures_in_a_row += 1
        if self._first_failure is None:
            self._first_failure = time.monotonic()
        if self.down_since is None and self._failures_in_a_row >= FAILURES_TO_REFUSE:
            self.down_since = self._first_failure
            self.outages += 1
            log.warning(
                "database unreachable: requests are refused at once until a connection succeeds",
                extra={"error": self.last_error},
            )
        if self._probe is not None and (self._probing is None or self._probing.done()):
            self._probing = asyncio.get_running_loop().create_task(self._probe_until_answered(), name="db-probe")

    def answered(self) -> None:
        """The database answered (a connection opened, a statement ran): the outage, if
        one was known, is over."""
        self._failures_in_a_row = 0
        self._first_failure = None
        if self.down_since is None:
            return
        log.warning("database reachable again", extra={"down_s": round(time.monotonic() - self.down_since, 3)})
        self.down_since = None
        self.last_error = None

    async def refuse_if_down(self, idle_connections: int, wait_s: float) -> None:
        """Raise ``StorageUnavailable`` if waiting for the pool could only end in it: the
        database is known away and the pool holds no idle connection to try. First the
        caller joins one attempt to connect (the one in flight, else a new one), for at
        most ``wait_s`` and ``REQUEST_WAIT_S``: refused at once by a stopped server, within
        that bound by a frozen one, and served if the database just came back."""
        if self.down_since is None or idle_connections > 0:
            return
        attempt = self._attempt()
        if attempt is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, min(wait_s, REQUEST_WAIT_S))):
                    if await asyncio.shield(attempt):
                        return
        if self.down_since is None:  # another sign of life meanwhile
            return
        self.refused += 1
        since = time.monotonic() - self.down_since
        raise StorageUnavailable(
            f"database unreachable for {since:.1f} s (the last connection attempt failed: {self.last_error}); "
            "refused at once until a connection succeeds"
        )

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` says of it."""
        since = None if self.down_since is None else round(time.monotonic() - self.down_since, 3)
        return {"unreachable_for_s": since, "refused_at_once": self.refused, "outages": self.outages}

    async def aclose(self) -> None:
        self._closed = True
        for task in (self._probing, self._in_flight):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _attempt(self) -> asyncio.Task[bool] | None:
        """The one attempt to connect in flight, started if none is (``None``: no probe
        bound, or closed). Every waiter shares it: an outage is one connection attempt at
        a time, not one per request."""
        if self._probe is None or self._closed:
            return None
        if self._in_flight is None or self._in_flight.done():
            loop = asyncio.get_running_loop()
            self._in_flight = loop.create_task(self._try_once(self._probe), name="db-probe-attempt")
        return self._in_flight

    async def _try_once(self, probe: Callable[[float], Awaitable[None]]) -> bool:
        """One probe: ``True`` once connected (the outage ends), ``False`` on a failure
        (counted by the connection's hook, or here when the server never answered)."""
        try:
            await probe(PROBE_WAIT_S)
        except TimeoutError:  # a frozen server: connect was cancelled, not failed
            self.attempt_failed(psycopg.OperationalError(f"no answer to a connection within {PROBE_WAIT_S} s"))
            return False
        except Exception as exc:  # refused, reset: the connection's hook counted it
            log.debug("database probe failed", extra={"error": str(exc)[:300]})
            return False
        self.answered()
        return True

    async def _probe_until_answered(self) -> None:
        """Try the database until it answers; the first attempt goes at once."""
        while self._failures_in_a_row and (attempt := self._attempt()) is not None:
            if await asyncio.shield(attempt):
                return
            await asyncio.sleep(PROBE_INTERVAL_S)


__all__ = [
    "FAILURES_TO_REFUSE",
    "PROBE_INTERVAL_S",
    "PROBE_WAIT_S",
    "REQUEST_WAIT_S",
    "Reachability",
    "says_unreachable",
]
