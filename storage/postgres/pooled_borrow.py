"""Borrow a pooled connection that is not already known dead.

Why: psycopg's pool hands out an idle connection without looking at it. A connection
that sat idle while the server went away (a restart, a network cut, an operator's
``pg_terminate_backend``) is dead, but nobody has read its socket yet, so the pool
still holds it as idle; the first caller to borrow it after the database is back fails
with a lost connection. Walking a 0.2 s outage that no request saw, the next three
reads (one per idle connection) were each answered 503 ``storage_unavailable``
although PostgreSQL answered throughout; a request with a 1 s budget that drew them
in turn spent its retries on them.

A dead connection tells on itself for free: the server's last word (a FATAL
``terminating connection``, or just the close) is waiting in the socket, which is
readable although an idle autocommit connection expects nothing. So each borrow polls
the socket without waiting; only a readable one is read (``consume_input``, no round
trip), and one that reads as closed goes back to the pool, which discards and replaces
it, and the borrow draws again within the same wait. A live idle connection costs one
non-blocking ``poll``: no statement, no round trip. psycopg_pool's own ``check=``
(``check_connection``: an empty query per checkout) would catch the same connections
at a round trip per borrow, and after a failed check it sleeps its reconnect backoff
(1 s, then 2 s) before drawing again — longer than a request's whole budget.

A connection that dies without a word (a black-holed network, a frozen server) is not
caught here; the statement deadline (``statement_deadline.py``) is what bounds that.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from storage.postgres.borrow_order import BorrowOrder


def went_away(conn: AsyncConnection[Any]) -> bool:
    """Whether ``conn`` is already known dead: closed, or its socket has something to
    read (the server's close) that reads as a lost connection. Never waits."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.status != psycopg.pq.ConnStatus.OK:
        return True
    try:
        if not _readable(pgconn.socket):
            return False
        pgconn.consume_input()  # a notice is buffered for the next statement; a close fails here
    except (psycopg.OperationalError, OSError, ValueError):
        return True
    return pgconn.status != psycopg.pq.ConnStatus.OK


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])


@contextlib.asynccontextmanager
async def borrow(
    pool: AsyncConnectionPool[Any], timeout: float, order: BorrowOrder, *, urgent: bool
) -> AsyncIterator[AsyncConnection[Any]]:
    """``pool.connection(timeout)``, but a connection already known dead (``went_away``)
    is handed back — the pool discards and replaces it — and another drawn, all within
    ``timeout``; a caller with a deadline (``urgent``) is served before callers without
    one (``borrow_order.py``), for its first draw and any other. The pool's
    ``PoolTimeout`` past ``timeout``, as before."""
    ends = time.monotonic() + timeout
    while True:
        conn = await order.getconn(pool, max(0.001, ends - time.monotonic()), urgent=urgent)
        if not went_away(conn):
            break
        await pool.putconn(conn)  # its status says closed: the pool drops it and opens another
    try:
        yield conn
    finally:
        await pool.putconn(conn)


__all__ = ["borrow", "went_away"]
