"""A one-off command's bulk writes beside a serving writer group: leave the file free between them.

Why: ``agentchat ingest`` (and ``buckets rm``, ``docs rm``) writes the file a running
``agentchat serve`` writes, without taking the group's writer lock
(``storage.sqlite.writer_lock``): the two processes meet only at SQLite's own write
lock. The server's writer, finding the file busy, waits in SQLite's busy handler,
which sleeps in growing steps (1, 2, 5, 10, 15, 20, 25 ... up to 100 ms) until
``busy_timeout`` (1 s) and then in its own retry back-off (50 ms growing to 1 s): it
gets in only when one of its polls falls between two of the command's writes. An
ingest writes its parts (``KBIndex.chunks_per_write``) back to back - the gaps were
only the command's own pauses between writes - so the server got in after a few of
them only: every live stream's next token waited for several writes, 1.4-1.5 s at load
4-5 for 3,000 files (``bench/kb_write_stall.py``, ``cli``; 2.5 s at load 10), against
0.6-1 s for the same ingest posted to the server. A writer that cannot commit for
``AGENT_DB_WRITE_RETRY_S`` fails what it queued.

So a command that opened the file with ``SqliteOptions.yield_to_writer_group`` asks,
after each bulk write and at most once a ``PROBE_EVERY_S``, whether a group holds the
writer lock (``held_by_a_group``: a non-blocking shared ``flock``, dropped at once). When
one does and it has work - a live run in the file, or it committed since the last gap -
the command waits before its next write until another connection has committed (SQLite's
``PRAGMA data_version`` moved: the server's writer got in; at most ``GAP_S``, longer than
the busy handler's longest sleep), and from then on ``SHARE`` times as long as its own
write took: the server's events piled up during that write, and its commits come in
batches one after another (a gap that ended at the server's first commit: largest token
delay 471-695 ms; with ``SHARE`` 0.5: 208-261 ms, 0.25: 261-511 ms, the ingest's chunks/s
the same - the command prepares its next part meanwhile; load 2-4). So beside a busy
server the command takes about 1 / (1 + ``SHARE``) of the writer's time, and the live
streams wait for one part at most.

A group with no live run that wrote nothing since the last gap gets ``IDLE_GAP_S`` (a
new run's first write may wait a few parts for a poll to fall in one; once it has
written, the gaps are long again), so an ingest beside an idle server is barely slowed.
With no group (no server) there is no gap at all: the ingest runs at full speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from storage.sqlite.writer_lock import held_by_a_group

#: How often the writer lock is asked about (a ``serve`` may start or stop meanwhile).
PROBE_EVERY_S = 1.0
#: The longest wait for a busy group's first commit: SQLite's busy handler sleeps
#: 100 ms at most between two tries, the server's first retry after a busy error 50 ms.
GAP_S = 0.25
#: A busy group's gap is at least this share of the wall time of the write before it.
SHARE = 0.5
#: The gap left to a group with no live run that wrote nothing since the last gap.
IDLE_GAP_S = 0.02
#: How often ``PRAGMA data_version`` is read during a gap.
POLL_S = 0.005


class GroupGap:
    """The gaps one process leaves between its bulk writes (module docstring)."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._probe_after = float("-inf")
        self._group = False
        #: ``data_version`` when the last gap ended.
        self._last: int | None = None
        #: Gaps left, and those the group wrote in (for tests and diagnostics).
        self.gaps = 0
        self.joined = 0

    def group_present(self, now: float) -> bool:
        if now >= self._probe_after:
            self._group = held_by_a_group(self.db_path)
            self._probe_after = now + PROBE_EVERY_S
        return self._group

    async def after_write(
        self,
        version: int,
        wrote_s: float,
        read_version: Callable[[], Awaitable[int]],
        live_runs: Callable[[], Awaitable[bool]],
    ) -> None:
        """After a bulk write committed, which took ``wrote_s`` and left its connection's
        ``PRAGMA data_version`` at ``version`` (``read_version`` reads it again): wait,
        when a group holds the file, as the module docstring says."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        if not self.group_present(start):
            self._last = None
            return
        self.gaps += 1
        busy = (self._last is not None and version != self._last) or await live_runs()
        end = start + (GAP_S if busy else IDLE_GAP_S)
        seen = version
        joined = False
        while loop.time() < end:
            await asyncio.sleep(POLL_S)
            seen = await read_version()
            if not joined and seen != version:
                # In: from now on its writer has the file for its share of the last write.
                joined = True
                self.joined += 1
                end = loop.time() + SHARE * wrote_s
        self._last = seen


__all__ = ["GAP_S", "IDLE_GAP_S", "PROBE_EVERY_S", "GroupGap"]
