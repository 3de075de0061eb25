"""Migration step 1 of the PostgreSQL engine: the first schema — conversations,
messages, the tool-call log, runs and their events, workflow drafts, saved external
answers, keywords and the knowledge base.

Why apart: the largest step, and every later one alters what it made; released steps
are never edited, so it is read far more than written.
"""

from __future__ import annotations

from storage.postgres.text_schema import FOLD_FUNCTION, TEXT_CONFIG

#: The database clock, in epoch seconds, for the ``DEFAULT`` of time columns.
NOW = "(extract(epoch from clock_timestamp())::double precision)"

APP = (
    f"""CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {NOW},
        updated_at DOUBLE PRECISION NOT NULL DEFAULT {NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS conversations_user ON conversations(user_id, updated_at)",
    f"""CREATE TABLE IF NOT EXISTS messages (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        payload BYTEA NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {NOW},
        PRIMARY KEY (conversation_id, seq)
    )""",
    f"""CREATE TABLE IF NOT EXISTS tool_calls (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        run_id TEXT NOT NULL,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        tool_use_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        parameters BYTEA NOT NULL,
        result TEXT,
        status TEXT NOT NULL CHECK (status IN ('success', 'failure', 'retry', 'rejected')),
        error TEXT,
        duration_ms DOUBLE PRECISION NOT NULL,
        retry_count INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS tool_calls_run ON tool_calls(run_id)",
    "CREATE INDEX IF NOT EXISTS tool_calls_name_time ON tool_calls(tool_name, created_at)",
    # ``seq`` orders runs by admission (SQLite's rowid).
    f"""CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY,
        seq BIGINT GENERATED ALWAYS AS IDENTITY UNIQUE,
        conversation_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        context_type TEXT NOT NULL,
        status TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {NOW},
        finished_at DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS runs_user ON runs(user_id, created_at)",
    """CREATE TABLE IF NOT EXISTS run_events (
        run_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        event TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (run_id, seq)
    )""",
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
        created_at DOUBLE PRECISION NOT NULL,
        last_access DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS workflow_drafts_owner ON workflow_drafts(owner, last_access)",
    "CREATE INDEX IF NOT EXISTS workflow_drafts_last_access ON workflow_drafts(last_access)",
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
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS idx_external_results_query_id ON external_results(query_id)",
    "CREATE INDEX IF NOT EXISTS idx_external_results_created ON external_results(created_at)",
)

KEYWORDS = (
    """CREATE TABLE IF NOT EXISTS keywords (
        keyword_id TEXT PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        display TEXT NOT NULL CHECK (char_length(display) BETWEEN 2 AND 50),
        usage_count INTEGER NOT NULL DEFAULT 1 CHECK (usage_count >= 1),
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        last_used_at DOUBLE PRECISION
    )""",
    "CREATE INDEX IF NOT EXISTS idx_keywords_usage ON keywords(usage_count, last_used_at)",
    # ``seq`` orders associations by insertion (SQLite's rowid).
    """CREATE TABLE IF NOT EXISTS keyword_associations (
        association_id TEXT PRIMARY KEY,
        seq BIGINT GENERATED ALWAYS AS IDENTITY,
        keyword_id TEXT REFERENCES keywords(keyword_id) ON DELETE SET NULL,
        keyword_key TEXT NOT NULL,
        query_id TEXT,
        external_result_id TEXT,
        conversation_id TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        archived_at DOUBLE PRECISION,
        CHECK (query_id IS NOT NULL OR external_result_id IS NOT NULL)
    )""",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_keyword ON keyword_associations(keyword_id)",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_key ON keyword_associations(keyword_key, created_at, seq)",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_query ON keyword_associations(query_id)",
    "CREATE INDEX IF NOT EXISTS idx_keyword_assoc_result ON keyword_associations(external_result_id)",
    """CREATE UNIQUE INDEX IF NOT EXISTS uq_keyword_assoc ON keyword_associations(
        keyword_id, coalesce(query_id, ''), coalesce(external_result_id, ''), coalesce(conversation_id, '')
    )""",
)

# The knowledge base. Full text: a generated ``tsvector`` (title weight A, heading B,
# text C — FTS5's column weights 4/2/1) with a GIN index; ``ntok`` is the chunk's
# token count, BM25's document length. Vectors: pgvector's ``vector`` without a fixed
# dimension (documents of several embedders may coexist); each dimension gets its own
# partial HNSW index (cosine) when its first vector is written (``kb_index``). Typed
# bucket metadata lives in ``meta_<bucket>`` tables the KB index creates.
# ``source`` compares byte-wise (``COLLATE "C"``) so the prefix range of
# ``source_documents`` is a plain index range whatever the database's locale.
KB = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    f"""CREATE OR REPLACE FUNCTION {FOLD_FUNCTION}(t TEXT) RETURNS TEXT
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        RETURN regexp_replace(regexp_replace(normalize(t, NFKD),
            '[\\u0300-\\u036f\\u1ab0-\\u1aff\\u1dc0-\\u1dff\\u20d0-\\u20ff\\ufe20-\\ufe2f]', '', 'g'),
            '[!-/:-@[-`{{-~]', ' ', 'g')""",
    """CREATE TABLE IF NOT EXISTS kb_buckets (
        name TEXT PRIMARY KEY,
        schema TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kb_documents (
        id TEXT PRIMARY KEY,
        bucket TEXT NOT NULL REFERENCES kb_buckets(name),
        title TEXT NOT NULL DEFAULT '',
        source TEXT COLLATE "C" NOT NULL DEFAULT '',
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
    "CREATE INDEX IF NOT EXISTS kb_documents_embedder ON kb_documents(embed_model, embed_dim)",
    "CREATE SEQUENCE IF NOT EXISTS kb_chunks_id_seq AS BIGINT",
    f"""CREATE TABLE IF NOT EXISTS kb_chunks (
        id BIGINT PRIMARY KEY DEFAULT nextval('kb_chunks_id_seq'),
        doc_id TEXT NOT NULL REFERENCES kb_documents(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        heading TEXT NOT NULL DEFAULT '',
        text TEXT NOT NULL,
        ntok INTEGER NOT NULL DEFAULT 0,
        embedding vector,
        tsv tsvector GENERATED ALWAYS AS (
            setweight(to_tsvector('{TEXT_CONFIG}'::regconfig, {FOLD_FUNCTION}(title)), 'A')
            || setweight(to_tsvector('{TEXT_CONFIG}'::regconfig, {FOLD_FUNCTION}(heading)), 'B')
            || setweight(to_tsvector('{TEXT_CONFIG}'::regconfig, {FOLD_FUNCTION}(text)), 'C')
        ) STORED
    )""",
    "ALTER SEQUENCE kb_chunks_id_seq OWNED BY kb_chunks.id",
    "CREATE UNIQUE INDEX IF NOT EXISTS kb_chunks_doc_position ON kb_chunks(doc_id, position)",
    "CREATE INDEX IF NOT EXISTS kb_chunks_tsv ON kb_chunks USING gin(tsv)",
)
