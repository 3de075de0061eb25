"""SQLite's chunk writes feed FTS5 several rows per statement (``ROWS_PER_INSERT``):
the index must hold exactly what row-at-a-time writes gave it — every chunk under its
own columns, BM25 scores equal to an index FTS5 rebuilds from the chunk table itself —
and rewrites and deletes must leave no stale terms behind."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiosqlite
import numpy as np
import orjson
import pytest

from knowledge.buckets import typed_values
from storage.kb_records import KBChunkWrite, KBDocumentWrite, KBScope, KBTextTuning
from storage.sqlite.kb_index import ROWS_PER_INSERT
from tests.support.storage import opened_storage

DIM = 4
QUERIES = [
    '"alpha"',
    '"bravo" OR "charlie"',
    '"delta"',
    '"echo" OR "alpha"',
    '"uniq7x3v0" OR "golf"',
    '"head3"',
    '"titl5"',
]
RANK = (
    "SELECT rowid, bm25(kb_chunks_fts, 4.0, 2.0, 1.0) AS s FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?"
    " ORDER BY s, rowid"
)
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


def _document(d: int, chunks: int, *, version: int = 0) -> KBDocumentWrite:
    texts = [
        " ".join(WORDS[(d + i + k + version) % len(WORDS)] for k in range(3 + (i + version) % 5))
        + f" uniq{d}x{i}v{version}"
        for i in range(chunks)
    ]
    return KBDocumentWrite(
        id=f"doc-{d}",
        title=f"titl{d} document",
        source=f"doc-{d}.md",
        url=None,
        content_hash=f"h{d}-{version}",
        metadata={},
        chars=sum(map(len, texts)),
        chunks=[KBChunkWrite(i, f"head{i % 7} part", t) for i, t in enumerate(texts)],
        vectors=np.ones((chunks, DIM), np.float32) / 2,
        embed_model="test",
        embed_dim=DIM,
    )


async def _scores(db: Any) -> list[list[tuple[int, float]]]:
    return [[(int(r), round(float(s), 9)) for r, s in await db.fetchall(RANK, (q,))] for q in QUERIES]


async def _rebuild_and_check(db: Any) -> None:
    async def run(conn: aiosqlite.Connection) -> None:
        await conn.execute("INSERT INTO kb_chunks_fts(kb_chunks_fts) VALUES ('integrity-check')")
        await conn.execute("INSERT INTO kb_chunks_fts(kb_chunks_fts) VALUES ('rebuild')")

    await db.transact(run)


async def test_batched_chunk_inserts_index_exactly_what_a_rebuild_does(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        db = kb._db
        await kb.create_bucket("default", {}, typed_row=typed_values)
        # One write of several full statements and a partial one, in documents that
        # straddle the statements' boundaries.
        n = 2 * ROWS_PER_INSERT // 9 + 10  # ~9 chunks a document: more than two statements' worth
        docs = [_document(d, 7 + d % 5) for d in range(n)]
        total = sum(len(d.chunks) for d in docs)
        assert total > 2 * ROWS_PER_INSERT and total % ROWS_PER_INSERT
        ids = await kb.write_documents("default", {}, docs)
        assert sum(map(len, ids)) == total

        rows = await db.fetchall("SELECT id, doc_id, position, title, heading, text FROM kb_chunks ORDER BY id")
        expected = [
            (cid, d.id, c.position, d.title, c.heading, c.text)
            for d, cids in zip(docs, ids, strict=True)
            for cid, c in zip(cids, d.chunks, strict=True)
        ]
        assert [tuple(r) for r in rows] == expected
        # Every chunk is found by its own term, and each column's terms sit in that column.
        for cid, doc_id, position, _title, _heading, _text in expected[:: max(1, total // 40)]:
            d = int(doc_id.split("-")[1])
            hit = await db.fetchall(
                "SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH ?", (f'text:"uniq{d}x{position}v0"',)
            )
            assert [r[0] for r in hit] == [cid]
        in_title = await db.fetchall("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH 'title:titl5'")
        assert sorted(r[0] for r in in_title) == ids[5]
        assert await db.fetchall("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH 'text:titl5'") == []

        written = await _scores(db)
        assert all(written)
        await _rebuild_and_check(db)
        assert await _scores(db) == written

        # Rewritten documents (new text, other chunk counts) and deleted ones leave no
        # stale terms: the index still equals its rebuild, and old terms find nothing.
        await kb.write_documents("default", {}, [_document(d, 3 + d % 9, version=1) for d in range(0, n, 3)])
        await kb.delete_documents([f"doc-{d}" for d in range(1, n, 3)])
        assert await db.fetchall("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH '\"uniq3x0v0\"'") == []
        assert await db.fetchall("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH '\"uniq4x0v0\"'") == []
        assert len(await db.fetchall("SELECT rowid FROM kb_chunks_fts WHERE kb_chunks_fts MATCH '\"uniq3x0v1\"'")) == 1
        changed = await _scores(db)
        assert changed != written
        await _rebuild_and_check(db)
        assert await _scores(db) == changed

        # And the index's own search path sees the same.
        ranked = await kb.text_candidates(["uniq5x2v0"], KBScope(), 5, KBTextTuning())
        assert len(ranked.ids) == 1 and ranked.ids[0] == ids[5][2]


async def test_documents_and_typed_fields_of_a_wide_bucket_are_written_whole(tmp_path: Path) -> None:
    """Documents and typed rows go several a statement too; a bucket with many fields
    gets fewer rows a statement (SQLite caps bound parameters), never an error."""
    fields = {f"f{i}": "INTEGER" for i in range(150)}
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        await kb.create_bucket("wide", fields, typed_row=typed_values)
        docs = []
        for d in range(ROWS_PER_INSERT + 60):
            meta = {name: d * 1000 + i for i, name in enumerate(fields)}
            doc = _document(d, 1)
            docs.append(replace(doc, metadata=meta, typed=typed_values(fields, meta)))
        await kb.write_documents("wide", fields, docs)
        stored = await kb._db.fetchall("SELECT id, bucket, title, content_hash, metadata FROM kb_documents")
        assert {i: (b, t, h, orjson.loads(m)) for i, b, t, h, m in stored} == {
            d.id: ("wide", d.title, d.content_hash, d.metadata) for d in docs
        }
        typed = await kb._db.fetchall('SELECT * FROM "meta_wide" ORDER BY doc_id')
        assert [tuple(r) for r in typed] == sorted((d.id, *d.typed) for d in docs)
        assert await kb.count_documents(KBScope(bucket="wide")) == len(docs)


async def test_a_document_write_commits_while_the_event_loop_is_busy(tmp_path: Path) -> None:
    """A knowledge-base write runs whole on the writer's thread (``transact_whole``): it
    commits while the event loop is busy (an ingest preparing its next batch), where one
    hop per statement made each statement wait for the loop first."""
    async with opened_storage(tmp_path / "kb.db") as storage:
        kb = storage.kb_index
        db = kb._db
        await kb.create_bucket("default", {}, typed_row=typed_values)
        docs = [_document(d, 3) for d in range(40)]
        write = asyncio.create_task(kb.write_documents("default", {}, docs))
        for _ in range(1000):  # until the write holds the writer
            if db._write_lock.locked():
                break
            await asyncio.sleep(0)
        assert db._write_lock.locked()
        for _ in range(10):  # its transaction handed over (the task holding the lock starts)
            await asyncio.sleep(0)
        # The event loop is blocked from here on: only the writer's thread can commit.
        deadline = time.monotonic() + 30
        committed = 0
        with sqlite3.connect(tmp_path / "kb.db") as other:
            while time.monotonic() < deadline:
                committed = other.execute("SELECT count(*) FROM kb_chunks").fetchone()[0]
                if committed == 3 * len(docs):
                    break
                time.sleep(0.01)
        assert committed == 3 * len(docs)
        ids = await write
        assert sorted(i for part in ids for i in part) == [
            r[0] for r in await db.fetchall("SELECT id FROM kb_chunks ORDER BY id")
        ]


async def test_a_transaction_run_whole_refuses_to_wait_for_the_event_loop(tmp_path: Path) -> None:
    """``transact_whole`` runs its function on the writer's thread, where nothing of the
    event loop can be awaited: such a function is refused, its statements rolled back."""
    async with opened_storage(tmp_path / "kb.db") as storage:
        sql = storage.kb_index._sql

        async def waits(tx: Any) -> None:
            await tx.execute("INSERT INTO kb_buckets(name, schema, created_at) VALUES ('x', '{}', 'now')")
            await asyncio.sleep(0)

        with pytest.raises(RuntimeError, match="awaited something other than its Tx"):
            await sql.transact_whole(waits)
        assert await storage.kb_index._db.fetchall("SELECT name FROM kb_buckets WHERE name = 'x'") == []
