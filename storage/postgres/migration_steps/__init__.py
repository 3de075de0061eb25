"""The PostgreSQL engine's numbered migration steps, in the order they are applied.

Why a package: the steps are about eight hundred lines of SQL that nobody edits once
released; grouped by topic (the first schema, runs, the service, users' data, the
knowledge base, the full-text postings) each module reads as one subject, and this
table is the one place that says which step is which number. The steps carry the SQLite
engine's numbers and names (``storage.migration_runner``); the runner that applies them
is ``storage.postgres.migrations``.
"""

from __future__ import annotations

from storage.migration_runner import (
    KB_CHUNK_RULES,
    KB_FILE_STAMPS,
    KB_GENERATION,
    RUN_ENDINGS_BACKFILL,
    RUN_LEASE_EPOCHS,
    Migration,
    numbered,
)
from storage.postgres.migration_steps.first_schema import (
    APP,
    DRAFTS,
    EXTERNAL,
    KB,
    KEYWORDS,
)
from storage.postgres.migration_steps.knowledge_base import (
    KB_CHUNK_BUCKETS,
    KB_CHUNK_IDS_BY_DOCUMENT,
    KB_CHUNK_PAGES,
    KB_DOCUMENT_ORIGIN,
    KB_TSV_INLINE,
    KB_VECTORS_INLINE,
)
from storage.postgres.migration_steps.owners import (
    CONVERSATIONS_PER_USER,
    EXTERNAL_MATCHING,
    ISSUE_25,
    OWNERS,
)
from storage.postgres.migration_steps.postings import (
    KB_POSTINGS,
    KB_POSTINGS_DEFERRABLE,
    KB_POSTINGS_EXACT,
)
from storage.postgres.migration_steps.runs import (
    DURABLE_RUNS,
    LEASE_EPOCH_CHECK,
    RUN_CANCEL_REQUESTS,
    RUN_IDEMPOTENCY,
    RUN_LEASES,
    RUN_REQUEST_FINGERPRINT,
    RUN_SUMMARY,
)
from storage.postgres.migration_steps.service import (
    APP_SECRETS,
    SHARED_LIMITS,
    TOOL_CALL_INDEXES,
)

MIGRATIONS: tuple[Migration, ...] = numbered(
    {
        1: APP + DRAFTS + EXTERNAL + KEYWORDS + KB,
        2: DURABLE_RUNS,
        3: RUN_SUMMARY,
        4: KB_CHUNK_PAGES,
        5: EXTERNAL_MATCHING,
        6: RUN_IDEMPOTENCY,
        7: KB_DOCUMENT_ORIGIN,
        8: SHARED_LIMITS,
        9: RUN_LEASES,
        10: APP_SECRETS,
        11: KB_VECTORS_INLINE,
        12: KB_TSV_INLINE,
        13: TOOL_CALL_INDEXES,
        14: RUN_CANCEL_REQUESTS,
        15: OWNERS,
        16: CONVERSATIONS_PER_USER,
        17: ISSUE_25,
        18: KB_POSTINGS,
        19: KB_POSTINGS_DEFERRABLE,
        20: RUN_ENDINGS_BACKFILL,
        21: KB_FILE_STAMPS,
        22: RUN_LEASE_EPOCHS + LEASE_EPOCH_CHECK,
        23: KB_POSTINGS_EXACT,
        24: (),  # SQLite's covering field indexes; PostgreSQL ANDs its one-field indexes (bitmaps)
        25: KB_CHUNK_IDS_BY_DOCUMENT,
        26: KB_CHUNK_BUCKETS,
        27: (),  # SQLite's record of the chunk ids issued; a sequence never reuses one
        28: KB_GENERATION,
        # SQLite's live log of unsettled runs' events; PostgreSQL keeps one clustered
        # table (``storage.stores.event_log`` says why).
        29: (),
        30: (),  # SQLite's live log: where a settled run's rows were
        31: RUN_REQUEST_FINGERPRINT,
        32: KB_CHUNK_RULES,
    },
)
