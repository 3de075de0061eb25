"""The SQLite engine's first migration step: every table of every store as the first
release made them (conversations, messages, the tool-call log, runs and their events,
drafts, saved web answers, keywords, the knowledge base with its FTS5 index), all
``IF NOT EXISTS`` so a file made before the shared version table is adopted as it is.

Why apart: the one big schema, read when a later step's starting point is in doubt;
``NOW`` (a REAL epoch-seconds default) is shared with the later steps that create tables.
"""

from __future__ import annotations

NOW = "((julianday('now') - 2440587.5) * 86400.0)"

APP = (
    f"""CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {NOW},
        updated_at REAL NOT NULL DEFAULT {NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS conversations_user ON conversations(user_id, updated_at)",
    f"""CREATE TABLE IF NOT EXISTS messages (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        payload BLOB NOT NULL,
        created_at REAL NOT NULL DEFAULT {NOW},
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
        created_at REAL NOT NULL DEFAULT {NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS tool_calls_run ON tool_calls(run_id)",
    "CREATE INDEX IF NOT EXISTS tool_calls_name_time ON tool_calls(tool_name, created_at)",
    f"""CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        context_type TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {NOW},
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

DRAFTS = (
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

EXTERNAL = (
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

KEYWORDS = (
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
KB = (
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
