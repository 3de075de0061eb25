"""What the knowledge base says about itself: whether a semantic search runs on vectors
now, and the counts ``/readyz`` shows (``app.knowledge_component``).

A job apart from the face that serves searches and ingests (``knowledge.kb``, which
only calls these): the reader is the operator, not a search's caller, and the rules are
their own. A search that cannot use vectors falls back to text and says so in its own
result; ``semantic_status`` says so where an operator looks, before anyone searches (the
Ollama embedder's failure once hid behind that fallback). ``kb_stats`` counts
conversations' attachments apart (``private``), so that whoever reads the shared counts
learns nothing of who attached what (``/readyz`` answers without a token).

Both take in first what another process changed in the stored KB (``knowledge.freshness``),
as a search does, so a count never lags behind a search.
"""

from __future__ import annotations

from typing import Any

from knowledge.attachments import PRIVATE_PREFIX
from knowledge.buckets import Buckets
from knowledge.dense import DenseSide
from knowledge.freshness import KBFreshness
from storage.interfaces import KBIndex
from toolindex.embedder import Embedder


async def semantic_status(
    embedder: Embedder | None, embed_key: str | None, vectors: DenseSide, fresh: KBFreshness, *, fallbacks: int
) -> dict[str, Any]:
    """``ok`` when a semantic search runs on vectors now, else ``detail`` says why not;
    ``fallbacks`` is the searches that asked for vectors and ran on text since start."""
    out: dict[str, Any] = {"embedder": embed_key, "dim": embedder.dim if embedder else None, "fallbacks": fallbacks}
    if embedder is None:
        return {"ok": False, "detail": "no embedder: every search runs on text", **out}
    await fresh.check()
    out["index"] = await vectors.status()
    out["reload_failures"] = fresh.reload_failures
    if fresh.reload_error is not None:  # the vectors in memory are older than the stored ones
        out["reload_error"] = fresh.reload_error
    if not await vectors.available():
        return {"ok": False, "detail": f"no vectors of {embed_key} stored yet: searches run on text", **out}
    return {"ok": True, **out}


async def kb_stats(
    index: KBIndex,
    embedder: Embedder | None,
    embed_key: str | None,
    vectors: DenseSide,
    fresh: KBFreshness,
    buckets: Buckets,
    schema_version: int | None,
) -> dict[str, Any]:
    """Documents, chunks and vectors (the shared corpus's and, apart, the attachments'),
    buckets, the embedder, documents still without its vectors, where the KB is stored."""
    await fresh.check()
    dim = embedder.dim if embedder else None
    counts = await index.counts(embed_key, dim, hidden_prefix=PRIVATE_PREFIX)
    return {
        "documents": counts.documents,
        "chunks": counts.chunks,
        "vectors": await vectors.count(),
        # Conversations' attachments among the counts: ``/readyz`` shows the shared
        # corpus only, so nobody watching it learns when someone attached a file.
        "private": {
            "documents": counts.hidden_documents,
            "chunks": counts.hidden_chunks,
            "vectors": counts.hidden_current_chunks if embedder else 0,
        },
        "buckets": len(buckets),
        "embedder": embed_key,
        "dim": dim,
        "documents_without_current_vectors": counts.without_vectors if embedder else counts.documents,
        "schema_version": schema_version,
        "db_path": index.location,
    }


__all__ = ["kb_stats", "semantic_status"]
