"""The vacuum at a bulk load's end (``kb_bulk_load.BulkLoad._vacuum_postings``): the postings'
pages marked all-visible, so that every text search's read of them is index-only.

VACUUM marks a page all-visible only once each of its rows is *hinted* committed, and
with ``synchronous_commit`` off (the tests' and the bench's server, any deployment that
trades durability for speed) PostgreSQL refuses that hint while the commit record of the
row's transaction is not yet flushed - and not only of that transaction: commit LSNs are
kept per group of 32 consecutive transaction ids (``CLOG_XACTS_PER_LSN_GROUP``), so any
asynchronous commit of a later id of that group, in any database of the cluster, holds
off the hints of the whole group until the WAL writer flushes it. Seen in the suite: an
autovacuum worker analysing the template database's catalogues committed during the
vacuum, which then marked 308 (once 50) of 346 postings pages; a second VACUUM once the
WAL was flushed marked the rest.

So each pass waits for the WAL written so far to be flushed, vacuums, and reads how many
pages the vacuum left unmarked (``pg_class``, which VACUUM updates); a pass that left any
is followed by another (each visits only pages not yet all-visible), at most
``VACUUM_PASSES``. Under synchronous commit every commit is flushed before it is seen:
nothing waits and one pass marks everything.
"""

from __future__ import annotations

import asyncio
import time

from storage.postgres.database import Conn

#: How long each pass waits for the WAL written so far to be flushed (the WAL writer
#: flushes within three ``wal_writer_delay``, 200 ms by default). Past it the pass
#: vacuums anyway and marks what it can.
WAL_FLUSH_WAIT_S = 2.0

#: At most this many VACUUMs of the postings: a pass that leaves pages unmarked because
#: a commit elsewhere was not flushed yet is followed by another; a concurrent writer of
#: the postings (another replica's ingest) can keep pages unmarked for good, so it stops.
VACUUM_PASSES = 3

UNMARKED_POSTINGS = "SELECT relpages - relallvisible FROM pg_class WHERE oid = 'kb_postings'::regclass"


async def wal_flushed(conn: Conn, wait_s: float = WAL_FLUSH_WAIT_S) -> None:
    """Until the WAL inserted before this call is flushed, or ``wait_s`` has passed."""
    cur = await conn.execute("SELECT pg_current_wal_insert_lsn()")
    row = await cur.fetchone()
    deadline = time.monotonic() + wait_s
    while row is not None:
        cur = await conn.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn", (row[0],))
        flushed = await cur.fetchone()
        if (flushed is not None and flushed[0]) or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


async def vacuum_pass(conn: Conn, tables: str) -> int:
    """One pass: WAL flushed, ``VACUUM tables``; returns the postings pages left unmarked."""
    await wal_flushed(conn)
    await conn.execute(f"VACUUM {tables}")
    cur = await conn.execute(UNMARKED_POSTINGS)
    row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def vacuum_after_load(conn: Conn) -> int:
    """``VACUUM kb_postings, kb_chunks``, then the postings again while a pass left pages
    unmarked (at most ``VACUUM_PASSES`` in all), then ``ANALYZE kb_postings``. Returns the
    postings pages still unmarked (0 normally). ``conn``: an autocommit connection."""
    unmarked = await vacuum_pass(conn, "kb_postings, kb_chunks")
    for _ in range(VACUUM_PASSES - 1):
        if unmarked <= 0:
            break
        unmarked = await vacuum_pass(conn, "kb_postings")
    # Analysed after: an analysis commits (asynchronously, there), and a commit not yet
    # flushed holds off the hints of every transaction of its clog group.
    await conn.execute("ANALYZE kb_postings")
    return unmarked


__all__ = ["UNMARKED_POSTINGS", "VACUUM_PASSES", "WAL_FLUSH_WAIT_S", "vacuum_after_load", "vacuum_pass", "wal_flushed"]
