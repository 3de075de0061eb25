"""When SQLite's live log is settled, and what a settle does with a run it cannot move.

``storage.stores.event_log`` says what a settle is (the events of ended runs move from
``run_log`` into ``run_events`` in one transaction, the log is trimmed). This decides
when, for the process that writes the events:

* every ``SETTLE_ROWS`` events it wrote (``note``): under load, one pass over the log
  per ~2,000 tokens;
* ``SETTLE_EVERY_S`` after the last settle when it wrote any event since, and once
  that long after start (ended runs a killed process left unsettled): a quiet process
  settles too, instead of holding its last runs in the log until 2,000 more events;
* at a clean close (``aclose``), when it wrote any event since the last settle.

A settle must never stop for good on one bad run. The log has no key but its id, so a
``(run_id, seq)`` written twice — two serving processes on one file before the writer
lock (``storage.sqlite.writer_lock``), or any other bug — reached the settle's insert,
which ``run_events``' key refused whole: nothing was settled again, compaction failed,
the log grew without bound, and ``/readyz`` said nothing. Now a settle refused that way
(``sqlite3.IntegrityError``) is done again *reconciling*: the runs with conflicting rows
are named first (``EventLog.conflicts``), then every due run moves, keeping the first
written row of each seq of the bad ones (deterministic; the others are trimmed with the
log). It is never silent: an ERROR line per run (once), ``agentchat_run_log_*``
counters, and ``/readyz``'s ``db.live_log``. A settle that fails otherwise (the disk)
is counted and logged, and the timer does it again ``SETTLE_EVERY_S`` later whether or
not anything was written since (a quiet process too); ``last_error`` is shown until a
settle succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the module is imported by what must stay light (app.cli.writer_wait)
    from storage.dialect import Dialect
    from storage.sql import Plan, SqlEngine
    from storage.stores.event_log import EventLog

log = logging.getLogger("agentchat.storage")

#: Events written between two settles under load (one pass over the log per ~2,000 tokens).
SETTLE_ROWS = 2_000
#: A quiet process settles this long after the last settle (when it wrote since).
SETTLE_EVERY_S = 5.0
#: Reconciled runs ``/readyz`` names (the latest).
SHOWN_RUNS = 10


@dataclass(slots=True)
class SettleStats:
    """What the settles of this process did (``/metrics``, ``/readyz``)."""

    settles: int = 0
    failures: int = 0
    reconciled_runs: int = 0
    dropped_rows: int = 0
    #: The latest reconciled runs: ``{"run_id", "rows", "kept"}``.
    recent: list[dict[str, Any]] = field(default_factory=list)
    last_error: str | None = None


class LogSettler:
    """Settles one file's live log now and then (module docstring)."""

    def __init__(self, sql: SqlEngine, event_log: EventLog, *, every_s: float = SETTLE_EVERY_S) -> None:
        self.sql = sql
        self.log = event_log
        self.every_s = every_s
        self.stats = SettleStats()
        #: Events this process wrote since the last settle began.
        self._written = 0
        self._first = True
        #: When the last settle began (the event loop's clock).
        self._last = 0.0
        #: The last settle failed: the timer tries again even when nothing was written
        #: since (a quiet process would otherwise leave its ended runs in the log).
        self._retry = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reported: set[str] = set()

    def note(self, events: int) -> None:
        """``events`` were queued on the writer: a settle is due every ``SETTLE_ROWS``."""
        self._written += events
        if self._written >= SETTLE_ROWS:
            self._wake.set()

    def start(self) -> None:
        if self.log.live and self._task is None:
            self._task = asyncio.create_task(self._run(), name="sqlite-log-settler")

    async def aclose(self) -> None:
        """Stop the timer; settle what this process wrote since the last settle (the
        writer still runs: the storage's close calls this first)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.log.live and (self._written > 0 or self._retry):
            with contextlib.suppress(Exception):  # counted and logged by ``settle``
                await self.settle()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.every_s)
            # The timer: due when ``every_s`` (read now) has passed and there is work.
            idle = loop.time() - self._last < self.every_s or not (self._written > 0 or self._first or self._retry)
            if not self._wake.is_set() and idle:
                continue
            with contextlib.suppress(Exception):  # counted and logged by ``settle``; the next one retries
                await self.settle()

    async def settle(self, *, everything: bool = False) -> None:
        """Settle now, behind every write queued before; a refused settle is done again
        reconciling (module docstring). Raises when it could not be done at all; the
        timer then tries again ``every_s`` later, written to since or not."""
        self._wake.clear()
        self._written, self._first = 0, False
        self._last = asyncio.get_running_loop().time()
        statements = self.log.settle(everything=everything)
        if not statements:
            return
        try:
            await self.sql.commit(statements)
        except sqlite3.IntegrityError:
            await self._reconcile(everything)
        except Exception as exc:
            self._failed(exc)
            raise
        self.stats.settles += 1
        if self._retry:
            self._retry = False
            log.warning("the live log settled again after failing", extra={"error": self.stats.last_error})
            self.stats.last_error = None

    async def _reconcile(self, everything: bool) -> None:
        try:
            bad = await self.sql.transact_plan(lambda d: self._reconciling(d, everything))
        except Exception as exc:
            self._failed(exc)
            raise
        for run_id, rows, kept in bad:
            self.stats.reconciled_runs += 1
            self.stats.dropped_rows += rows - kept
            self.stats.recent = [*self.stats.recent, {"run_id": run_id, "rows": rows, "kept": kept}][-SHOWN_RUNS:]
            if run_id not in self._reported:
                self._reported.add(run_id)
                log.error(
                    "the live log held conflicting rows of a run (a seq written twice); settled it keeping the "
                    "first-written row of each seq",
                    extra={"run_id": run_id, "rows": rows, "kept": kept, "dropped": rows - kept},
                )

    def _reconciling(self, d: Dialect, everything: bool) -> Plan[list[tuple[str, int, int]]]:
        rows = yield ("fetchall", *self.log.conflicts(everything=everything))
        for sql, params in self.log.settle(everything=everything, reconciling=True):
            yield ("execute", sql, params)
        return [(str(r), int(n), int(k)) for r, n, k in rows]

    def _failed(self, exc: BaseException) -> None:
        self.stats.failures += 1
        self._retry = True
        message = str(exc) or type(exc).__name__
        if message != self.stats.last_error:
            log.error("settling the live log failed; the next settle retries", extra={"error": message})
        self.stats.last_error = message

    def readiness(self) -> dict[str, Any]:
        """``/readyz``'s ``db.live_log``: informational — a reconciled run was settled and
        the service goes on — but shown, with the runs, until the process restarts."""
        s = self.stats
        report: dict[str, Any] = {"settles": s.settles, "settle_failures": s.failures}
        if s.reconciled_runs:
            report["reconciled_runs"] = s.reconciled_runs
            report["dropped_rows"] = s.dropped_rows
            report["recent"] = list(s.recent)
            report["detail"] = (
                "runs whose live-log rows repeated a seq were settled keeping the first-written row of each "
                "(see the ERROR log lines)"
            )
        if s.last_error is not None:
            report["last_error"] = s.last_error
        return report


__all__ = ["SETTLE_EVERY_S", "SETTLE_ROWS", "LogSettler", "SettleStats"]
