"""Numbered schema migrations of the knowledge base, recorded in ``kb_migrations``.

The FTS5 tokenizer is ``unicode61 remove_diacritics 2`` wrapped in ``porter`` so that
"tests" finds "test" and "running" finds "run" (English stemming; other languages still
tokenise and fold diacritics exactly as unicode61 does, the stemmer just rarely fires).

The SQLite file is shared with the other stores (conversations, runs, keywords…), so
every table here is prefixed ``kb_`` (typed metadata tables are ``meta_<bucket>``, as
the corpus design names them) and the version table is our own. Migrations only ever
append: a released step is never edited, a change is a new step.
"""

from __future__ import annotations

import datetime as _dt

import aiosqlite

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "documents, chunks, FTS5 index and buckets",
        [
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
        ],
    ),
]


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def apply_migrations(conn: aiosqlite.Connection) -> int:
    """Apply pending migrations, each in its own ``BEGIN IMMEDIATE`` transaction.

    The version check happens inside the write lock, so two processes starting on the
    same file at once apply each step exactly once. Returns the schema version.
    """
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS kb_migrations ("
        "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    version = 0
    for number, name, statements in MIGRATIONS:
        await conn.execute("BEGIN IMMEDIATE")
        try:
            async with conn.execute("SELECT 1 FROM kb_migrations WHERE version = ?", (number,)) as cur:
                done = await cur.fetchone() is not None
            if not done:
                for statement in statements:
                    await conn.execute(statement)
                await conn.execute(
                    "INSERT INTO kb_migrations(version, name, applied_at) VALUES (?, ?, ?)",
                    (number, name, utc_now()),
                )
            await conn.execute("COMMIT")
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        version = number
    return version
