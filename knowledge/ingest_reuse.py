"""Which chunks of a batch an ingest must embed, and which keep the vector their
document already stores (``EmbedPlan``).

Why: a document re-made - edited, or re-chunked after a change of the chunking rules
(``knowledge.chunking.CHUNK_RULES``) - comes out with mostly the same chunk texts, and
embedding every one again made the first ingest after an upgrade cost a remote
embedder (Ollama, Gemini, OpenAI-compatible) as much as the first ingest ever. A chunk
whose text as embedded (``embedding_text``: title, heading, text) is exactly one its
document stores a vector for takes that vector; only the others are embedded.

A vector is reused only within its own document id, in the same bucket, and only when
the document's stored vectors are of the embedder and width in use
(``KBIndex.stored_vectors`` checks all three): an embedder change still embeds
everything. Nothing changes in how the document is written: its old chunks stay until
the new ones commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from knowledge.ingest_docs import Prepared, embedding_text
from storage.interfaces import KBIndex


@dataclass(slots=True)
class EmbedPlan:
    """A batch's chunk texts split into those to embed (``texts``) and those whose
    stored vector is reused, with where each vector comes from."""

    #: The texts still to embed, in the order their rows come back.
    texts: list[str] = field(default_factory=list)
    #: Per document of the batch, per chunk: a reused vector, or the row in the
    #: embedded matrix (an index into ``texts``).
    sources: list[list[np.ndarray | int]] = field(default_factory=list)
    #: How many chunks took a stored vector.
    reused: int = 0

    def vectors(self, k: int, matrix: np.ndarray | None) -> np.ndarray | None:
        """The ``k``-th document's vectors, one row per chunk; ``None`` when one of its
        chunks needed an embedding that ``matrix`` (``None``: the embedder failed) lacks."""
        rows: list[np.ndarray] = []
        for source in self.sources[k]:
            if isinstance(source, int):
                if matrix is None:
                    return None
                rows.append(matrix[source])
            else:
                rows.append(source)
        return np.vstack(rows).astype(np.float32, copy=False) if rows else None


async def plan_embedding(index: KBIndex, bucket: str, embed_key: str, dim: int, todo: Sequence[Prepared]) -> EmbedPlan:
    """Which of ``todo``'s chunk texts to embed: one read of the stored vectors of the
    batch's documents already in ``bucket`` (``KBIndex.stored_vectors``)."""
    stored_ids = [p.doc.id or "" for p in todo if p.existing_bucket == bucket]
    stored = await index.stored_vectors(bucket, embed_key, dim, stored_ids) if stored_ids else {}
    plan = EmbedPlan()
    for p in todo:
        old = stored.get(p.doc.id or "")
        known = {embedding_text(old.title, c): c.vector for c in old.chunks} if old is not None else {}
        sources: list[np.ndarray | int] = []
        for chunk in p.chunks:
            text = embedding_text(p.doc.title, chunk)
            vector = known.get(text)
            if vector is not None:
                sources.append(vector)
                plan.reused += 1
            else:
                sources.append(len(plan.texts))
                plan.texts.append(text)
        plan.sources.append(sources)
    return plan


__all__ = ["EmbedPlan", "plan_embedding"]
