"""What the writer connection adds to SQLite's live log of run events: every event of a
run is after the run's last one (issue 23).

``run_events`` refused a second event with a stored ``(run_id, seq)`` by its key, and
the writer then fails only that step (``storage.writer``). The live log has no key but
its id (``storage.stores.event_log``: an index on the run would dirty one page per run
again), so the writer's connection keeps each run's last seq in a temporary table —
memory, never the WAL — and a temporary trigger aborts an event whose seq is not past
it, with ``RUN_EVENT_NOT_AFTER_LAST`` (a constraint error: only its step fails). It is
transactional: a batch rolled back takes its heads back with it. A run not seen yet by
this connection (a new process, a run taken over; one admitted here starts at 0) is
looked up once: the largest seq
of its ``run_events`` rows and its last row in the log. Several processes on one file
(``--workers``) each check their own writes; two of them writing one run is what the
lease epochs fence off (``storage.sqlite.runs``). Two process groups on one file would
each pass their own check; ``agentchat serve`` holds the file's writer lock so there is
only one (``storage.sqlite.writer_lock``), and a settle that still meets a seq written
twice reconciles it instead of failing (``storage.sqlite.log_settler``). An ending
forgets the run's head.
"""

from __future__ import annotations

from storage.records import TERMINAL_STATUSES

RUN_EVENT_NOT_AFTER_LAST = "run_event_not_after_the_last"
_ENDED_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_STATUSES) + ")"
_STORED_LAST = (
    "MAX(COALESCE((SELECT MAX(e.seq) FROM main.run_events e WHERE e.run_id = NEW.run_id), 0), "
    "COALESCE((SELECT l.seq FROM main.run_log l WHERE l.id >= (SELECT log_from FROM main.runs WHERE id = NEW.run_id) "
    "AND l.run_id = NEW.run_id ORDER BY l.id DESC LIMIT 1), 0))"
)

#: Run once on the writer connection after the migrations (temporary: per connection).
WRITER_SETUP: tuple[str, ...] = (
    "CREATE TEMP TABLE IF NOT EXISTS run_log_heads (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TEMP TRIGGER IF NOT EXISTS run_log_in_order BEFORE INSERT ON main.run_log BEGIN "
    f"SELECT RAISE(ABORT, '{RUN_EVENT_NOT_AFTER_LAST}') WHERE NEW.seq <= "
    f"COALESCE((SELECT seq FROM run_log_heads WHERE run_id = NEW.run_id), {_STORED_LAST}); "
    "INSERT OR REPLACE INTO run_log_heads(run_id, seq) VALUES (NEW.run_id, NEW.seq); END",
    # A run admitted on this connection has no event yet: no lookup at its first one.
    "CREATE TEMP TRIGGER IF NOT EXISTS run_log_heads_admit AFTER INSERT ON main.runs "
    f"WHEN NEW.status NOT IN {_ENDED_SQL} BEGIN "
    "INSERT OR REPLACE INTO run_log_heads(run_id, seq) VALUES (NEW.id, 0); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS run_log_heads_end AFTER UPDATE OF status ON main.runs "
    f"WHEN NEW.status IN {_ENDED_SQL} BEGIN DELETE FROM run_log_heads WHERE run_id = NEW.id; END",
)

__all__ = ["RUN_EVENT_NOT_AFTER_LAST", "WRITER_SETUP"]
