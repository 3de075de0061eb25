"""SQLite's migration step 29: the live log of runs not yet settled (issue 23).

Events of unfinished runs are appended to ``run_log`` instead of the clustered
``run_events`` (``storage.stores.event_log`` says why and how both are read). What the
file itself keeps true, whatever code path writes a run:

* ``run_log`` is ``INTEGER PRIMARY KEY AUTOINCREMENT`` with no other index: rows in
  insertion order, and an id is never reused even once the log's last rows are trimmed
  (a reused id could fall below a live run's ``log_from`` and hide its event).
* ``runs.log_from`` is set when a run is inserted not ended (a trigger: inside the
  admission's own transaction, on the one writer, so every later event of the run has
  an id at least that). A partial index finds the few runs that have one.
* A run unfinished when the file is migrated keeps its events so far in ``run_events``
  and gets the new log's first id: its later events go to the log, and a reader reads
  both.
"""

from __future__ import annotations

from storage.records import TERMINAL_STATUSES
from storage.stores.event_log import NEXT_LOG_ID

_ENDED_SQL = "(" + ", ".join(f"'{s}'" for s in TERMINAL_STATUSES) + ")"

LIVE_LOG = (
    "CREATE TABLE IF NOT EXISTS run_log (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, "
    "seq INTEGER NOT NULL, event TEXT NOT NULL, data TEXT NOT NULL)",
    "ALTER TABLE runs ADD COLUMN log_from INTEGER",
    "CREATE INDEX IF NOT EXISTS runs_log_from ON runs(log_from) WHERE log_from IS NOT NULL",
    "CREATE TRIGGER IF NOT EXISTS runs_log_from_at_admission AFTER INSERT ON runs "
    f"WHEN NEW.log_from IS NULL AND NEW.status NOT IN {_ENDED_SQL} BEGIN "
    f"UPDATE runs SET log_from = {NEXT_LOG_ID} WHERE rowid = NEW.rowid; END",
    f"UPDATE runs SET log_from = {NEXT_LOG_ID} WHERE status NOT IN {_ENDED_SQL}",
)

#: Step 30: where a run's rows in the log were, once it is settled, so a conversation
#: delete sweeps only that range (``EventLog.delete_conversation``): ``log_first`` is
#: its first ``log_from`` (kept when a settle moves or clears it), ``log_until`` the
#: log's next id when its ending was settled (every row of the run is below it). Runs
#: settled before this step keep neither: their rows left in the log, if any, go with
#: the log's trim.
LIVE_LOG_SPANS = (
    "ALTER TABLE runs ADD COLUMN log_first INTEGER",
    "ALTER TABLE runs ADD COLUMN log_until INTEGER",
    "UPDATE runs SET log_first = log_from WHERE log_from IS NOT NULL",
)

__all__ = ["LIVE_LOG", "LIVE_LOG_SPANS"]
