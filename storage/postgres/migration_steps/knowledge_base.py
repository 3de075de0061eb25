"""The PostgreSQL engine's migration steps for the knowledge base's documents and
chunks after the first schema: pages (4), origins (7), vectors and tsvectors kept in the
row (11, 12), chunk ids in the (document, position) key (25), each chunk's bucket for the
per-bucket graphs (26).

Why apart: the layout ``kb_index``, ``kb_vectors`` and ``kb_graphs`` read; the postings
have their own module (``postings``).
"""

from __future__ import annotations

# PDF pages per chunk (NULL for text without pages).
KB_CHUNK_PAGES = (
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS page INTEGER",
    "ALTER TABLE kb_chunks ADD COLUMN IF NOT EXISTS page_end INTEGER",
)

# Ingested files: ``source`` is what readers see (a path relative to the ingested
# folder, or the caller's own), ``origin`` the absolute path it was read from, used only
# to find the documents of a re-ingested folder whose files are gone. Never shown.
KB_DOCUMENT_ORIGIN = (
    'ALTER TABLE kb_documents ADD COLUMN IF NOT EXISTS origin TEXT COLLATE "C"',
    "UPDATE kb_documents SET origin = source WHERE origin IS NULL",
    "CREATE INDEX IF NOT EXISTS kb_documents_bucket_origin ON kb_documents(bucket, origin)",
)

# The dense side is searched inside PostgreSQL (``kb_vectors``): a chunk row with its
# text and ``tsvector`` outgrows TOAST's 2 kB target, and the largest column — the
# vector — was moved out of line, so every exact scan fetched each vector from the
# TOAST table (~3x slower, measured). ``MAIN`` keeps it in the row while the text and
# ``tsvector`` are compressed or moved first. Rows written before keep their layout
# until rewritten (``VACUUM FULL kb_chunks``).
KB_VECTORS_INLINE = ("ALTER TABLE kb_chunks ALTER COLUMN embedding SET STORAGE MAIN",)

# Full-text ranking reads every matching chunk's ``tsvector`` (``kb_text``). Moved out of
# line, it was fetched from the TOAST table — twice per chunk, once per reference in the
# ranking query — which was about a third of a text search's time. ``MAIN`` keeps it in
# the row beside the vector (a row of text, ``tsvector`` and a 384-dimension vector is
# ~2.5 kB, three to a page; a row too large for a page still moves columns out, text
# first). Rows written before keep their layout until rewritten (``VACUUM FULL kb_chunks``).
KB_TSV_INLINE = ("ALTER TABLE kb_chunks ALTER COLUMN tsv SET STORAGE MAIN",)

# Issue 24: a filtered full-text search reads the postings of its scope's chunks
# (``kb_postings.top_in_scope``), whose ids it finds from the scope's documents. The
# chunks' (doc_id, position) key carries the chunk id too, so that lookup is an
# index-only scan; without it each document of the scope cost a visit of its ~2.7 kB
# chunk row (about a third of a filtered text search at 100k). Same key, same
# uniqueness: the index replaces the old one instead of adding a second to write.
KB_CHUNK_IDS_BY_DOCUMENT = (
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
KB_CHUNK_BUCKETS = (
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
