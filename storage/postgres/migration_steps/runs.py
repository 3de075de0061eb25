"""The PostgreSQL engine's migration steps for durable runs: input and checkpoints (2),
the run summary (3), idempotency keys (6), leases (9), cross-replica cancels (14),
the lease-epoch check of every leased step (22, beside the portable column) and the
request fingerprint an idempotency key was first used for (31).

Why apart: what the run engine (``app/runs``) relies on in the database, read together
when a lease or a resume misbehaves.
"""

from __future__ import annotations

# Durable execution: a run keeps its input until it ends (so another process can carry
# it on), its checkpoint (the step state, rewritten with the events of each step), and
# the last event sequence the checkpoint covers.
DURABLE_RUNS = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS input BYTEA",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS checkpoint BYTEA",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS checkpoint_seq INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS multitask TEXT NOT NULL DEFAULT 'enqueue'",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS started_at DOUBLE PRECISION",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS resumes INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS runs_unfinished ON runs(status, seq) "
    "WHERE status IN ('queued', 'running', 'interrupted')",
    "CREATE INDEX IF NOT EXISTS runs_conversation ON runs(conversation_id, seq)",
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS run_id TEXT",
)

# Seed 001: what a run did, recorded when it ends.
RUN_SUMMARY = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS tool_call_count INTEGER",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS used_tools TEXT",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS keyword_count INTEGER",
)

# A client's ``Idempotency-Key`` names the run it started, per user (NULL without one).
RUN_IDEMPOTENCY = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS idempotency_key TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency ON runs(user_id, idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
)

# Run ownership across replicas: the replica executing a run holds a lease on it
# (``lease_owner``, ``lease_until`` in epoch seconds of the database's clock) and renews
# it while the run is live; a run whose lease expired (its replica died) is claimed by
# another. ``agentchat_hold_lease`` is the first statement of every step a leased run
# writes: it renews the lease, or raises (``run_lease_lost``) when another replica took
# the run over — the step commits nothing and its writer abandons the run.
RUN_LEASES = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS lease_owner TEXT",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS lease_until DOUBLE PRECISION",
    """CREATE OR REPLACE FUNCTION agentchat_hold_lease(p_run TEXT, p_owner TEXT, p_lease DOUBLE PRECISION)
    RETURNS void LANGUAGE plpgsql AS $fn$
    BEGIN
        UPDATE runs SET lease_until = GREATEST(COALESCE(lease_until, 0),
                                               extract(epoch from clock_timestamp())::double precision + p_lease)
        WHERE id = p_run AND lease_owner = p_owner;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run_lease_lost: %', p_run USING ERRCODE = 'P0001';
        END IF;
    END
    $fn$""",
)

# A cancel asked for on any replica (issue 21): marked on the run's row, so the replica
# executing the run — or the next one to claim it — ends it ``cancelled``.
RUN_CANCEL_REQUESTS = ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested_at DOUBLE PRECISION",)

# Issue 23: the lease check of every leased step also names the claim (``lease_epoch``)
# the step's copy of the run holds: a stale copy in the same process as the run's
# current owner is refused like another replica's. ``agentchat_hold_lease`` (step 9)
# stays for processes of the previous release during a rolling upgrade.
LEASE_EPOCH_CHECK = (
    """CREATE OR REPLACE FUNCTION agentchat_hold_lease_epoch(p_run TEXT, p_owner TEXT, p_epoch BIGINT,
                                                        p_lease DOUBLE PRECISION)
    RETURNS void LANGUAGE plpgsql AS $fn$
    BEGIN
        UPDATE runs SET lease_until = GREATEST(COALESCE(lease_until, 0),
                                               extract(epoch from clock_timestamp())::double precision + p_lease)
        WHERE id = p_run AND lease_owner = p_owner AND lease_epoch = p_epoch;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'run_lease_lost: %', p_run USING ERRCODE = 'P0001';
        END IF;
    END
    $fn$""",
)

# What an ``Idempotency-Key`` was first used for: a sha256 of the request's canonical
# encoding (never its text), so a key reused for a different request is refused (422).
# NULL for runs without a key and for rows stored before this step (the old rule).
RUN_REQUEST_FINGERPRINT = ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS request_fingerprint TEXT",)
