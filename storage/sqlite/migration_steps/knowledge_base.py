"""The SQLite engine's migration steps for the knowledge base after the first schema:
PDF pages per chunk (4), the origin of ingested files (7) and the chunk ids issued (27). Steps 11, 12, 18, 19,
23, 25 and 26 are PostgreSQL's (recorded empty here); 24 is code
(``kb_buckets.rebuild_field_indexes``, named in ``migration_steps``).

Why apart: what the KB index (``storage.stores.kb_index``) relies on beyond step 1.
"""

from __future__ import annotations

# PDF pages per chunk, so a cited passage can say which page it is on (NULL for text
# without pages). Documents ingested before keep NULL until they are re-ingested.
KB_CHUNK_PAGES = (
    "ALTER TABLE kb_chunks ADD COLUMN page INTEGER",
    "ALTER TABLE kb_chunks ADD COLUMN page_end INTEGER",
)

# Ingested files: ``source`` is what readers see (a path relative to the ingested
# folder, or the caller's own), ``origin`` the absolute path it was read from, used only
# to find the documents of a re-ingested folder whose files are gone. Never shown.
KB_DOCUMENT_ORIGIN = (
    "ALTER TABLE kb_documents ADD COLUMN origin TEXT",
    "UPDATE kb_documents SET origin = source WHERE origin IS NULL",
    "CREATE INDEX IF NOT EXISTS kb_documents_bucket_origin ON kb_documents(bucket, origin)",
)

# The highest chunk id ever issued, so an id is never given twice: new chunks took
# max(id)+1, and deleting the newest document freed its ids for the next ingest - of any
# bucket or owner. A search that resolved its scope to chunk ids, or an in-memory vector
# index a process has not reloaded yet, then named someone else's chunk by a stale id.
# One row; PostgreSQL draws its ids from a sequence, which never reuses them.
KB_CHUNK_IDS_ISSUED = (
    "CREATE TABLE IF NOT EXISTS kb_chunk_ids (one INTEGER PRIMARY KEY CHECK (one = 1), issued INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO kb_chunk_ids(one, issued) SELECT 1, coalesce(max(id), 0) FROM kb_chunks",
)
