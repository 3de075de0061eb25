"""A client-side deadline on the statements of one borrowed connection.

PostgreSQL's own timeouts (``statement_timeout``, ``lock_timeout``) are enforced by the
server: a server that is frozen (SIGSTOP, a stuck disk, a paused VM, a black-holed
network — TCP stays up, so keepalives do not help) enforces nothing, and a statement
sent to it waits for as long as the freeze lasts. Cancelling the waiting task does not
help either: psycopg then asks the frozen server to cancel the query (5 s) and waits for
the query's end (5 s more) before it lets go, which is how ``/readyz``'s 0.8 s probe
answered after 11 s.

So at the deadline the connection's socket is shut down (``shutdown(2)``, both ways;
the descriptor stays open, so nothing else can be handed its number while psycopg still
waits on it): the statement in flight fails at once with a lost connection, libpq marks
the connection broken, and the pool discards it instead of taking it back (a broken
connection is replaced in the background). The caller gets ``StorageUnavailable``,
which routes answer as 503 ``storage_unavailable`` with ``Retry-After``.

One ambiguity is inherent to any client-side deadline: a ``COMMIT`` already sent when
the deadline passes may still take effect once the server runs again. The window is
the commit's own round trip, after every statement of the transaction was answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

from psycopg import AsyncConnection

from storage.errors import StorageUnavailable


def _cut(conn: AsyncConnection[Any]) -> None:
    """Shut the connection's socket down; whoever waits on it wakes to a lost connection."""
    with contextlib.suppress(Exception):  # already broken or closed: nothing left to cut
        fd = conn.pgconn.socket
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)


@contextlib.asynccontextmanager
async def answered_by(conn: AsyncConnection[Any], deadline: float | None, waited: float) -> AsyncIterator[None]:
    """Everything done on ``conn`` inside the block is answered by ``deadline``
    (``time.monotonic()``; ``None``: no client-side deadline), or the connection is cut
    and the block raises ``StorageUnavailable``; ``waited`` (seconds) is what the
    message says the caller allowed."""
    if deadline is None:
        yield
        return
    fired = False

    def cut() -> None:
        nonlocal fired
        fired = True
        _cut(conn)

    timer = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), cut)
    try:
        yield
    except Exception as exc:
        if fired:
            raise StorageUnavailable(f"the database did not answer within {waited:g} s (connection dropped)") from exc
        raise
    finally:
        timer.cancel()
        if fired:
            # Broken now whatever the block made of it: closed here, so the pool drops it
            # (a connection whose status is not OK is never put back) and its descriptor
            # is freed at once. Nobody waits on it any more, so closing cannot strand a
            # waiter on a reused descriptor number.
            conn.pgconn.finish()


__all__ = ["answered_by"]
