"""The SQLite engine's migration steps for durable runs: input and checkpoints (2), the
run summary (3), idempotency keys (6), leases (9), cross-replica cancels (14) and the
request fingerprint an idempotency key was first used for (31).
Step 22 (lease epochs) is portable, in ``storage.migration_runner``.

Why apart: what the run engine (``app/runs``) relies on in the database, read together
when a lease or a resume misbehaves.
"""

from __future__ import annotations

# Durable execution: a run keeps its input until it ends (so another process can carry
# it on), its checkpoint (the step state, rewritten with the events of each step), and
# the last event sequence the checkpoint covers.
DURABLE_RUNS = (
    "ALTER TABLE runs ADD COLUMN input BLOB",
    "ALTER TABLE runs ADD COLUMN checkpoint BLOB",
    "ALTER TABLE runs ADD COLUMN checkpoint_seq INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE runs ADD COLUMN multitask TEXT NOT NULL DEFAULT 'enqueue'",
    "ALTER TABLE runs ADD COLUMN started_at REAL",
    "ALTER TABLE runs ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS runs_unfinished ON runs(status, created_at) "
    "WHERE status IN ('queued', 'running', 'interrupted')",
    "CREATE INDEX IF NOT EXISTS runs_conversation ON runs(conversation_id, created_at)",
    "ALTER TABLE messages ADD COLUMN run_id TEXT",
    "DROP TABLE IF EXISTS app_migrations",
    "DROP TABLE IF EXISTS kb_migrations",
    "DROP TABLE IF EXISTS keywords_migrations",
    "DROP TABLE IF EXISTS external_results_migrations",
    "DROP TABLE IF EXISTS drafts_migrations",
)

# Seed 001: what a run did, recorded when it ends (tool calls made, tools used, keywords
# indexed), so the success criteria can be read per run.
RUN_SUMMARY = (
    "ALTER TABLE runs ADD COLUMN tool_call_count INTEGER",
    "ALTER TABLE runs ADD COLUMN used_tools TEXT",
    "ALTER TABLE runs ADD COLUMN keyword_count INTEGER",
)

# A client's ``Idempotency-Key`` names the run it started, per user, so a retried
# ``POST /v1/agent/chat`` resumes that run instead of starting another. NULL for runs
# started without one (a partial unique index: any number of those).
RUN_IDEMPOTENCY = (
    "ALTER TABLE runs ADD COLUMN idempotency_key TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_runs_idempotency ON runs(user_id, idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
)

# Run ownership: the process executing a run holds a lease on it (``lease_owner``,
# ``lease_until`` in epoch seconds), renewed while the run is live; a run whose lease
# expired is claimed by the next process that looks.
RUN_LEASES = (
    "ALTER TABLE runs ADD COLUMN lease_owner TEXT",
    "ALTER TABLE runs ADD COLUMN lease_until REAL",
)

# A cancel asked for on any replica (issue 21): marked on the run's row, so the replica
# executing the run — or the next one to claim it — ends it ``cancelled``.
RUN_CANCEL_REQUESTS = ("ALTER TABLE runs ADD COLUMN cancel_requested_at REAL",)

# What an ``Idempotency-Key`` was first used for: a sha256 of the request's canonical
# encoding (never its text), so a key reused for a different request is refused (422)
# instead of replaying the first run. NULL for runs without a key and for rows stored
# before this step (those keep the old rule: any body resumes).
RUN_REQUEST_FINGERPRINT = ("ALTER TABLE runs ADD COLUMN request_fingerprint TEXT",)
