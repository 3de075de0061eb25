"""The one migration runner and the one version table (``schema_version``) of the
PostgreSQL engine.

The steps carry the SQLite engine's numbers and names, so "schema version 4" means the
same tables on both engines (what ``agentchat migrate-db`` relies on); each step says
the same thing in PostgreSQL's words. A released step is never edited; a change is a
new step, in both engines. Numbers, names and the runner's order are shared
(``storage.migration_runner``).

Ten replicas starting together migrate once: the runner takes a session-level
``pg_advisory_lock`` before reading the version table, so the first applies the
pending steps and the others, let in one by one afterwards, find nothing to do. Each
step runs in its own transaction with its row in ``schema_version`` (DDL is
transactional in PostgreSQL: a failed step leaves nothing half-made).

The ``vector`` extension (pgvector) is created by step 1 when it is missing, which
needs a role allowed to create it; a managed database where it already exists needs no
such right.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import psycopg

from storage.migration_runner import (
    KB_FILE_STAMPS,
    RUN_ENDINGS_BACKFILL,
    RUN_LEASE_EPOCHS,
    VERSION_TABLE,
    Migration,
    MigrationRunner,
    numbered,
)
from storage.postgres.lock_waits import LockRetries, LockWait, MigrationLockTimeout, probed, waiting_for

log = logging.getLogger("agentchat.storage")

#: ``pg_advisory_lock`` key of the migration runner ("agentchat" as an int64).
MIGRATION_LOCK = 0x6167656E74636861
_NOW = "(extract(epoch from clock_timestamp())::double precision)"

#: Folds text the way ``knowledge.textnorm.fold`` does (NFKD, combining marks dropped)
#: and splits it where FTS5's tokenizer does (every ASCII punctuation character is a
#: separator) before PostgreSQL's parser and English stemmer see it: "café" meets
#: "cafe", and "os.path.join" is three words, not one file-name token. Immutable, so a
#: generated column may use it.
FOLD_FUNCTION = "agentchat_fold"
TEXT_CONFIG = "english"

#: BM25's constants (FTS5's own), shared with ``kb_text``.
K1 = 1.2
B = 0.75
#: FTS5's column weights (title, heading, text), carried by the tsvector weights A/B/C;
#: ``kb_text`` ranks with them and step 23 stores each posting's term frequency with
#: them, so a change needs a step that writes the postings again.
COLUMN_WEIGHTS = (4, 2, 1)
#: The fixed document length the stored impacts are normalised with (``kb_postings``):
#: any fixed value keeps the top-k exact (``kb_text``); one near the real average keeps
#: the impact order close to the true one, so fewer postings are read.
POSTINGS_AVGDL = 64.0
#: ``(weights of a lexeme's positions, chunk tokens)`` → its stored impact.
IMPACT_FUNCTION = "agentchat_kb_impact"


_APP = (
    f"""CREATE TABLE IF NOT EXISTS conversations (
        id TEXT PRIMARY KEY,
        user_id TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW},
        updated_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW}
    )""",
    "CREATE INDEX IF NOT EXISTS conversations_user ON conversations(user_id, updated_at)",
    f"""CREATE TABLE IF NOT EXISTS messages (
        conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        role TEXT NOT NULL,
        payload BYTEA NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW},
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
        created_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW}
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
        created_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW},
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
        created_at DOUBLE PRECISION NOT NULL,
        last_access DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS workflow_drafts_owner ON workflow_drafts(owner, last_access)",
    "CREATE INDEX IF NOT EXISTS workflow_drafts_last_access ON workflow_drafts(last_access)",
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
        created_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS idx_external_results_query_id ON external_results(query_id)",
    "CREATE INDEX IF NOT EXISTS idx_external_results_created ON external_results(created_at)",
)

