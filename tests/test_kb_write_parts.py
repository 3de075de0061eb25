"""An ingest writes a batch, and a bucket's delete removes its documents, in parts of at
most ``KBIndex.chunks_per_write`` chunks, whole documents each
(``knowledge.ingest_stages.write_parts``, ``Ingestor.empty_bucket``).

Why it matters: on SQLite one writer commits every live run's events too, and none
commits while a knowledge-base write runs - a batch of 256 large documents written in one
transaction, or a large bucket deleted in one, held every stream's next token for
seconds. Between two parts the writer takes the run events queued meanwhile.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from knowledge.ingest_docs import Prepared
from knowledge.ingest_stages import write_parts
from knowledge.kb import KnowledgeBase
from knowledge.types import DocumentIn
from storage.kb_records import KBDocumentWrite
from storage.records import NewRun, RunEvent, RunWrite
from storage.sqlite.kb_index import CHUNKS_PER_WRITE
from tests.support.storage import opened_storage

WRITE_CHUNKS = 30


def _text(doc: int, paragraphs: int) -> str:
    """Paragraphs of ~700 characters: one chunk each at the default chunk target."""
    return "\n\n".join(
        " ".join(f"doc{doc} para{p} word{w}" for w in range(40)) for p in range(paragraphs)
    )


def _prepared(doc: int, chunks: int) -> Prepared:
    return Prepared(DocumentIn(text="x", id=f"d{doc}"), None, "h", [], [object()] * chunks, None)  # type: ignore[list-item]


def test_parts_hold_whole_documents_and_at_most_the_bound() -> None:
    todo = [_prepared(i, n) for i, n in enumerate([10, 15, 5, 40, 1, 29, 30, 2])]
    parts = write_parts(todo, 30)
    assert [[p.doc.id for p in part] for part in parts] == [
        ["d0", "d1", "d2"], ["d3"], ["d4", "d5"], ["d6"], ["d7"]
    ]
    assert [p for part in parts for p in part] == todo  # every document once, in order
    assert write_parts([], 30) == []
    assert write_parts(todo, None) == [todo]  # no bound (PostgreSQL): the batch in one write


async def test_a_live_runs_events_commit_between_the_parts_of_a_large_batch(tmp_path: Path) -> None:
    """A batch of many chunks is several writes, and a run event queued while one runs
    commits before the next: the writer is not held for the whole batch. On the code
    before, the batch was one write and the first event committed only after it."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(NewRun("r1", "c", "alice", "knowledge", orjson.dumps({"m": "hi"}), "enqueue"))
        index = storage.kb_index
        assert index.chunks_per_write == CHUNKS_PER_WRITE  # SQLite's bound, made small here
        index.chunks_per_write = WRITE_CHUNKS
        kb = await KnowledgeBase.create(index, None)
        real_write = index.write_documents
        order: list[str] = []
        written: list[list[str]] = []

        async def write_documents(bucket: str, fields: Any, docs: Sequence[KBDocumentWrite]) -> list[list[int]]:
            # A live run's token arrives as this write asks for the writer.
            seq = len(written) + 1
            event = RunEvent(seq, "content_chunk", orjson.dumps({"chunk": f"t{seq}"}).decode())
            storage.runs.write(
                RunWrite("r1", "c", "alice", events=[event], status="running", finished=False),
                on_commit=lambda: order.append(f"event {seq}"),
            )
            ids = await real_write(bucket, fields, docs)
            written.append([d.id for d in docs])
            order.append(f"kb {seq}")
            return ids

        index.write_documents = write_documents  # type: ignore[method-assign]
        # 12 documents of 8 chunks and one of 45: four parts of whole documents, the
        # large one alone (a document is never split between writes).
        docs = [{"id": f"d{i}", "text": _text(i, 8)} for i in range(12)]
        docs.insert(5, {"id": "big", "text": _text(99, 45)})
        report = await kb.ingest_documents(docs)
        await storage.db.flush()

        assert report.added == 13 and report.rejected == []
        assert len(written) >= 4, written
        assert ["big"] in written
        # Every event committed before the next write of the batch was done: the writer
        # took it between two parts.
        for seq in range(1, len(written)):
            assert order.index(f"event {seq}") < order.index(f"kb {seq + 1}"), order
        with sqlite3.connect(path) as conn:
            stored = dict(conn.execute("SELECT doc_id, count(*) FROM kb_chunks GROUP BY doc_id").fetchall())
            counts = dict(conn.execute("SELECT id, chunk_count FROM kb_documents").fetchall())
        assert stored == counts and len(stored) == 13
        assert sum(stored.values()) == report.chunks


async def test_a_live_runs_events_commit_between_the_parts_of_a_bucket_delete(tmp_path: Path) -> None:
    """A bucket of many chunks is deleted in several writes (its documents, then the
    bucket), and a run event queued while one runs commits before the next. On the code
    before, the bucket went in one write and no document was deleted on its own."""
    path = tmp_path / "agent.db"
    async with opened_storage(path) as storage:
        await storage.runs.create(NewRun("r1", "c", "alice", "knowledge", orjson.dumps({"m": "hi"}), "enqueue"))
        index = storage.kb_index
        index.chunks_per_write = WRITE_CHUNKS
        kb = await KnowledgeBase.create(index, None)
        docs = [{"id": f"d{i}", "text": _text(i, 8)} for i in range(12)]
        docs.insert(5, {"id": "big", "text": _text(99, 45)})
        await kb.ingest_documents(docs, bucket="going")
        await kb.ingest_documents([{"id": "stays", "text": _text(7, 3)}])
        order: list[str] = []
        writes: list[str] = []

        def queue_event() -> int:
            seq = len(writes) + 1
            event = RunEvent(seq, "content_chunk", orjson.dumps({"chunk": f"t{seq}"}).decode())
            storage.runs.write(
                RunWrite("r1", "c", "alice", events=[event], status="running", finished=False),
                on_commit=lambda: order.append(f"event {seq}"),
            )
            return seq

        real_delete, real_drop = index.delete_documents, index.delete_bucket

        async def delete_documents(ids: Sequence[str]) -> list[str]:
            seq = queue_event()
            gone = await real_delete(ids)
            writes.append(f"documents {len(gone)}")
            order.append(f"kb {seq}")
            return gone

        async def delete_bucket(name: str) -> list[str] | None:
            seq = queue_event()
            gone = await real_drop(name)
            writes.append(f"bucket {gone}")
            order.append(f"kb {seq}")
            return gone

        index.delete_documents = delete_documents  # type: ignore[method-assign]
        index.delete_bucket = delete_bucket  # type: ignore[method-assign]
        assert await kb.delete_bucket("going") == 13
        await storage.db.flush()

        assert len(writes) >= 5 and writes[-1] == "bucket []", writes  # the documents first, then the bucket
        for seq in range(1, len(writes)):
            assert order.index(f"event {seq}") < order.index(f"kb {seq + 1}"), order
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT name FROM kb_buckets ORDER BY name").fetchall() == [("default",)]
            assert conn.execute("SELECT id FROM kb_documents").fetchall() == [("stays",)]
            assert {r[0] for r in conn.execute("SELECT DISTINCT doc_id FROM kb_chunks")} == {"stays"}
        assert await kb.delete_bucket("going") is None
