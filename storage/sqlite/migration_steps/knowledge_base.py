"""The SQLite engine's migration steps for the knowledge base after the first schema:
PDF pages per chunk (4) and the origin of ingested files (7). Steps 11, 12, 18, 19,
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
