"""The stored vectors a re-made document may reuse (``KBIndex.stored_vectors``).

Why: a document re-chunked after a change of the chunking rules, or edited in one
paragraph, comes out with mostly the same chunk texts; embedding them again costs a
remote embedder as much as the first ingest. The ingest reads its stored documents'
vectors here - one statement per part of a batch, never one per chunk - and embeds only
the texts it does not find (``knowledge.ingest_reuse``).

Only vectors the document itself holds are read, and only while its stamp says they
are of ``embed_model`` at ``dim`` dimensions and it is in ``bucket``: a vector is never
handed across embedders, widths, documents or buckets. A vector of another width than
``dim`` (a torn copy: ``KBVectorRows.unreadable``) is left out, so its chunk is embedded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from storage.kb_records import KBStoredChunkVector, KBStoredVectors
from storage.sql import SqlEngine
from storage.stores.kb_engine_parts import parts


async def read_stored_vectors(
    sql: SqlEngine, vector_column: str, bucket: str, embed_model: str, dim: int, doc_ids: Sequence[str]
) -> dict[str, KBStoredVectors]:
    """Per document of ``doc_ids`` in ``bucket`` stamped as embedded by ``embed_model``
    at ``dim``, its title and its chunks' readable vectors (``KBStoredVectors``)."""
    ids = list(dict.fromkeys(doc_ids))
    found: dict[str, tuple[str, list[KBStoredChunkVector]]] = {}
    decode = sql.dialect.decode_vector
    for part in parts(ids):
        rows = await sql.fetchall(
            f"SELECT d.id, d.title, c.heading, c.text, c.{vector_column} FROM kb_documents d"
            " JOIN kb_chunks c ON c.doc_id = d.id"
            f" WHERE d.id IN ({sql.dialect.marks(len(part))}) AND d.bucket = ? AND d.embed_model = ?"
            f" AND d.embed_dim = ? AND c.{vector_column} IS NOT NULL ORDER BY d.id, c.position",
            (*part, bucket, embed_model, dim),
        )
        for doc_id, title, heading, text, raw in rows:
            vector = np.asarray(decode(raw), np.float32)
            _, chunks = found.setdefault(str(doc_id), (title or "", []))
            if vector.shape == (dim,):
                chunks.append(KBStoredChunkVector(heading or "", text or "", vector))
    return {i: KBStoredVectors(i, title, tuple(chunks)) for i, (title, chunks) in found.items()}


__all__ = ["read_stored_vectors"]
