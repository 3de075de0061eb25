"""Migration 27 on a file written before it: the chunk ids already issued are recorded, so
the first ingest after the upgrade continues past them (never max(id)+1 again)."""

from __future__ import annotations

from pathlib import Path

import aiosqlite

from storage.sqlite.migration_steps import MIGRATIONS
from storage.sqlite.migrations import migrate


async def test_an_older_file_records_its_largest_chunk_id(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "old.sqlite3") as conn:
        assert await migrate(conn, MIGRATIONS[:26]) == 26
        await conn.execute(
            "INSERT INTO kb_documents(id, bucket, content_hash, created_at, updated_at)"
            " VALUES ('d', 'default', 'h', 'now', 'now')"
        )
        await conn.execute(
            "INSERT INTO kb_chunks(id, doc_id, position, title, heading, text) VALUES (41, 'd', 0, 't', '', 'x')"
        )
        await conn.commit()
        assert await migrate(conn) == MIGRATIONS[-1].version
        async with conn.execute("SELECT one, issued FROM kb_chunk_ids") as cur:
            assert list(await cur.fetchall()) == [(1, 41)]


async def test_a_fresh_file_starts_at_zero(tmp_path: Path) -> None:
    async with aiosqlite.connect(tmp_path / "new.sqlite3") as conn:
        await migrate(conn)
        async with conn.execute("SELECT issued FROM kb_chunk_ids") as cur:
            assert list(await cur.fetchall()) == [(0,)]
