"""The one migration runner and the one version table (``schema_version``) of the file.

Every table of every store is created here, in numbered steps applied once, in order,
at start-up, before any reader or background task exists. A released step is never
edited; a change is a new step. Step 1 uses ``IF NOT EXISTS`` throughout so a file made
by an earlier release (when each store migrated itself into its own version table) is
adopted as it is; step 2 drops those old version tables.

The runner is ``storage.migration_runner`` (shared, with the steps' numbers and
names); here each step runs in its own ``BEGIN IMMEDIATE`` transaction and re-checks
the version inside the write lock, so two processes starting on one file apply each
step once.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType

import aiosqlite

from storage.migration_runner import (
    KB_FILE_STAMPS,
    RUN_ENDINGS_BACKFILL,
    RUN_LEASE_EPOCHS,
    VERSION_TABLE,
    Migration,
    MigrationRunner,
    numbered,
)
from storage.sqlite import kb_buckets

_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


_APP = (
    f"""CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW},
        updated_at REAL NOT NULL DEFAULT {_NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS conversations_user ON conversations(user_id, updated_at)",
    f"""CREATE TABLE IF NOT EXISTS messages (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        payload BLOB NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW},
        PRIMARY KEY (conversation_id, seq)
    )""",
    f"""CREATE TABLE IF NOT EXISTS tool_calls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        run_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        parameters BLOB NOT NULL,
        result TEXT,
        status TEXT NOT NULL CHECK (status IN ('success', 'failure', 'retry', 'rejected')),
        error TEXT,
        duration_ms REAL NOT NULL,
        retry_count INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL DEFAULT {_NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS tool_calls_run ON tool_calls(run_id)",
    "CREATE INDEX IF NOT EXISTS tool_calls_name_time ON tool_calls(tool_name, created_at)",
    f"""CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        context_type TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW},
        finished_at REAL
    )""",
    "CREATE INDEX IF NOT EXISTS runs_user ON runs(user_id, created_at)",
    """CREATE TABLE IF NOT EXISTS run_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    ) WITHOUT ROWID""",
)

_DRAFTS = (
    """CREATE TABLE IF NOT EXISTS workflow_drafts (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        entity TEXT NOT NULL,
        trigger_type TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        trigger_conditions TEXT,
        actions TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        last_access REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS workflow_drafts_owner ON workflow_drafts(owner, last_access)",
)

