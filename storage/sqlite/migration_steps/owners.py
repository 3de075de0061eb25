"""The SQLite engine's migration steps about who owns what: saved web answers found by
meaning and keyword terms (5), owners of everything stored from a question (15), a
conversation-id namespace per user (16) and conversation titles, feedback and the
retention's marks (17, issue 25). Steps 15 and 16 rebuild tables (foreign keys off,
checked before commit: ``rebuilds`` in ``migration_steps``).

Why apart: the multi-user steps (issue 21 and after), read together when an owner
check is in doubt.
"""

from __future__ import annotations

from storage.sqlite.migration_steps.first_schema import NOW

# SC-006: saved external answers found by meaning and by stemmed, order-free keyword
# terms. ``term_count`` stays NULL for keywords indexed before (the keyword index
# back-fills their terms at start-up); a pruned keyword's terms go with it. Vectors
# are per embedder; ``id`` only grows (AUTOINCREMENT), so a reader loads what is new.
EXTERNAL_MATCHING = (
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

# Issue 21: everything stored from a user's question is that user's. Saved web answers,
# keywords and their associations get ``owner`` (the user whose run stored them); a
# keyword's key becomes unique per owner, so two users' keywords never merge (SQLite
# rebuilds the table for that). Rows from before get the owner of the conversation
# they came from; a keyword is given one only when all its conversations had the same
# owner. Anything else is owned by nobody ('') and found only in the shared mode.
OWNERS = (
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
CONVERSATIONS_PER_USER = (
    f"""CREATE TABLE conversations_per_user (
        user_id TEXT NOT NULL,
        id TEXT NOT NULL,
        created_at REAL NOT NULL DEFAULT {NOW},
        updated_at REAL NOT NULL DEFAULT {NOW},
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
        created_at REAL NOT NULL DEFAULT {NOW},
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
ISSUE_25 = (
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
