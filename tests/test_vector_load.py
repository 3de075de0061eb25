"""Opening a knowledge base loads its vectors in batches (issue 24): the matrix is the
one a document-by-document load builds, appended a few thousand documents at a time
(one at a time, a 1M-chunk knowledge base took two to three minutes to open)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import numpy as np
import pytest

from knowledge.vectors import LOAD_BATCH_DOCUMENTS, VectorIndex, load_vectors
from storage.interfaces import KBIndex
from storage.kb_records import KBVectorRows


class StoredVectors:
    """What ``KBIndex.iter_vectors`` yields for a stored knowledge base: one
    ``KBVectorRows`` per document, in the store's order."""

    def __init__(self, docs: list[KBVectorRows]) -> None:
        self.docs = docs

    async def iter_vectors(self, embed_model: str, dim: int) -> AsyncIterator[KBVectorRows]:
        for d in self.docs:
            yield d


class CountingIndex(VectorIndex):
    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self.appends = 0

    def _append(self, *args: Any, **kwargs: Any) -> None:
        self.appends += 1
        super()._append(*args, **kwargs)


def _stored(n_docs: int, dim: int) -> list[KBVectorRows]:
    rng = np.random.default_rng(8)
    docs, chunk = [], 1
    for d in range(n_docs):
        k = 1 + d % 3
        docs.append(
            KBVectorRows(
                f"doc{d:05d}",
                "abc"[d % 3],
                list(range(chunk, chunk + k)),
                rng.standard_normal((k, dim)).astype(np.float32),
            )
        )
        chunk += k
    return docs


@pytest.mark.asyncio
async def test_vectors_load_in_batches_into_the_same_matrix() -> None:
    dim, n_docs = 8, 2 * LOAD_BATCH_DOCUMENTS + 7
    docs = _stored(n_docs, dim)
    loaded = CountingIndex(dim)
    added = await load_vectors(loaded, cast(KBIndex, StoredVectors(docs)), "m")
    one_by_one = VectorIndex(dim)
    for d in docs:
        one_by_one.add(d.chunk_ids, d.doc_id, d.bucket, d.vectors)

    assert added == sum(len(d.chunk_ids) for d in docs)
    assert loaded.appends == 3  # two full batches and the rest, not one append per document
    a, b = loaded.snapshot(), one_by_one.snapshot()
    assert a.n == b.n == added
    assert np.array_equal(a.matrix[: a.n], b.matrix[: b.n])
    for field in ("chunk_ids", "doc_codes", "bucket_codes", "alive"):
        assert np.array_equal(getattr(a, field)[: a.n], getattr(b, field)[: b.n]), field
    assert [loaded.doc_name(i) for i in range(loaded.doc_code_count)] == [d.doc_id for d in docs]
    q = np.ones(dim, np.float32) / np.sqrt(dim)
    assert loaded.cosines([1, 5, added], q) == one_by_one.cosines([1, 5, added], q)
    assert loaded.remove_document("doc00004") == one_by_one.remove_document("doc00004") == 2


@pytest.mark.asyncio
async def test_an_empty_store_loads_nothing() -> None:
    loaded = CountingIndex(4)
    assert await load_vectors(loaded, cast(KBIndex, StoredVectors([])), "m") == 0
    assert loaded.size == 0


@pytest.mark.asyncio
async def test_long_documents_are_appended_a_bounded_number_of_rows_at_a_time() -> None:
    """A few long documents never make one batch of the whole knowledge base: a batch
    ends at LOAD_BATCH_ROWS rows as well (the review measured 890 MB over the matrix for
    100 documents of 2,000 chunks when batches counted documents only)."""
    from knowledge.vectors import LOAD_BATCH_ROWS

    dim, per_doc = 4, LOAD_BATCH_ROWS // 4
    rng = np.random.default_rng(3)
    docs = [
        KBVectorRows(f"long{d}", "a", list(range(1 + d * per_doc, 1 + (d + 1) * per_doc)),
                     rng.standard_normal((per_doc, dim)).astype(np.float32))  # fmt: skip
        for d in range(10)
    ]
    loaded = CountingIndex(dim)
    added = await load_vectors(loaded, cast(KBIndex, StoredVectors(docs)), "m")
    assert added == 10 * per_doc
    assert loaded.appends == 3  # 4 + 4 + 2 documents, not the 10 in one append
