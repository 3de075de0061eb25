"""Where a run's events are kept, as SQL: one clustered table (PostgreSQL), or that
table plus SQLite's live log (issue 23).

``run_events`` is keyed by ``(run_id, seq)`` — on SQLite ``WITHOUT ROWID``, so each
run's events are clustered and a replay reads a few pages. Streaming into it is what
cost SQLite's writer most at scale: one group commit carries ~40 tokens of ~40 runs and
rewrote one 4 KiB leaf page per run for an ~80-byte row (28 µs of CPU per token at 300
live runs, most of it the kernel's WAL writes; ``bench/sqlite_token_rows.py``).

So on SQLite the events of runs not yet settled are appended to ``run_log`` instead:
``INTEGER PRIMARY KEY AUTOINCREMENT`` in insertion order and no other index, so one
group commit appends to the log's last page or two whatever the number of runs in it
(8-12 µs per token at 300 runs in that bench, 25-28 µs clustered). Its rules:

* A run's ``runs.log_from`` is the log's next id when it was admitted (a trigger, in the
  admission's own transaction, ``storage.sqlite.migration_steps.live_log``). The writer
  is serialised and the ids never reused (``AUTOINCREMENT``), so every later event of
  the run has an id ``>= log_from``: the run's events are its ``run_events`` rows plus
  the log's rows from ``log_from`` on that name it (``log_from`` NULL: none).
* Settling (``settle``) moves the log rows of every run ended since into ``run_events``
  and clears their ``log_from`` in one transaction, so a reader finds each event in one
  place or the other, never neither and never both. It runs now and then on the writer
  (``storage.sqlite.log_settler``: every ``SETTLE_ROWS`` events, on a timer when the
  process is quiet, at close), not in each ending: without
  an index on the log, finding one run's rows scans the log from its ``log_from`` — the
  rows of every run live meanwhile (~18,000 at 300 runs of 60 tokens: 32-37 µs per token
  measured when each ending moved its own rows, more than the clustered table's 25-28) —
  while one pass for all the runs ended since costs about a row visit per token.
* A live run whose ``log_from`` lags ``REBASE_ROWS`` behind the log's end (a run parked
  for an approval for hours) is settled while it lives: its rows so far move and its
  ``log_from`` becomes the log's next id, in the same transaction; so the log below is
  never held for it.
* Then the log is trimmed below the smallest ``log_from`` still set: a contiguous range
  of whole pages, cheap to delete, and only copies already settled.

PostgreSQL keeps the one clustered table (``CLUSTERED``): its ``run_events`` is a heap
(rows already appended in insertion order) with a B-tree on the key, replicas write
concurrently (sequence values are not committed in order, so a ``log_from`` would not
bound a run's rows), and its tests gain nothing from a second path; its migration 29 is
empty.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.dialect import Dialect, Statement
from storage.records import TERMINAL_EVENT, TERMINAL_STATUSES

_ENDED_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_STATUSES) + ")"
#: The log's next id (SQLite's ``AUTOINCREMENT`` counter: ids are never reused).
NEXT_LOG_ID = "(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'run_log'), 0) + 1)"
#: A live run's ``log_from`` this far behind the log's next id is settled while it lives.
REBASE_ROWS = 100_000


@dataclass(frozen=True, slots=True)
class EventLog:
    """The SQL of one layout (see the module docstring)."""

    live: bool
    #: One event of a step (``run_id, seq, event, data``). Made once: it is used for every
    #: token, and the writer groups a batch's statements by this very string.
    insert: str = field(init=False)

    def __post_init__(self) -> None:
        table = "run_log" if self.live else "run_events"
        object.__setattr__(self, "insert", f"INSERT INTO {table}(run_id, seq, event, data) VALUES (?, ?, ?, ?)")

    def last_seq(self, run: str = "r") -> str:
        """The largest seq of the run ``{run}.id`` (0 without events). In the log, the
        run's last row by id is its largest seq (a run's events are appended in order):
        read backwards from the log's end, it is near there for a live run."""
        clustered = f"(SELECT COALESCE(MAX(e.seq), 0) FROM run_events e WHERE e.run_id = {run}.id)"
        if not self.live:
            return clustered
        logged = (
            f"COALESCE((SELECT l.seq FROM run_log l WHERE l.id >= {run}.log_from AND l.run_id = {run}.id "
            "ORDER BY l.id DESC LIMIT 1), 0)"
        )
        return f"MAX({clustered}, {logged})"

    def after(self, run_id: str, after: int, limit: int) -> Statement:
        """``seq, event, data, folded`` of the run's events after ``after``, in order."""
        clustered = "SELECT seq, event, data, folded FROM run_events WHERE run_id = ? AND seq > ?"
        if not self.live:
            return f"{clustered} ORDER BY seq LIMIT ?", (run_id, after, limit)
        return (
            f"{clustered} UNION ALL SELECT seq, event, data, NULL FROM run_log "
            "WHERE id >= (SELECT log_from FROM runs WHERE id = ?) AND run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after, run_id, run_id, after, limit),
        )

    def first_event(self, name: str, run: str = "r") -> str:
        """The data of the run's first event called ``name`` (one per run: its ending)."""
        clustered = f"(SELECT e.data FROM run_events e WHERE e.run_id = {run}.id AND e.event = '{name}' LIMIT 1)"
        if not self.live:
            return clustered
        logged = (
            f"(SELECT l.data FROM run_log l WHERE l.id >= {run}.log_from AND l.run_id = {run}.id "
            f"AND l.event = '{name}' ORDER BY l.id LIMIT 1)"
        )
        return f"COALESCE({clustered}, {logged})"

    def last_event(self, name: str, run: str = "r") -> str:
        """The data of the run's last event called ``name`` (the log's rows are later)."""
        clustered = (
            f"(SELECT e.data FROM run_events e WHERE e.run_id = {run}.id AND e.event = '{name}' "
            "ORDER BY e.seq DESC LIMIT 1)"
        )
        if not self.live:
            return clustered
        logged = (
            f"(SELECT l.data FROM run_log l WHERE l.id >= {run}.log_from AND l.run_id = {run}.id "
            f"AND l.event = '{name}' ORDER BY l.id DESC LIMIT 1)"
        )
        return f"COALESCE({logged}, {clustered})"

    @property
    def settled(self) -> str:
        """Appended to a condition on ``runs``: its events are all in ``run_events``."""
        return " AND log_from IS NULL" if self.live else ""

    def _due(self, everything: bool) -> tuple[str, int]:
        """The condition on ``runs`` of a settle's runs, and its parameter (the lag)."""
        lag = 0 if everything else REBASE_ROWS
        return f"log_from IS NOT NULL AND (status IN {_ENDED_SQL} OR log_from <= {NEXT_LOG_ID} - ?)", lag

    def settle(self, *, everything: bool = False, reconciling: bool = False) -> list[Statement]:
        """Move the log rows of every ended run (and of live runs past ``REBASE_ROWS``,
        or of every live run with ``everything``) into ``run_events``, then trim the
        log; one transaction's statements (none for the clustered layout).

        ``reconciling``: the log holds a row whose ``(run_id, seq)`` is another's (a
        duplicate written by two processes on one file before the writer lock,
        ``storage.sqlite.writer_lock``, or one already in ``run_events``), which the plain
        settle's insert refuses whole. Then the first-written row of each seq is kept
        (``run_events``' before the log's, then the log's lowest id), and of those only
        the ones up to the run's first kept ending (``TERMINAL_EVENT``): two writers'
        streams of one run interleave by seq, and a second writer that went on longer
        left seqs the first never wrote after the first's ending - kept, the run would be
        stored with two endings and content after the first. The others are left to the
        trim: deterministic, and every other run moves as usual. The caller says so
        (``storage.sqlite.log_settler``: ``conflicts`` names the runs first)."""
        if not self.live:
            return []
        due, lag = self._due(everything)
        if reconciling:
            move = (
                f"{self._kept_rows(due)} INSERT INTO run_events(run_id, seq, event, data) "
                "SELECT k.run_id, k.seq, k.event, k.data FROM kept k ORDER BY k.run_id, k.seq"
            )
        else:
            # One pass over the log from the smallest ``log_from`` due; each row is
            # taken only from its own run's ``log_from`` on (a run settled while it
            # lived left copies below its new ``log_from``, trimmed later).
            move = (
                f"WITH due(id, log_from) AS MATERIALIZED (SELECT id, log_from FROM runs WHERE {due}) "
                "INSERT INTO run_events(run_id, seq, event, data) SELECT l.run_id, l.seq, l.event, l.data "
                "FROM run_log l JOIN due d ON d.id = l.run_id AND l.id >= d.log_from "
                "WHERE l.id >= (SELECT MIN(log_from) FROM due) ORDER BY l.run_id, l.seq"
            )
        return [
            (move, (lag,)),
            (
                # ``log_first``/``log_until``: the range a conversation delete sweeps later.
                f"UPDATE runs SET log_first = COALESCE(log_first, log_from), "
                f"log_until = CASE WHEN status IN {_ENDED_SQL} THEN {NEXT_LOG_ID} ELSE log_until END, "
                f"log_from = CASE WHEN status IN {_ENDED_SQL} THEN NULL ELSE {NEXT_LOG_ID} END "
                f"WHERE {due}",
                (lag,),
            ),
            (
                "DELETE FROM run_log WHERE id < "
                f"COALESCE((SELECT MIN(log_from) FROM runs WHERE log_from IS NOT NULL), {NEXT_LOG_ID})",
                (),
            ),
        ]

    @staticmethod
    def _kept_rows(due: str) -> str:
        """The CTEs of a reconciling settle (``settle``): ``due`` the runs it moves,
        ``logged`` their log rows from each run's ``log_from``, ``kept`` the rows that go
        into ``run_events`` — the first-written of each seq not there already, up to
        the run's first ending among those and ``run_events``' own."""
        return (
            f"WITH due(id, log_from) AS MATERIALIZED (SELECT id, log_from FROM runs WHERE {due}), "
            "logged AS MATERIALIZED (SELECT l.id, l.run_id, l.seq, l.event, l.data FROM run_log l "
            "JOIN due d ON d.id = l.run_id AND l.id >= d.log_from WHERE l.id >= (SELECT MIN(log_from) FROM due)), "
            "firsts AS MATERIALIZED (SELECT g.run_id, g.seq, g.event, g.data FROM logged g "
            "WHERE g.id IN (SELECT MIN(id) FROM logged GROUP BY run_id, seq) "
            "AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = g.run_id AND e.seq = g.seq)), "
            "ending(run_id, seq) AS (SELECT run_id, MIN(seq) FROM ("
            f"SELECT run_id, seq FROM firsts WHERE event = '{TERMINAL_EVENT}' UNION ALL "
            f"SELECT e.run_id, e.seq FROM run_events e JOIN due d ON d.id = e.run_id WHERE e.event = '{TERMINAL_EVENT}'"
            ") GROUP BY run_id), "
            "kept AS (SELECT f.run_id, f.seq, f.event, f.data FROM firsts f LEFT JOIN ending x ON x.run_id = f.run_id "
            "WHERE x.seq IS NULL OR f.seq <= x.seq)"
        )

    def conflicts(self, *, everything: bool = False) -> Statement:
        """``run_id, rows, kept`` of each run a settle would move with rows that cannot
        all go into ``run_events``: two with one seq, one whose seq is there already, or
        one after the run's first kept ending (``rows`` it has in the log from its
        ``log_from``, ``kept`` the rows that go: ``settle``'s reconciling rule)."""
        due, lag = self._due(everything)
        return (
            f"{self._kept_rows(due)}, "
            "counted(run_id, rows) AS (SELECT run_id, COUNT(*) FROM logged GROUP BY run_id), "
            "going(run_id, kept) AS (SELECT run_id, COUNT(*) FROM kept GROUP BY run_id) "
            "SELECT c.run_id, c.rows, COALESCE(g.kept, 0) FROM counted c LEFT JOIN going g ON g.run_id = c.run_id "
            "WHERE c.rows > COALESCE(g.kept, 0) ORDER BY c.run_id",
            (lag,),
        )

    def delete_conversation(self) -> list[tuple[str, str]]:
        """``(kind, portable SQL)`` taking ``(user_id, conversation_id)``: counting, then
        deleting every event of the conversation's runs (all ended: the delete refuses
        otherwise); ``count`` statements return how many events are still unsettled."""
        owned = "SELECT id FROM runs WHERE user_id = ? AND conversation_id = ?"
        out = [("delete", f"DELETE FROM run_events WHERE run_id IN ({owned})")]
        if self.live:
            out = [
                (
                    "count",
                    "SELECT COUNT(*) FROM runs r CROSS JOIN run_log l ON l.id >= r.log_from AND l.run_id = r.id "
                    "WHERE r.user_id = ? AND r.conversation_id = ? AND r.log_from IS NOT NULL",
                ),
                *out,
                # Each run's rows are within [log_first or log_from, log_until): a rowid
                # range per run, not a scan of the whole log (a settled run's copies
                # may be left above a live run's ``log_from`` until the log's trim).
                (
                    "sweep",
                    "DELETE FROM run_log WHERE id IN (SELECT l.id FROM runs r JOIN run_log l "
                    "ON l.id >= COALESCE(r.log_first, r.log_from) "
                    f"AND l.id < COALESCE(r.log_until, {NEXT_LOG_ID}) AND l.run_id = r.id "
                    "WHERE r.user_id = ? AND r.conversation_id = ? "
                    "AND COALESCE(r.log_first, r.log_from) IS NOT NULL)",
                ),
            ]
        return out


CLUSTERED = EventLog(live=False)
LIVE_LOG = EventLog(live=True)


def event_log(dialect: Dialect) -> EventLog:
    """The layout of ``dialect``'s engine."""
    return LIVE_LOG if dialect.live_log else CLUSTERED


__all__ = ["CLUSTERED", "LIVE_LOG", "NEXT_LOG_ID", "REBASE_ROWS", "EventLog", "event_log"]
