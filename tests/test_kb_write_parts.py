"""An ingest writes a batch in parts of at most ``KBIndex.chunks_per_write`` chunks,
whole documents each (``knowledge.ingest_stages.write_parts``).

Why it matters: on SQLite one writer commits every live run's events too, and none
commits while a knowledge-base write runs - a batch of 256 large documents written in one
transaction held every stream's next token for seconds. Between two parts the writer
takes the run events queued meanwhile.
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