_EXTERNAL = (
    """CREATE TABLE IF NOT EXISTS external_results (
        result_id TEXT PRIMARY KEY,
        provider TEXT NOT NULL,
        query TEXT NOT NULL,
        answer TEXT NOT NULL,
        citations TEXT NOT NULL DEFAULT '[]',
        model TEXT,
        query_id TEXT,
        conversation_id TEXT,
        created_at REAL NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS idx_external_results_query_id ON external_results(query_id)",
    "CREATE INDEX IF NOT EXISTS idx_external_results_created ON external_results(created_at)",
)

_KEYWORDS = (
    """CREATE TABLE IF NOT EXISTS keywords (
        keyword_id TEXT PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        display TEXT NOT NULL CHECK (length(display) BETWEEN 2 AND 50),
        usage_count INTEGER NOT NULL DEFAULT 1 CHECK (usage_count >= 1),
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_used_at REAL
    )""",
    "CREATE INDEX IF NOT EXISTS idx_keywords_usage ON keywords(usage_count, last_used_at)",
    """CREATE TABLE IF NOT EXISTS keyword_associations (
        association_id TEXT PRIMARY KEY,
        keyword_id TEXT REFERENCES keywords(keyword_id) ON DELETE SET NULL,
        keyword_key TEXT NOT NULL,
        query_id TEXT,
        external_result_id TEXT,
        conversation_id TEXT,
        created_at REAL NOT NULL,
        archived_at REAL,
        CHECK (query_id IS NOT NULL OR external_result_id IS NOT NULL)
    )""",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_keyword ON keyword_associations(keyword_id)",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_query ON keyword_associations(query_id)",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_result ON keyword_associations(external_result_id)",
    """CREATE UNIQUE INDEX IF NOT EXISTS uq_keyword_assoc ON keyword_associations(
        keyword_id, ifnull(query_id, ''), ifnull(external_result_id, ''), ifnull(conversation_id, '')
    )""",
)

# The FTS5 tokenizer is ``unicode61 remove_diacritics 2`` wrapped in ``porter`` so that
# "tests" finds "test" and "running" finds "run". Typed bucket metadata lives in
# ``meta_<bucket>`` tables that the KB index creates when a bucket declares fields.
_KB = (
    """CREATE TABLE IF NOT EXISTS kb_buckets (
        name TEXT PRIMARY KEY,
        schema TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kb_documents (
        id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL REFERENCES kb_buckets(name),
        title TEXT NOT NULL DEFAULT '',
        source TEXT NOT NULL DEFAULT '',
        url TEXT,
        content_hash TEXT NOT NULL,
        embed_model TEXT,
        embed_dim INTEGER,
        metadata TEXT NOT NULL DEFAULT '{}',
        chars INTEGER NOT NULL DEFAULT 0,
        chunk_count INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kb_documents_bucket_source ON kb_documents(bucket, source)",
    """CREATE TABLE IF NOT EXISTS kb_chunks (
        id INTEGER PRIMARY KEY,
        doc_id TEXT NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL,
        vector BLOB
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS kb_chunks_doc_position ON kb_chunks(doc_id, position)",
    """CREATE VIRTUAL TABLE IF NOT EXISTS kb_chunks_fts USING fts5(
        title, heading, text,
        content='kb_chunks', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER IF NOT EXISTS kb_chunks_ai AFTER INSERT ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(rowid, title, heading, text)
        VALUES (new.id, new.title, new.heading, new.text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS kb_chunks_ad AFTER DELETE ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(kb_chunks_fts, rowid, title, heading, text)
        VALUES ('delete', old.id, old.title, old.heading, old.text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS kb_chunks_au AFTER UPDATE OF title, heading, text ON kb_chunks BEGIN
        INSERT INTO kb_chunks_fts(kb_chunks_fts, rowid, title, heading, text)
        VALUES ('delete', old.id, old.title, old.heading, old.text);
        INSERT INTO kb_chunks_fts(rowid, title, heading, text)
        VALUES (new.id, new.title, new.heading, new.text);
    END""",
)

# Durable execution: a run keeps its input until it ends (so another process can carry
# it on), its checkpoint (the step state, rewritten with the events of each step), and
# the last event sequence the checkpoint covers.
_DURABLE_RUNS = (
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
_RUN_SUMMARY = (
    "ALTER TABLE runs ADD COLUMN tool_call_count INTEGER",
    "ALTER TABLE runs ADD COLUMN used_tools TEXT",
    "ALTER TABLE runs ADD COLUMN keyword_count INTEGER",
)

# PDF pages per chunk, so a cited passage can say which page it is on (NULL for text
# without pages). Documents ingested before keep NULL until they are re-ingested.
_KB_CHUNK_PAGES = (
    "ALTER TABLE kb_chunks ADD COLUMN page INTEGER",
    "ALTER TABLE kb_chunks ADD COLUMN page_end INTEGER",
)

# SC-006: saved external answers found by meaning and by stemmed, order-free keyword
# terms. ``term_count`` stays NULL for keywords indexed before (the keyword index
# back-fills their terms at start-up); a pruned keyword's terms go with it. Vectors
# are per embedder; ``id`` only grows (AUTOINCREMENT), so a reader loads what is new.
_EXTERNAL_MATCHING = (
    "ALTER TABLE keywords ADD COLUMN term_count INTEGER",
    """CREATE TABLE IF NOT EXISTS keyword_terms (
        term TEXT NOT NULL,
        keyword_id TEXT NOT NULL REFERENCES keywords(keyword_id) ON DELETE CASCADE,
        PRIMARY KEY (term, keyword_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS idx_keyword_terms_keyword ON keyword_terms(keyword_id)",
    """CREATE TABLE IF NOT EXISTS external_vectors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL CHECK (kind IN ('question', 'answer', 'keyword')),
        ref TEXT NOT NULL,
        embed_model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector BLOB NOT NULL,
        created_at REAL NOT NULL,
        UNIQUE (embed_model, kind, ref)
    )""",
)

# A client's ``Idempotency-Key`` names the run it started, per user, so a retried
# ``POST /v1/agent/chat`` resumes that run instead of starting another. NULL for runs
# started without one (a partial unique index: any number of those).
_RUN_IDEMPOTENCY = (
    "ALTER TABLE runs ADD COLUMN idempotency_key TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_runs_idempotency ON runs(user_id, idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
)

# Ingested files: ``source`` is what readers see (a path relative to the ingested
# folder, or the caller's own), ``origin`` the absolute path it was read from, used only
# to find the documents of a re-ingested folder whose files are gone. Never shown.
_KB_DOCUMENT_ORIGIN = (
    "ALTER TABLE kb_documents ADD COLUMN origin TEXT",
    "UPDATE kb_documents SET origin = source WHERE origin IS NULL",
    "CREATE INDEX IF NOT EXISTS kb_documents_bucket_origin ON kb_documents(bucket, origin)",
)

# Shared limits (issue 13): requests per key per one-minute window, counted in the
# database so every replica sees the same counts; and the user's unfinished runs,
# counted at admission from a partial index instead of one process's memory.
_SHARED_LIMITS = (
    """CREATE TABLE IF NOT EXISTS rate_limits (
        key TEXT NOT NULL,
        window_start INTEGER NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (key, window_start)
    )""",
    "CREATE INDEX IF NOT EXISTS rate_limits_window ON rate_limits(window_start)",
    "CREATE INDEX IF NOT EXISTS runs_user_unfinished ON runs(user_id) "
    "WHERE status IN ('queued', 'running', 'interrupted')",
)

# Run ownership: the process executing a run holds a lease on it (``lease_owner``,
# ``lease_until`` in epoch seconds), renewed while the run is live; a run whose lease
# expired is claimed by the next process that looks.
_RUN_LEASES = (
    "ALTER TABLE runs ADD COLUMN lease_owner TEXT",
    "ALTER TABLE runs ADD COLUMN lease_until REAL",
)

# Secrets every process on the database must share (issue 13): the key that signs
# ``stream_url`` tokens when ``AGENT_STREAM_TOKEN_SECRET`` is not set, generated by the
# first process to start and read by every other one.
_APP_SECRETS = (
    f"""CREATE TABLE IF NOT EXISTS app_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW}
    )""",
)

# Seed 001 indexes the tool-call log by session (our conversation) and by status, for
# "what did this conversation call" and "which calls failed" without a scan.
_TOOL_CALL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS tool_calls_conversation ON tool_calls(conversation_id)",
    "CREATE INDEX IF NOT EXISTS tool_calls_status ON tool_calls(status)",
)

# A cancel asked for on any replica (issue 21): marked on the run's row, so the replica
# executing the run — or the next one to claim it — ends it ``cancelled``.
_RUN_CANCEL_REQUESTS = ("ALTER TABLE runs ADD COLUMN cancel_requested_at REAL",)

# Issue 21: everything stored from a user's question is that user's. Saved web answers,
# keywords and their associations get ``owner`` (the user whose run stored them); a
# keyword's key becomes unique per owner, so two users' keywords never merge (SQLite
# rebuilds the table for that). Rows from before get the owner of the conversation
# they came from; a keyword is given one only when all its conversations had the same
# owner. Anything else is owned by nobody ('') and found only in the shared mode.
_OWNERS = (
    "ALTER TABLE external_results ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
    "UPDATE external_results SET owner = COALESCE("
    "(SELECT c.user_id FROM conversations c WHERE c.id = external_results.conversation_id), '')",
    "ALTER TABLE keyword_associations ADD COLUMN owner TEXT NOT NULL DEFAULT ''",
    "UPDATE keyword_associations SET owner = COALESCE("
    "(SELECT c.user_id FROM conversations c WHERE c.id = keyword_associations.conversation_id), '')",
    """CREATE TABLE keywords_owned (
        keyword_id TEXT PRIMARY KEY,
        owner TEXT NOT NULL DEFAULT '',
        key TEXT NOT NULL,
        display TEXT NOT NULL CHECK (length(display) BETWEEN 2 AND 50),
        usage_count INTEGER NOT NULL DEFAULT 1 CHECK (usage_count >= 1),
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_used_at REAL,
        term_count INTEGER,
        UNIQUE (owner, key)
    )""",
    """INSERT INTO keywords_owned (keyword_id, owner, key, display, usage_count, created_at, updated_at,
        last_used_at, term_count)
    SELECT k.keyword_id, COALESCE((SELECT MIN(a.owner) FROM keyword_associations a
            WHERE a.keyword_id = k.keyword_id HAVING COUNT(DISTINCT a.owner) = 1), ''),
        k.key, k.display, k.usage_count, k.created_at, k.updated_at, k.last_used_at, k.term_count
    FROM keywords k""",
    "DROP TABLE keywords",
    "ALTER TABLE keywords_owned RENAME TO keywords",
    "CREATE INDEX IF NOT EXISTS idx_keywords_usage ON keywords(usage_count, last_used_at)",
    "CREATE INDEX IF NOT EXISTS idx_keywords_key ON keywords(key)",
)

# Issue 21: conversation ids are a namespace per user, so a client-chosen id another
# user took first neither blocks nor reveals anything. Conversations are keyed by
# (user_id, id) and messages carry their user (SQLite rebuilds both tables for the new
# keys, foreign keys off and checked); every row keeps its owner. Messages without a
# conversation (none can exist with foreign keys on) have no owner and are not kept.
# "The runs of this conversation" is now the user's: its index leads with the user.
_CONVERSATIONS_PER_USER = (
    f"""CREATE TABLE conversations_per_user (
        user_id TEXT NOT NULL,
        id TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW},
        updated_at REAL NOT NULL DEFAULT {_NOW},
        PRIMARY KEY (user_id, id)
    )""",
    "INSERT INTO conversations_per_user (user_id, id, created_at, updated_at) "
    "SELECT user_id, id, created_at, updated_at FROM conversations",
    f"""CREATE TABLE messages_per_user (
        user_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        payload BLOB NOT NULL,
        created_at REAL NOT NULL DEFAULT {_NOW},
        run_id TEXT,
        PRIMARY KEY (user_id, conversation_id, seq),
        FOREIGN KEY (user_id, conversation_id) REFERENCES conversations_per_user (user_id, id) ON DELETE CASCADE
    )""",
    "INSERT INTO messages_per_user (user_id, conversation_id, seq, role, payload, created_at, run_id) "
    "SELECT c.user_id, m.conversation_id, m.seq, m.role, m.payload, m.created_at, m.run_id "
    "FROM messages m JOIN conversations c ON c.id = m.conversation_id",
    "DROP TABLE messages",
    "DROP TABLE conversations",
    "ALTER TABLE conversations_per_user RENAME TO conversations",
    "ALTER TABLE messages_per_user RENAME TO messages",
    "CREATE INDEX IF NOT EXISTS conversations_user ON conversations(user_id, updated_at)",
    "DROP INDEX IF EXISTS runs_conversation",
    "CREATE INDEX IF NOT EXISTS runs_user_conversation ON runs(user_id, conversation_id, created_at)",
)

# Issue 25: a conversation's title (set from its first question, renamed by its user) and
# the list of a user's conversations, newest first by ``updated_at`` with the id as the
# tie-break of its cursor; a run's feedback (score 1 or -1, an optional comment, when);
# when its event log was compacted (retention) and, on a compacted event that folds a
# turn's text chunks into one, the first id and the lengths of the chunks it replaced
# (``folded``, so a client resuming from a folded-away id gets the rest of the text);
# an index of the finished runs not compacted yet, by their end, so the retention pass
# finds the old ones without scanning those it has done.
_ISSUE_25 = (
    "ALTER TABLE conversations ADD COLUMN title TEXT",
    "DROP INDEX IF EXISTS conversations_user",
    "CREATE INDEX IF NOT EXISTS conversations_user_updated ON conversations(user_id, updated_at, id)",
    "ALTER TABLE runs ADD COLUMN feedback_score INTEGER",
    "ALTER TABLE runs ADD COLUMN feedback_comment TEXT",
    "ALTER TABLE runs ADD COLUMN feedback_at REAL",
    "ALTER TABLE runs ADD COLUMN events_compacted_at REAL",
    "ALTER TABLE run_events ADD COLUMN folded TEXT",
    "CREATE INDEX IF NOT EXISTS runs_to_compact ON runs(finished_at) "
    "WHERE finished_at IS NOT NULL AND events_compacted_at IS NULL",
)


MIGRATIONS: tuple[Migration, ...] = numbered(
    {
        1: _APP + _DRAFTS + _EXTERNAL + _KEYWORDS + _KB,
        2: _DURABLE_RUNS,
        3: _RUN_SUMMARY,
        4: _KB_CHUNK_PAGES,
        5: _EXTERNAL_MATCHING,
        6: _RUN_IDEMPOTENCY,
        7: _KB_DOCUMENT_ORIGIN,
        8: _SHARED_LIMITS,
        9: _RUN_LEASES,
        10: _APP_SECRETS,
        # Nothing to change here (vectors live in the row already); the step keeps both
        # engines' numbers equal, which ``agentchat migrate-db`` checks.
        11: (),
        12: (),
        13: _TOOL_CALL_INDEXES,
        14: _RUN_CANCEL_REQUESTS,
        15: _OWNERS,
        16: _CONVERSATIONS_PER_USER,
        17: _ISSUE_25,
        18: (),  # PostgreSQL's postings for full-text top-k; FTS5 ranks on its own index
        19: (),  # PostgreSQL's bulk loads post their chunks set-wise
        20: RUN_ENDINGS_BACKFILL,
        21: KB_FILE_STAMPS,
        22: RUN_LEASE_EPOCHS,
        23: (),  # PostgreSQL's postings carry their term frequency and chunk length
        24: (),  # code: kb_buckets.rebuild_field_indexes (one statement per bucket table)
        25: (),  # PostgreSQL's (doc_id, position) key carries the chunk id; SQLite's holds the rowid
        26: (),  # PostgreSQL's chunks carry their bucket (a partial HNSW graph per bucket)
    },
    rebuilds=frozenset({15, 16}),
)

#: Steps with work beyond their statements (``MigrationRunner.code``), by number.
_CODE: Mapping[int, Callable[[aiosqlite.Connection], Awaitable[None]]] = MappingProxyType(
    {24: kb_buckets.rebuild_field_indexes}
)


class _SqliteRunner(MigrationRunner):
    """Each step in its own ``BEGIN IMMEDIATE`` transaction, its version re-checked inside
    the write lock (two processes starting on one file apply it once)."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self._conn = conn

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._conn.execute(sql, params)

    @contextlib.asynccontextmanager
    async def step(self, step: Migration) -> AsyncIterator[None]:
        conn = self._conn
        keys_were = await _foreign_keys(conn) if step.rebuilds else 0
        if step.rebuilds:  # only outside a transaction does this pragma take effect
            await conn.execute("PRAGMA foreign_keys = OFF")
        await conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            await conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                await conn.execute("ROLLBACK")
            raise
        finally:
            if step.rebuilds:
                await conn.execute(f"PRAGMA foreign_keys = {keys_were}")

    async def applied(self, step: Migration) -> bool:
        async with self._conn.execute(f"SELECT 1 FROM {VERSION_TABLE} WHERE version = ?", (step.version,)) as cur:
            return await cur.fetchone() is not None

    async def apply(self, statement: str) -> None:
        try:
            await self._conn.execute(statement)
        except sqlite3.OperationalError as exc:
            # A file from an earlier release may already have a column a step adds.
            if statement.lstrip().upper().startswith("ALTER TABLE") and "duplicate column" in str(exc):
                return
            raise

    async def code(self, step: Migration) -> None:
        work = _CODE.get(step.version)
        if work is not None:
            await work(self._conn)

    async def check(self, step: Migration) -> None:
        if step.rebuilds:
            await _check_foreign_keys(self._conn, step)


async def migrate(conn: aiosqlite.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """Apply every pending step; return the schema version afterwards."""
    return await _SqliteRunner(conn).run(migrations)


async def _foreign_keys(conn: aiosqlite.Connection) -> int:
    async with conn.execute("PRAGMA foreign_keys") as cur:
        row = await cur.fetchone()
    return int(row[0]) if row is not None else 0


async def _check_foreign_keys(conn: aiosqlite.Connection, step: Migration) -> None:
    async with conn.execute("PRAGMA foreign_key_check") as cur:
        broken = list(await cur.fetchall())
    if broken:
        raise sqlite3.IntegrityError(f"migration {step.version} broke {len(broken)} foreign key(s): {broken[:3]}")
