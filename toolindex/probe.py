"""The start-up probe of a remote embedder: its dimension known, one real answer seen.

The knowledge base and the tool index size their matrices from ``Embedder.dim``. The
Ollama and OpenAI-compatible embedders learn ``dim`` from their first reply, so an
index built before that reply was sized 0 wide, and every vector written later was
refused after its document had been stored (issue 20). Probing every remote embedder
when it is chosen closes that gap, and a server that cannot embed is found at start-up
(``auto`` then falls through to the next choice, with the reason shown in ``/readyz``)
rather than on a user's first question.

Ollama is asked ``/api/show`` for the model's embedding length (``learn_dimension``):
its first embedding loads the model and can take many seconds. Every other remote
embedder embeds one short text.
"""

from __future__ import annotations

import asyncio

from toolindex.embedder import Embedder, EmbeddingError

#: Seconds a start-up probe may take: long enough for a cold first embedding.
EMBED_PROBE_TIMEOUT_S = 20.0


async def probe_embedder(embedder: Embedder, *, timeout_s: float = EMBED_PROBE_TIMEOUT_S) -> str:
    """Make ``embedder.dim`` known and check it answers; how (for the logs and ``/readyz``).

    Raises ``EmbeddingError`` when it cannot: no answer, an HTTP error, a model that
    cannot embed, or no dimension.
    """
    learn = getattr(embedder, "learn_dimension", None)
    try:
        async with asyncio.timeout(timeout_s):
            if callable(learn):
                await learn()
                how = "dimension learned from the server"
            else:
                vector = await embedder.embed("dimension probe", task="query")
                how = f"a probe embedding of {len(vector)} values"
    except TimeoutError as exc:
        raise EmbeddingError(f"{embedder.name} did not answer the start-up probe within {timeout_s:g}s") from exc
    if embedder.dim <= 0:
        raise EmbeddingError(f"{embedder.name} ({embedder.model}) reported no embedding dimension")
    return f"dim {embedder.dim}, {how}"


__all__ = ["EMBED_PROBE_TIMEOUT_S", "probe_embedder"]
