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
transaction retried or rolled back leaves no number behind it here: only the committed
attempt's generation is recorded, once ``transact`` returned.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from storage.sql import SqlEngine, Tx

T = TypeVar("T")

#: Counts the generation up; last in a write's transaction, so PostgreSQL holds the row
#: lock (which orders concurrent writers of the knowledge base) only until the commit.
BUMP = "UPDATE kb_generation SET generation = generation + 1 WHERE id = 1 RETURNING generation"
#: The committed generation (one row, by its key).
READ = "SELECT generation FROM kb_generation WHERE id = 1"


class WrittenHere:
    """The generations this process's writes made, so that a reader can tell its own
    changes (which it applied to its memory already) from another process's."""

    def __init__(self) -> None:
        self._mine: set[int] = set()
        self._writing = 0

    async def write(self, sql: SqlEngine, run: Callable[[Tx], Awaitable[T]]) -> T:
        """``run`` in one transaction of ``sql`` that also counts the generation up."""

        async def counted(tx: Tx) -> tuple[T, int]:
            out = await run(tx)
            row = await tx.fetchone(BUMP)
            return out, int(row[0]) if row else 0

        self._writing += 1
        try:
            out, generation = await sql.transact(counted)
        finally:
            self._writing -= 1
        if generation:
            self._mine.add(generation)
        return out

    def only_mine(self, seen: int, current: int) -> bool | None:
        """Whether every generation after ``seen`` up to ``current`` was written here:
        ``True``; ``False``: some other process wrote one; ``None``: cannot tell yet - a
        write of this process is under way, whose generation may be committed but not
        recorded (ask again after it)."""
        if current <= seen:
            return True
        if current - seen <= len(self._mine) and all(g in self._mine for g in range(seen + 1, current + 1)):
            return True
        return None if self._writing else False

    def forget(self, upto: int) -> None:
        """The reader has seen everything up to ``upto``: those need no keeping."""
        self._mine = {g for g in self._mine if g > upto}


async def read_generation(sql: SqlEngine) -> int:
    row = await sql.fetchone(READ)
    return int(row[0]) if row else 0


__all__ = ["BUMP", "READ", "WrittenHere", "read_generation"]
