"""A filtered search by meaning masks the in-memory matrix by the scope's chunk ids,
read straight from storage (issue 24): at 1M chunks, mapping a filter's 38k document ids
through a dict of every document cost 35-45 ms of the event loop per search. The rows it
keeps are the rows the documents' mask keeps, and the hits are the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.cli.kb_file import open_kb_file
from knowledge.vectors import VectorIndex
from toolindex.hashing import HashingEmbedder

DIM = 8


def _rows(k: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((k, DIM)).astype(np.float32)


def _check_masks(index: VectorIndex, chunks_of: dict[str, list[int]], rng: np.random.Generator) -> None:
    snap = index.snapshot()
    alive = snap.alive[: snap.n]
    names = sorted(chunks_of)
    for _ in range(20):
        picked = [d for d in names if rng.random() < 0.4]
        ids = [c for d in picked for c in chunks_of[d]]
        by_docs = index.doc_mask(snap, picked) & alive
        by_chunks = index.chunk_mask(snap, np.asarray(ids, np.int64))
        assert by_chunks.shape == by_docs.shape
        assert np.array_equal(by_chunks, by_docs)


def test_chunk_mask_keeps_the_rows_the_document_mask_keeps() -> None:
    """Through appends past the map's size, removals and a compaction."""
    rng = np.random.default_rng(3)
    index = VectorIndex(DIM, capacity=4)
    chunks_of: dict[str, list[int]] = {}
    next_id = 1
    for d in range(300):
        k = 1 + d % 4
        ids = list(range(next_id, next_id + k))
        next_id += k + (d % 5 == 0) * 37  # gaps, as deletions leave in the store's ids
        index.add(ids, f"doc{d}", "ab"[d % 2], _rows(k, d))
        chunks_of[f"doc{d}"] = ids
    _check_masks(index, chunks_of, rng)
    for d in range(0, 300, 3):
        assert index.remove_document(f"doc{d}") == len(chunks_of.pop(f"doc{d}"))
    _check_masks(index, chunks_of, rng)
    dead_ids = [next_id + 5_000]  # never added: nothing
    assert not index.chunk_mask(index.snapshot(), dead_ids).any()
    index.compact()
    assert index.snapshot().n == sum(len(v) for v in chunks_of.values())
    _check_masks(index, chunks_of, rng)
    # cosines find each chunk's row after the compaction moved it
    q = np.ones(DIM, np.float32) / np.sqrt(DIM)
    some = chunks_of["doc1"] + chunks_of["doc2"] + [0, 10**9, -4]
    cos = index.cosines(some, q)
    snap = index.snapshot()
    rows = {int(c): i for i, c in enumerate(snap.chunk_ids[: snap.n].tolist())}
    assert set(cos) == set(chunks_of["doc1"] + chunks_of["doc2"])
    for c, s in cos.items():
        assert s == pytest.approx(float(snap.matrix[rows[c]] @ q), abs=1e-6)


def test_a_negative_chunk_id_is_refused() -> None:
    index = VectorIndex(DIM)
    with pytest.raises(ValueError, match="negative"):
        index.add([-1], "d", "b", _rows(1, 0))


@pytest.mark.parametrize("mode", ["semantic", "hybrid"])
async def test_a_filtered_search_by_meaning_masks_by_chunk_ids_with_the_same_hits(tmp_path: Path, mode: str) -> None:
    kb = await open_kb_file(tmp_path / "kb.db", HashingEmbedder(dim=64))
    try:
        await kb.create_bucket("parts", {"kind": "TEXT", "size": "INTEGER"})
        kinds = ["bolt", "nut", "washer"]
        await kb.ingest_documents(
            [
                {
                    "id": f"p{i}",
                    "title": f"{kinds[i % 3]} {i}",
                    "text": f"A {kinds[i % 3]} of size {i % 7} for the mounting bracket. " * (1 + i % 4),
                    "kind": kinds[i % 3],
                    "size": i % 7,
                }
                for i in range(90)
            ],
            bucket="parts",
        )
        dense: Any = kb._vectors
        walked: list[int] = []
        doc_mask = dense.matrix.doc_mask

        def counting_doc_mask(snap: Any, doc_ids: Any) -> Any:
            walked.append(len(list(doc_ids)))
            return doc_mask(snap, doc_ids)

        dense.matrix.doc_mask = counting_doc_mask

        async def run() -> list[list[tuple[str, float]]]:
            out = []
            for filters in ({"kind": "bolt"}, {"size": {">": 3}}, {"kind": "nut", "size": 2}):
                res = await kb.search("bolt for a bracket", bucket="parts", filters=filters, mode=mode, top_k=8)
                assert res.hits
                out.append([(h.chunk_id, h.score) for h in res.hits])
            return out

        by_chunks = await run()
        assert walked == []  # no document walked on the event loop
        dense.scope_by_chunks = False  # the same searches, resolved to documents
        by_documents = await run()
        assert walked and by_chunks == by_documents
    finally:
        await kb.aclose()
