"""Retention on either engine (issue 25): compact the event logs of runs finished long
ago (``storage.event_folding`` says how and why replay stays equal), and find idle
conversations to delete (the history store deletes them).

Work is done in batches, one transaction each, so a pass never holds the writer (SQLite)
or many row locks (PostgreSQL) for long. On PostgreSQL each batch first tries the
retention advisory lock: while another replica is in a pass, this one does nothing
(``RetentionPass.ran`` is ``False``) instead of racing it row by row.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from storage.dialect import Dialect
from storage.event_folding import folds
from storage.sql import Plan, SqlEngine
from storage.stores.event_log import event_log

#: ``pg_try_advisory_xact_lock`` key of a retention batch ("RETAINER" as an int64).
RETENTION_LOCK = 0x52455441494E4552


class SqlRetentionStore:
    def __init__(self, sql: SqlEngine) -> None:
        self.sql = sql
        #: SQLite: settles the live log before a batch (``storage.sqlite.log_settler``),
        #: so the runs ended since are compacted too; only settled runs are.
        self.settle_first: Callable[[], Awaitable[None]] | None = None

    async def compactable(self, finished_before: float, limit: int) -> list[str]:
        """Ids of runs that ended before ``finished_before`` and are not compacted yet."""
        rows = await self.sql.fetchall(
            "SELECT id FROM runs WHERE finished_at IS NOT NULL AND finished_at < ? "
            "AND events_compacted_at IS NULL ORDER BY finished_at LIMIT ?",
            (finished_before, limit),
        )
        return [str(r[0]) for r in rows]

    async def compact(self, run_ids: Sequence[str]) -> tuple[bool, int]:
        """Fold the text events of ``run_ids`` (finished runs) in one transaction; returns
        (whether this process held the retention lock, rows removed)."""
        if self.settle_first is not None:
            await self.settle_first()
        return await self.sql.transact_plan(lambda d: self._compact(d, list(run_ids)))

    def _compact(self, d: Dialect, run_ids: list[str]) -> Plan[tuple[bool, int]]:
        if d.name == "postgres":
            held = yield ("fetchone", "SELECT pg_try_advisory_xact_lock(?)", (RETENTION_LOCK,))
            if held is None or not held[0]:
                return False, 0
        # SQLite: a run whose events are not all in ``run_events`` yet is left for a later
        # pass (``settle_first`` moved those ended before; ``storage.stores.event_log``).
        log = event_log(d)
        removed = 0
        for run_id in run_ids:
            # Still finished and not compacted (another process may have done it since).
            row = yield (
                "fetchone",
                "SELECT 1 FROM runs WHERE id = ? AND finished_at IS NOT NULL AND events_compacted_at IS NULL"
                + log.settled
                + d.for_update,
                (run_id,),
            )
            if row is None:
                continue
            rows = yield (
                "fetchall",
                "SELECT seq, event, data FROM run_events WHERE run_id = ? ORDER BY seq",
                (run_id,),
            )
            for fold in folds([(int(s), str(e), str(x)) for s, e, x in rows]):
                removed += yield (
                    "execute",
                    "DELETE FROM run_events WHERE run_id = ? AND seq >= ? AND seq < ?",
                    (run_id, fold.first, fold.last),
                )
                yield (
                    "execute",
                    "UPDATE run_events SET data = ?, folded = ? WHERE run_id = ? AND seq = ?",
                    (d.text(fold.data), fold.folded, run_id, fold.last),
                )
            yield ("execute", f"UPDATE runs SET events_compacted_at = {d.now} WHERE id = ?", (run_id,))
        return True, int(removed)


__all__ = ["RETENTION_LOCK", "SqlRetentionStore"]