_KEYWORDS = (
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
_KB = (
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

# Durable execution: a run keeps its input until it ends (so another process can carry
# it on), its checkpoint (the step state, rewritten with the events of each step), and
# the last event sequence the checkpoint covers.
_DURABLE_RUNS = (
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
_RUN_SUMMARY = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS tool_call_count INTEGER",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS used_tools TEXT",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS keyword_count INTEGER",
)

# PDF pages per chunk (NULL for text without pages).
_KB_CHUNK_PAGES = (
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS page INTEGER",
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS page_end INTEGER",
)

# SC-006: saved external answers found by meaning and by stemmed, order-free keyword
# terms. ``term_count`` stays NULL for keywords indexed before (the keyword index
# back-fills their terms at start-up); a pruned keyword's terms go with it. Vectors are
# per embedder; ``id`` only grows and, because saves take a lock first, ids become
# visible in order, so a reader that remembers the last id it loaded misses nothing.
_EXTERNAL_MATCHING = (
    "ALTER TABLE keywords ADD COLUMN IF NOT EXISTS term_count INTEGER",
    """CREATE TABLE IF NOT EXISTS keyword_terms (
        term TEXT NOT NULL,
        keyword_id TEXT NOT NULL REFERENCES keywords(keyword_id) ON DELETE CASCADE,
        PRIMARY KEY (term, keyword_id)
    )""",
    "CREATE INDEX IF NOT EXISTS idx_keyword_terms_keyword ON keyword_terms(keyword_id)",
    """CREATE TABLE IF NOT EXISTS external_vectors (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('question', 'answer', 'keyword')),
        ref TEXT NOT NULL,
        embed_model TEXT NOT NULL,
        dim INTEGER NOT NULL,
        vector vector NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        UNIQUE (embed_model, kind, ref)
    )""",
    "CREATE INDEX IF NOT EXISTS idx_external_vectors_model ON external_vectors(embed_model, dim, id)",
)

# A client's ``Idempotency-Key`` names the run it started, per user (NULL without one).
_RUN_IDEMPOTENCY = (
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS idempotency_key TEXT",
    "CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency ON runs(user_id, idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
)

# Ingested files: ``source`` is what readers see (a path relative to the ingested
# folder, or the caller's own), ``origin`` the absolute path it was read from, used only
# to find the documents of a re-ingested folder whose files are gone. Never shown.
_KB_DOCUMENT_ORIGIN = (
    'ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS origin TEXT COLLATE "C"',
    "UPDATE kb_documents SET origin = source WHERE origin IS NULL",
    "CREATE INDEX IF NOT EXISTS kb_documents_bucket_origin ON kb_documents(bucket, origin)",
)

# Shared limits (issue 13): requests per key per one-minute window, counted in the
# database so every replica sees the same counts; and the user's unfinished runs,
# counted at admission from a partial index instead of one process's memory.
_SHARED_LIMITS = (
    """CREATE TABLE IF NOT EXISTS rate_limits (
        key TEXT NOT NULL,
        window_start BIGINT NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (key, window_start)
    )""",
    "CREATE INDEX IF NOT EXISTS rate_limits_window ON rate_limits(window_start)",
    "CREATE INDEX IF NOT EXISTS runs_user_unfinished ON runs(user_id) "
    "WHERE status IN ('queued', 'running', 'interrupted')",
)

# Run ownership across replicas: the replica executing a run holds a lease on it
# (``lease_owner``, ``lease_until`` in epoch seconds of the database's clock) and renews
# it while the run is live; a run whose lease expired (its replica died) is claimed by
# another. ``agentchat_hold_lease`` is the first statement of every step a leased run
# writes: it renews the lease, or raises (``run_lease_lost``) when another replica took
# the run over — the step commits nothing and its writer abandons the run.
_RUN_LEASES = (
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

# Secrets every process on the database must share (issue 13): the key that signs
# ``stream_url`` tokens when ``AGENT_STREAM_TOKEN_SECRET`` is not set, generated by the
# first process to start and read by every other one.
_APP_SECRETS = (
    f"""CREATE TABLE IF NOT EXISTS app_secrets (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL DEFAULT {_NOW}
    )""",
)

# The dense side is searched inside PostgreSQL (``kb_vectors``): a chunk row with its
# text and ``tsvector`` outgrows TOAST's 2 kB target, and the largest column — the
# vector — was moved out of line, so every exact scan fetched each vector from the
# TOAST table (~3x slower, measured). ``MAIN`` keeps it in the row while the text and
# ``tsvector`` are compressed or moved first. Rows written before keep their layout
# until rewritten (``VACUUM FULL kb_chunks``).
_KB_VECTORS_INLINE = ("ALTER TABLE kb_chunks ALTER COLUMN embedding SET STORAGE MAIN",)

# Full-text ranking reads every matching chunk's ``tsvector`` (``kb_text``). Moved out of
# line, it was fetched from the TOAST table — twice per chunk, once per reference in the
# ranking query — which was about a third of a text search's time. ``MAIN`` keeps it in
# the row beside the vector (a row of text, ``tsvector`` and a 384-dimension vector is
# ~2.5 kB, three to a page; a row too large for a page still moves columns out, text
# first). Rows written before keep their layout until rewritten (``VACUUM FULL kb_chunks``).
_KB_TSV_INLINE = ("ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN",)

# Seed 001 indexes the tool-call log by session (our conversation) and by status, for
# "what did this conversation call" and "which calls failed" without a scan.
_TOOL_CALL_INDEXES = (
    "CREATE INDEX IF NOT EXISTS tool_calls_conversation ON tool_calls(conversation_id)",
    "CREATE INDEX IF NOT EXISTS tool_calls_status ON tool_calls(status)",
)

# A cancel asked for on any replica (issue 21): marked on the run's row, so the replica
# executing the run — or the next one to claim it — ends it ``cancelled``.
_RUN_CANCEL_REQUESTS = ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested_at DOUBLE PRECISION",)

# Issue 21: everything stored from a user's question is that user's. Saved web answers,
# keywords and their associations get ``owner`` (the user whose run stored them); a
# keyword's key becomes unique per owner, so two users' keywords never merge. Rows from
# before get the owner of the conversation they came from; a keyword is given one only
# when all its conversations had the same owner. Anything else is owned by nobody ('')
# and found only in the shared mode.
_OWNERS = (
    "ALTER TABLE external_results ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT ''",
    "UPDATE external_results r SET owner = c.user_id FROM conversations c WHERE c.id = r.conversation_id",
    "ALTER TABLE keyword_associations ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT ''",
    "UPDATE keyword_associations a SET owner = c.user_id FROM conversations c WHERE c.id = a.conversation_id",
    "ALTER TABLE keywords ADD COLUMN IF NOT EXISTS owner TEXT NOT NULL DEFAULT ''",
    """UPDATE keywords k SET owner = o.owner FROM (
        SELECT keyword_id, MIN(owner) AS owner FROM keyword_associations WHERE keyword_id IS NOT NULL
        GROUP BY keyword_id HAVING COUNT(DISTINCT owner) = 1
    ) o WHERE o.keyword_id = k.keyword_id""",
    "ALTER TABLE keywords DROP CONSTRAINT IF EXISTS keywords_key_key",
    "CREATE UNIQUE INDEX IF NOT EXISTS uq_keywords_owner_key ON keywords(owner, key)",
    "CREATE INDEX IF NOT EXISTS idx_keywords_key ON keywords(key)",
)

# Issue 21: conversation ids are a namespace per user, so a client-chosen id another
# user took first neither blocks nor reveals anything. Conversations are keyed by
# (user_id, id) and messages carry their user (the owner of their conversation, which
# the old foreign key guarantees exists); "the runs of this conversation" is now the
# user's, so its index leads with the user.
_CONVERSATIONS_PER_USER = (
    "ALTER TABLE messages ADD COLUMN IF NOT EXISTS user_id TEXT",
    "UPDATE messages m SET user_id = c.user_id FROM conversations c WHERE c.id = m.conversation_id",
    "DELETE FROM messages WHERE user_id IS NULL",
    "ALTER TABLE messages ALTER COLUMN user_id SET NOT NULL",
    "ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_conversation_id_fkey",
    "ALTER TABLE messages DROP CONSTRAINT IF EXISTS messages_pkey",
    "ALTER TABLE conversations DROP CONSTRAINT IF EXISTS conversations_pkey",
    "ALTER TABLE conversations ADD PRIMARY KEY (user_id, id)",
    "ALTER TABLE messages ADD PRIMARY KEY (user_id, conversation_id, seq)",
    "ALTER TABLE messages ADD CONSTRAINT messages_conversation_fkey FOREIGN KEY (user_id, conversation_id) "
    "REFERENCES conversations(user_id, id) ON DELETE CASCADE",
    "DROP INDEX IF EXISTS runs_conversation",
    "CREATE INDEX IF NOT EXISTS runs_user_conversation ON runs(user_id, conversation_id, seq)",
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
    "ALTER TABLE conversations ADD COLUMN IF NOT EXISTS title TEXT",
    "DROP INDEX IF EXISTS conversations_user",
    "CREATE INDEX IF NOT EXISTS conversations_user_updated ON conversations(user_id, updated_at, id)",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS feedback_score INTEGER",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS feedback_comment TEXT",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS feedback_at DOUBLE PRECISION",
    "ALTER TABLE runs ADD COLUMN IF NOT EXISTS events_compacted_at DOUBLE PRECISION",
    "ALTER TABLE run_events ADD COLUMN IF NOT EXISTS folded TEXT",
    "CREATE INDEX IF NOT EXISTS runs_to_compact ON runs(finished_at) "
    "WHERE finished_at IS NOT NULL AND events_compacted_at IS NULL",
)

# Issue 24: full-text top-k without visiting every match. One row per (lexeme, chunk):
# its BM25 impact — the term's contribution before idf, ``tf·(k1+1) / (tf + k1·(1 - b +
# b·ntok/POSTINGS_AVGDL))`` with FTS5's tf (title/heading/text positions weighted 4/2/1)
# — and the chunk's bucket. One B-tree, read in impact order per lexeme, serves both
# the top-k reads and the deletes (a deleted chunk's rows are found by recomputing
# their impact). Triggers on ``kb_chunks`` keep it in step inside the writing
# transaction (ingest, replace, delete, ``migrate-db``'s copy: every path inserts or
# deletes chunk rows); chunk text is never updated in place. Existing chunks are
# posted by the step itself. ``kb_text`` says why the fixed reference length keeps the
# top-k exact.
_KB_POSTINGS = (
    f"""CREATE OR REPLACE FUNCTION {IMPACT_FUNCTION}(w TEXT[], ntok INTEGER) RETURNS REAL
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT (tf * {K1 + 1.0} / (tf + {K1} * ({1.0 - B} + {B} * ntok / {POSTINGS_AVGDL})))::real
        FROM (SELECT 4.0 * cardinality(array_positions(w, 'A')) + 2.0 * cardinality(array_positions(w, 'B'))
                     + (cardinality(w) - cardinality(array_positions(w, 'A'))
                        - cardinality(array_positions(w, 'B'))) AS tf) f
        $$""",
    """CREATE TABLE IF NOT EXISTS kb_postings (
        lexeme TEXT NOT NULL,
        impact REAL NOT NULL,
        chunk_id BIGINT NOT NULL,
        bucket TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kb_postings_impact ON kb_postings(lexeme, impact DESC, chunk_id) INCLUDE (bucket)",
    f"""CREATE OR REPLACE FUNCTION agentchat_kb_postings_add() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket)
            SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, n.ntok), n.id, d.bucket
            FROM kb_new_chunks n JOIN kb_documents d ON d.id = n.doc_id
            CROSS JOIN LATERAL unnest(n.tsv) AS u(lexeme, positions, weights);
            RETURN NULL;
        END $$""",
    f"""CREATE OR REPLACE FUNCTION agentchat_kb_postings_remove() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            DELETE FROM kb_postings p USING (
                SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, o.ntok) AS impact, o.id
                FROM kb_old_chunks o CROSS JOIN LATERAL unnest(o.tsv) AS u(lexeme, positions, weights)
            ) x
            WHERE p.lexeme = x.lexeme AND p.impact = x.impact AND p.chunk_id = x.id;
            RETURN NULL;
        END $$""",
    "DROP TRIGGER IF EXISTS kb_chunks_postings_add ON kb_chunks",
    "CREATE TRIGGER kb_chunks_postings_add AFTER INSERT ON kb_chunks REFERENCING NEW TABLE AS kb_new_chunks"
    " FOR EACH STATEMENT EXECUTE FUNCTION agentchat_kb_postings_add()",
    "DROP TRIGGER IF EXISTS kb_chunks_postings_remove ON kb_chunks",
    "CREATE TRIGGER kb_chunks_postings_remove AFTER DELETE ON kb_chunks REFERENCING OLD TABLE AS kb_old_chunks"
    " FOR EACH STATEMENT EXECUTE FUNCTION agentchat_kb_postings_remove()",
    "DELETE FROM kb_postings",
    f"""INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket)
        SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, c.ntok), c.id, d.bucket
        FROM kb_chunks c JOIN kb_documents d ON d.id = c.doc_id
        CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)""",
)

#: A transaction that writes ``kb_chunks`` during a bulk load sets this (``SET LOCAL``) and
#: posts the chunks it wrote itself, set-wise, before it commits (``kb_index``).
POSTINGS_DEFERRED_SETTING = "agentchat.kb_postings_deferred"

# Issue 24, bulk loads: the impact function inlinable (``_TF``); the add trigger steps
# aside in a transaction that says it posts its own chunks (``POSTINGS_DEFERRED_SETTING``);
# every other writer is as before. The stored impacts do not depend on the corpus
# statistics (fixed length, no idf; ``kb_text`` widens its bounds by today's avgdl), so
# postings written either way, at any corpus size, are the same rows.

#: Migration 18's impact, as one expression: a SQL function whose body has a ``FROM``
#: (or is ``STRICT`` around non-strict calls) is run by the executor once per posting,
#: ~10 µs each, most of an ingest's posting time; a bare expression is inlined into the
#: statement. The arithmetic is the same tree, so every impact is the same ``real``.
_TF = (
    "(4.0 * cardinality(array_positions(w, 'A')) + 2.0 * cardinality(array_positions(w, 'B'))"
    " + (cardinality(w) - cardinality(array_positions(w, 'A')) - cardinality(array_positions(w, 'B'))))"
)

_KB_POSTINGS_DEFERRABLE = (
    f"""CREATE OR REPLACE FUNCTION {IMPACT_FUNCTION}(w TEXT[], ntok INTEGER) RETURNS REAL
        LANGUAGE sql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE AS $$
        SELECT ({_TF} * {K1 + 1.0} / ({_TF} + {K1} * ({1.0 - B} + {B} * ntok / {POSTINGS_AVGDL})))::real
        $$""",
    f"""CREATE OR REPLACE FUNCTION agentchat_kb_postings_add() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF current_setting('{POSTINGS_DEFERRED_SETTING}', true) = 'on' THEN
                RETURN NULL;
            END IF;
            INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket)
            SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, n.ntok), n.id, d.bucket
            FROM kb_new_chunks n JOIN kb_documents d ON d.id = n.doc_id
            CROSS JOIN LATERAL unnest(n.tsv) AS u(lexeme, positions, weights);
            RETURN NULL;
        END $$""",
)


#: A posting's FTS5 term frequency (title/heading/text positions weighted 4/2/1, as
#: ``kb_text`` weighs them), from its tsvector weights; inlinable (a bare expression).
TF_FUNCTION = "agentchat_kb_tf"

# Issue 24 item 1: a posting also carries its term frequency and its chunk's length, in
# the B-tree's INCLUDE, so ``kb_text`` scores a chunk exactly (BM25 with today's
# average length) from the postings it read, without visiting the chunk's ~2.7 kB row.
# The postings are written again from the chunks (one statement, the B-tree rebuilt
# after it). The chunks' lengths get a B-tree of their own (``kb_text.totals``). The
# add trigger now looks each chunk's bucket up by its document's key once per chunk, as
# ``kb_index._POST_CHUNKS`` does since 3796f73: joined, the planner could hash the
# whole of ``kb_documents`` for every statement's chunks.
_KB_POSTINGS_EXACT = (
    f"""CREATE OR REPLACE FUNCTION {TF_FUNCTION}(w TEXT[]) RETURNS INTEGER
        LANGUAGE sql IMMUTABLE CALLED ON NULL INPUT PARALLEL SAFE AS $$
        SELECT {COLUMN_WEIGHTS[0]} * cardinality(array_positions(w, 'A'))
               + {COLUMN_WEIGHTS[1]} * cardinality(array_positions(w, 'B'))
               + {COLUMN_WEIGHTS[2]} * (cardinality(w) - cardinality(array_positions(w, 'A'))
                                        - cardinality(array_positions(w, 'B')))
        $$""",
    "DROP INDEX IF EXISTS kb_postings_impact",
    "TRUNCATE kb_postings",
    "ALTER TABLE kb_postings ADD COLUMN IF NOT EXISTS tf INTEGER NOT NULL",
    "ALTER TABLE kb_postings ADD COLUMN IF NOT EXISTS ntok INTEGER NOT NULL",
    f"""INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket, tf, ntok)
        SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, c.ntok), c.id, c.bucket, {TF_FUNCTION}(u.weights), c.ntok
        FROM (SELECT k.id, k.ntok, k.tsv, (SELECT d.bucket FROM kb_documents d WHERE d.id = k.doc_id) AS bucket
              FROM kb_chunks k) c
        CROSS JOIN LATERAL unnest(c.tsv) AS u(lexeme, positions, weights)""",
    "CREATE INDEX IF NOT EXISTS kb_postings_impact ON kb_postings(lexeme, impact DESC, chunk_id)"
    " INCLUDE (bucket, tf, ntok)",
    # The index statistics (chunks, average length) by an index-only scan, not a
    # sequential one of every ~2.7 kB chunk row (0.4 s at 100k chunks, ~4 s at 1M).
    "CREATE INDEX IF NOT EXISTS kb_chunks_ntok ON kb_chunks(ntok)",
    f"""CREATE OR REPLACE FUNCTION agentchat_kb_postings_add() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF current_setting('{POSTINGS_DEFERRED_SETTING}', true) = 'on' THEN
                RETURN NULL;
            END IF;
            WITH n AS MATERIALIZED (
                SELECT k.id, k.ntok, k.tsv, (SELECT d.bucket FROM kb_documents d WHERE d.id = k.doc_id) AS bucket
                FROM kb_new_chunks k
            )
            INSERT INTO kb_postings (lexeme, impact, chunk_id, bucket, tf, ntok)
            SELECT u.lexeme, {IMPACT_FUNCTION}(u.weights, n.ntok), n.id, n.bucket, {TF_FUNCTION}(u.weights), n.ntok
            FROM n CROSS JOIN LATERAL unnest(n.tsv) AS u(lexeme, positions, weights);
            RETURN NULL;
        END $$""",
)


# Issue 23: the lease check of every leased step also names the claim (``lease_epoch``)
# the step's copy of the run holds: a stale copy in the same process as the run's
# current owner is refused like another replica's. ``agentchat_hold_lease`` (step 9)
# stays for processes of the previous release during a rolling upgrade.
_LEASE_EPOCH_CHECK = (
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

# Issue 24: a filtered full-text search reads the postings of its scope's chunks
# (``kb_postings.top_in_scope``), whose ids it finds from the scope's documents. The
# chunks' (doc_id, position) key carries the chunk id too, so that lookup is an
# index-only scan; without it each document of the scope cost a visit of its ~2.7 kB
# chunk row (about a third of a filtered text search at 100k). Same key, same
# uniqueness: the index replaces the old one instead of adding a second to write.
_KB_CHUNK_IDS_BY_DOCUMENT = (
    "CREATE UNIQUE INDEX IF NOT EXISTS kb_chunks_doc_position_id ON kb_chunks(doc_id, position) INCLUDE (id)",
    "DROP INDEX IF EXISTS kb_chunks_doc_position",
    "ALTER INDEX kb_chunks_doc_position_id RENAME TO kb_chunks_doc_position",
)


# Issue 24 item 2: one HNSW graph per bucket (``kb_graphs``). A partial index can only
# name the row's own columns, so each chunk carries its document's bucket (a document's
# id is unique across buckets and its bucket changes only by writing it again, which
# deletes and re-inserts its chunks: the copy cannot drift; ``kb_index.write_documents``).
# The per-dimension graphs over every bucket are dropped first: they are not used any
# more (every vector query is answered bucket by bucket), every insert would still pay
# for them, and the back-fill's row versions would each be inserted into them (ms a
# row). Buckets past the exact threshold get their own graph after the next open, in
# the background (``PostgresKBIndex.start_graph_repair``); until then their searches
# are exact. The step itself rewrites every chunk row (a new row version each: the
# table doubles on disk until vacuumed) under the ACCESS EXCLUSIVE lock its ALTER TABLE
# takes, so nothing reads or writes ``kb_chunks`` until it commits: on 2 cores
# (pgserver 16, load ~2) 50k chunks took 2.5 s, 250k 11.9 s (726 -> 1,391 MB), so about
# a minute at 1M - the start-up of the first replica on the new release waits for it.
_KB_CHUNK_BUCKETS = (
    """DO $$
    DECLARE ix TEXT;
    BEGIN
        FOR ix IN SELECT indexname FROM pg_indexes
                  WHERE tablename = 'kb_chunks' AND indexname ~ '^kb_chunks_hnsw_[0-9]+$' LOOP
            EXECUTE format('DROP INDEX IF EXISTS %I', ix);
        END LOOP;
    END $$""",
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS bucket TEXT",
    "UPDATE kb_chunks c SET bucket = d.bucket FROM kb_documents d WHERE d.id = c.doc_id AND c.bucket IS NULL",
    "ALTER TABLE kb_chunks ALTER COLUMN bucket SET NOT NULL",
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
        11: _KB_VECTORS_INLINE,
        12: _KB_TSV_INLINE,
        13: _TOOL_CALL_INDEXES,
        14: _RUN_CANCEL_REQUESTS,
        15: _OWNERS,
        16: _CONVERSATIONS_PER_USER,
        17: _ISSUE_25,
        18: _KB_POSTINGS,
        19: _KB_POSTINGS_DEFERRABLE,
        20: RUN_ENDINGS_BACKFILL,
        21: KB_FILE_STAMPS,
        22: RUN_LEASE_EPOCHS + _LEASE_EPOCH_CHECK,
        23: _KB_POSTINGS_EXACT,
        24: (),  # SQLite's covering field indexes; PostgreSQL ANDs its one-field indexes (bitmaps)
        25: _KB_CHUNK_IDS_BY_DOCUMENT,
        26: _KB_CHUNK_BUCKETS,
    },
)


class _PostgresRunner(MigrationRunner):
    """Each step in its own transaction; the applied versions are read once, under the
    session's advisory lock (``migrate``), before the first step. A statement that waits
    for a lock past the session's ``lock_timeout`` fails its step; ``blocked`` says what
    it waited for (``storage.postgres.lock_waits``)."""

    time_type = "DOUBLE PRECISION"
    mark = "%s"

    def __init__(
        self, conn: psycopg.AsyncConnection[tuple[object, ...]], url: str, retries: LockRetries, connect_timeout: int
    ) -> None:
        self._conn = conn
        self._done: set[int] | None = None
        self._url, self._retries, self._connect_timeout = url, retries, connect_timeout
        #: The step under way ("25 (name)"), for the lock-wait report.
        self.current = "?"
        self.blocked: LockWait | None = None

    async def apply(self, statement: str) -> None:
        wait_s = self._retries.lock_timeout_ms / 1000
        if wait_s <= 0:  # no lock_timeout (asked for): nothing ever times out to report
            await self.execute(statement)
            return
        probe = asyncio.create_task(
            waiting_for(
                self._url, self._conn.info.backend_pid, wait_s / 2, max(0.05, wait_s / 10), self._connect_timeout
            )
        )
        try:
            await self.execute(statement)
        except psycopg.errors.LockNotAvailable:
            self.blocked = LockWait(self.current, statement, await probed(probe, grace_s=1.0))
            raise
        finally:
            if not probe.done():
                probe.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await probe

    async def execute(self, sql: str, params: tuple[object, ...] = ()) -> None:
        await self._conn.execute(sql, params or None)  # type: ignore[arg-type]

    @contextlib.asynccontextmanager
    async def step(self, step: Migration) -> AsyncIterator[None]:
        if self._done is None:
            cur = await self._conn.execute(f"SELECT version FROM {VERSION_TABLE}")
            self._done = {int(r[0]) for r in await cur.fetchall()}  # type: ignore[call-overload]
        if step.version in self._done:
            yield
            return
        self.current = f"{step.version} ({step.name})"
        async with self._conn.transaction():
            yield

    async def applied(self, step: Migration) -> bool:
        return self._done is not None and step.version in self._done


async def migrate(
    url: str,
    migrations: tuple[Migration, ...] = MIGRATIONS,
    *,
    connect_timeout: int = 10,
    retries: LockRetries | None = None,
) -> int:
    """Apply every pending step on a connection of its own, under the advisory lock;
    return the schema version afterwards.

    Past the advisory lock (another replica migrating: wait for it, its steps are
    bounded too) every statement waits at most ``retries.lock_timeout_ms`` for a lock; a
    step that timed out is rolled back and tried again after ``retries.delay_s``, up to
    ``retries.attempts`` times, each logged with the lock and its holder; then
    ``MigrationLockTimeout`` (``storage.postgres.lock_waits``)."""
    retries = retries or LockRetries()
    async with await psycopg.AsyncConnection.connect(
        url, autocommit=True, connect_timeout=connect_timeout, application_name="agentchat-migrate"
    ) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            await conn.execute(f"SET lock_timeout = {int(retries.lock_timeout_ms)}")
            # A step may run long (migration 26 rewrites every chunk row: about a minute
            # at 1M): a statement_timeout set for the role or the database would fail it
            # at every start. The lock_timeout above bounds the waits instead.
            await conn.execute("SET statement_timeout = 0")
            for attempt in range(1, max(1, retries.attempts) + 1):
                runner = _PostgresRunner(conn, url, retries, connect_timeout)
                try:
                    return await runner.run(migrations)
                except psycopg.errors.LockNotAvailable as exc:
                    blocked = runner.blocked or LockWait(runner.current, "(the runner's own statement)")
                    what = blocked.describe(retries.lock_timeout_ms)
                    if attempt >= retries.attempts:
                        raise MigrationLockTimeout(
                            f"the database schema was not migrated: {what}; gave up after {attempt} attempts. "
                            "End or wait out that session's transaction, then start again"
                        ) from exc
                    log.warning(
                        "schema migration: %s; attempt %d of %d failed, trying again in %g s",
                        what,
                        attempt,
                        retries.attempts,
                        retries.delay_s,
                    )
                    await asyncio.sleep(retries.delay_s)
            raise AssertionError("unreachable: the last attempt returns or raises")
        finally:
            if not conn.closed:
                await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
