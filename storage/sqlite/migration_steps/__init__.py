"""The SQLite engine's numbered migration steps, in the order they are applied.

Why a package: the steps are about four hundred lines of SQL that nobody edits once
released; grouped by topic (the first schema, runs, the service, users' data, the
knowledge base) as PostgreSQL's are (``storage.postgres.migration_steps``), each module
reads as one subject, and this table is the one place that says which step is which
number, and which step runs code. Numbers and names are shared with PostgreSQL
(``storage.migration_runner``); the runner that applies them is
``storage.sqlite.migrations``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from types import MappingProxyType

from storage.migration_runner import (
    KB_CHUNK_RULES,
    KB_FILE_STAMPS,
    KB_GENERATION,
    RUN_ENDINGS_BACKFILL,
    RUN_LEASE_EPOCHS,
    Migration,
    numbered,
)
from storage.sqlite import kb_buckets
from storage.sqlite.migration_steps.first_schema import APP, DRAFTS, EXTERNAL, KB, KEYWORDS
from storage.sqlite.migration_steps.knowledge_base import KB_CHUNK_IDS_ISSUED, KB_CHUNK_PAGES, KB_DOCUMENT_ORIGIN
from storage.sqlite.migration_steps.live_log import LIVE_LOG, LIVE_LOG_SPANS
from storage.sqlite.migration_steps.owners import CONVERSATIONS_PER_USER, EXTERNAL_MATCHING, ISSUE_25, OWNERS
from storage.sqlite.migration_steps.runs import (
    DURABLE_RUNS,
    RUN_CANCEL_REQUESTS,
    RUN_IDEMPOTENCY,
    RUN_LEASES,
    RUN_REQUEST_FINGERPRINT,
    RUN_SUMMARY,
)
from storage.sqlite.migration_steps.service import APP_SECRETS, SHARED_LIMITS, TOOL_CALL_INDEXES

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
        # Nothing to change here (vectors live in the row already); the step keeps both
        # engines' numbers equal, which ``agentchat migrate-db`` checks.
        11: (),
        12: (),
        13: TOOL_CALL_INDEXES,
        14: RUN_CANCEL_REQUESTS,
        15: OWNERS,
        16: CONVERSATIONS_PER_USER,
        17: ISSUE_25,
        18: (),  # PostgreSQL's postings for full-text top-k; FTS5 ranks on its own index
        19: (),  # PostgreSQL's bulk loads post their chunks set-wise
        20: RUN_ENDINGS_BACKFILL,
        21: KB_FILE_STAMPS,
        22: RUN_LEASE_EPOCHS,
        23: (),  # PostgreSQL's postings carry their term frequency and chunk length
        24: (),  # code: kb_buckets.rebuild_field_indexes (one statement per bucket table)
        25: (),  # PostgreSQL's (doc_id, position) key carries the chunk id; SQLite's holds the rowid
        26: (),  # PostgreSQL's chunks carry their bucket (a partial HNSW graph per bucket)
        27: KB_CHUNK_IDS_ISSUED,
        28: KB_GENERATION,
        29: LIVE_LOG,
        30: LIVE_LOG_SPANS,
        31: RUN_REQUEST_FINGERPRINT,
        32: KB_CHUNK_RULES,
    },
    rebuilds=frozenset({15, 16}),
)

#: Steps with work beyond their statements (``MigrationRunner.code``), by number.
#: Each runs on the connection's own thread, inside its step's transaction.
CODE: Mapping[int, Callable[[sqlite3.Connection], None]] = MappingProxyType({24: kb_buckets.rebuild_field_indexes})

__all__ = ["CODE", "MIGRATIONS"]
