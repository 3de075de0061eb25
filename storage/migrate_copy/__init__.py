"""``agentchat migrate-db``: copy a SQLite database of the service into PostgreSQL.

What it does, in order:

1. Refuses a SQLite file that another process has open (``sqlite_in_use``: a live
   server, an ingest), since rows written during the copy could be missed.
2. Migrates both ends with their own runners (``storage.sqlite.migrations``,
   ``storage.postgres.migrations``): the steps carry the same numbers on both engines,
   so equal versions mean the same tables; unequal ones are refused.
3. Copies every table the two schemas share (an unknown SQLite table is refused, never
   skipped), parents before children, plus each bucket's ``meta_<bucket>`` table
   (created on the target from the bucket's schema). Rows go in batches, each batch one
   PostgreSQL transaction that also records how far the copy got in
   ``agentchat_migrate_db`` — so an interrupted copy (even SIGKILL) resumes after the
   last committed batch, and a batch replayed anyway is absorbed by
   ``ON CONFLICT DO NOTHING``: no duplicates, no loss. Batches are read by keyset
   pagination on each table's primary key (never ``OFFSET``).
4. Carries what differs between the engines: identity columns keep their values
   (``OVERRIDING SYSTEM VALUE``; ``runs.seq`` and ``keyword_associations.seq``, which
   SQLite keeps as the rowid, take the rowid), chunk vectors become pgvector values,
   ``kb_chunks.ntok`` is computed, ``kb_chunks.bucket`` is its document's, the
   ``tsvector`` fills itself (a generated column); SQLite's live log of runs' events
   is settled into ``run_events`` before the copy (unfinished runs' events too), and
   the log and ``runs.log_from`` stay behind (``storage.stores.event_log``).
5. Moves every sequence past the copied ids, builds the HNSW graph of each bucket past
   the exact threshold (once, after the rows: faster than row by row), runs ``ANALYZE``.
6. Counts every table on both sides; a difference is ``CountMismatch`` (exit 1). When
   they all match, the completion is recorded in the target (``agentchat_migrate_db_done``,
   each table's count): run again later, after the replicas served on the target, the
   copy copies nothing and reports "already migrated" with how far the target moved on
   (exit 0), or refuses a file changed since (``SourceChanged``, exit 2).

The copy's parts: ``sqlite_to_postgres`` (the entry point, the only module that opens
connections; ``app/cli/migrate.py`` wires it), ``copier`` (reads, writes and counts one
table at a time), ``table_plan`` (which tables, in which order, and how each column
converts), ``source_guard`` (step 1), ``outcome`` (the report and the errors) and
``progress`` (a bar per table).
"""
