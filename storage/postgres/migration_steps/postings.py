"""The PostgreSQL engine's migration steps for the full-text postings: impact-ordered
postings kept by triggers (18), bulk loads that post their own chunks (19), each
posting's term frequency and chunk length for exact scores (23).

Why apart: three steps that rewrite one table and its triggers, built from the constants
the full-text queries share (``storage.postgres.text_schema``).
"""

from __future__ import annotations

from storage.postgres.text_schema import (
    COLUMN_WEIGHTS,
    IMPACT_FUNCTION,
    K1,
    POSTINGS_AVGDL,
    POSTINGS_DEFERRED_SETTING,
    TF_FUNCTION,
    B,
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
KB_POSTINGS = (
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

KB_POSTINGS_DEFERRABLE = (
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

# Issue 24 item 1: a posting also carries its term frequency and its chunk's length, in
# the B-tree's INCLUDE, so ``kb_text`` scores a chunk exactly (BM25 with today's
# average length) from the postings it read, without visiting the chunk's ~2.7 kB row.
# The postings are written again from the chunks (one statement, the B-tree rebuilt
# after it). The chunks' lengths get a B-tree of their own (``kb_text.totals``). The
# add trigger now looks each chunk's bucket up by its document's key once per chunk, as
# ``kb_chunk_sql.POST_CHUNKS`` does since 3796f73: joined, the planner could hash the
# whole of ``kb_documents`` for every statement's chunks.
KB_POSTINGS_EXACT = (
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
