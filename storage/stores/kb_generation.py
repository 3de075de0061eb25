"""The knowledge base's generation: a number every write of the knowledge base counts
up in its own transaction (table ``kb_generation``, migration step 28), and the
generations this process wrote itself.

Why: a running server keeps state derived from the stored knowledge base in memory (on
SQLite the vector matrix, on both engines text statistics and bucket schemas). A
change made by another process - ``agentchat ingest`` or ``docs rm`` while it runs, a
``--workers`` sibling, another replica - reached none of it, and a document the CLI
removed kept being scored by meaning until a restart. One indexed read of the
generation tells whether anything changed; the generations written here tell whether
it was this process (whose in-memory state followed its own writes) or another one.

The count is bumped by the writer, in the transaction of the write, after the rows: a
process that reads generation ``g`` reads, from then on, every write up to ``g``. A
transaction retried or rolled back leaves no number behind it here: a generation is
pending from its bump until ``transact`` returned, and only the committed attempt's is
recorded as this process's then.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from storage.sql import SqlEngine, Tx

T = TypeVar("T")

#: Counts the generation up; last in a write's transaction, so PostgreSQL holds the row
#: lock (which orders concurrent writers of the knowledge base) only until the commit.
BUMP = "UPDATE kb_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation"
#: The committed generation (one row, by its key).
READ = "SELECT generation FROM kb_generation WHERE id = 1"


class WrittenHere:
    """The generations this process's writes made, so that a reader can tell its own
    changes (which it applied to its memory already) from another process's.

    A write's generation is *pending* from the moment its bump returned (inside the
    transaction, before the commit) until ``transact`` returned: then it is *mine*, or
    dropped if the transaction failed (a retried attempt's number is dropped too: the
    rollback gave it back). A generation neither mine nor pending is another process's:
    a write of ours that has not bumped yet gets a higher number than any committed one
    (PostgreSQL's row lock on the counter, SQLite's single writer order the bumps), and a
    committed one of ours was pending before its commit could be read."""

    def __init__(self) -> None:
        self._mine: set[int] = set()
        #: ``_mine`` as a min-heap, so that ``forget`` drops the old ones cheaply.
        self._mine_order: list[int] = []
        self._pending: set[int] = set()
        #: Everything up to this was taken in by the reader (``forget``): no keeping.
        self._upto = 0

    async def write(self, sql: SqlEngine, run: Callable[[Tx], Coroutine[Any, Any, T]]) -> T:
        """``run`` in one transaction of ``sql`` that also counts the generation up."""
        bumped: list[int] = []

        async def counted(tx: Tx) -> tuple[T, int]:
            out = await run(tx)
            row = await tx.fetchone(BUMP)
            generation = int(row[0]) if row else 0
            if generation:
                self._pending.add(generation)  # before the commit can make it readable
                bumped.append(generation)
            return out, generation

        try:
            # Awaits only its Tx: SQLite runs it whole on the writer's thread (one hop).
            out, generation = await sql.transact_whole(counted)
        finally:
            for g in bumped:
                self._pending.discard(g)
        if generation > self._upto and generation not in self._mine:
            self._mine.add(generation)
            heapq.heappush(self._mine_order, generation)
        return out

    def only_mine(self, seen: int, current: int) -> bool | None:
        """Whether every generation after ``seen`` up to ``current`` was written here:
        ``True``; ``False``: some other process wrote one; ``None``: cannot tell yet -
        each one in the range is mine or pending, and a pending one may be committed
        but not yet recorded (ask again after it)."""
        if current <= seen:
            return True
        if current - seen > len(self._mine) + len(self._pending):
            return False  # more generations than this process has written or is writing
        pending = False
        for g in range(seen + 1, current + 1):
            if g in self._mine:
                continue
            if g not in self._pending:
                return False
            pending = True
        return None if pending else True

    def forget(self, upto: int) -> None:
        """The reader has seen everything up to ``upto``: those need no keeping."""
        self._upto = max(self._upto, upto)
        order = self._mine_order
        while order and order[0] <= upto:
            self._mine.discard(heapq.heappop(order))


async def read_generation(sql: SqlEngine) -> int:
    row = await sql.fetchone(READ)
    return int(row[0]) if row else 0


__all__ = ["BUMP", "READ", "WrittenHere", "read_generation"]
