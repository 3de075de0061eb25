"""The PostgreSQL engine's migration steps for users' data: saved answers matched by
terms and vectors (5), owners of saved answers and keywords (15), conversation ids per
user (16), titles, feedback and event-log compaction (17).

Why apart: these steps carry who owns what, the rule every route's tests check with two
users.
"""

from __future__ import annotations

# SC-006: saved external answers found by meaning and by stemmed, order-free keyword
# terms. ``term_count`` stays NULL for keywords indexed before (the keyword index
# back-fills their terms at start-up); a pruned keyword's terms go with it. Vectors are
# per embedder; ``id`` only grows and, because saves take a lock first, ids become
# visible in order, so a reader that remembers the last id it loaded misses nothing.
EXTERNAL_MATCHING = (
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

# Issue 21: everything stored from a user's question is that user's. Saved web answers,
# keywords and their associations get ``owner`` (the user whose run stored them); a
# keyword's key becomes unique per owner, so two users' keywords never merge. Rows from
# before get the owner of the conversation they came from; a keyword is given one only
# when all its conversations had the same owner. Anything else is owned by nobody ('')
# and found only in the shared mode.
OWNERS = (
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
CONVERSATIONS_PER_USER = (
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
ISSUE_25 = (
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
