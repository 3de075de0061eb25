"""What a search by meaning could not see, said in its ``warnings``: stored vectors that
could not be read, and documents still waiting for vectors.

Why apart from ``knowledge.search``: both warnings speak of the documents the search
covered only, never of the whole index. The whole index's counts (``/readyz``,
``/metrics``: the operator's view) include other users' private attachments and buckets
the search did not cover, and a user's search saying "1 document(s) have no vectors yet"
of another user's attached file tells that it exists. Each is asked of the index only
while the whole index has some (``DenseSide.unreadable``, the re-embedding's pending
count), so a search pays nothing for them otherwise.
"""

from __future__ import annotations

from knowledge.dense import DenseSide
from storage.interfaces import KBIndex
from storage.kb_records import KBScope


async def unsearched_vector_warnings(
    index: KBIndex,
    dense: DenseSide,
    scope: KBScope,
    *,
    pending: int,
    embed_key: str,
    embed_dim: int,
    use_text: bool,
) -> list[str]:
    """The warnings of a search by meaning over ``scope``: its documents' unreadable
    vectors, then those of its documents without vectors of ``embed_key`` (asked only
    when the whole index's ``pending`` count says some wait)."""
    warnings: list[str] = []
    if unreadable := dict(dense.unreadable()):
        covered = await index.docs_in_scope(scope, list(unreadable))
        if covered:
            warnings.append(
                f"{sum(unreadable[d] for d in covered)} chunk(s) of {len(covered)} document(s) have stored "
                "vectors that could not be read (wrong length): not searched by meaning until re-embedded"
            )
    if pending and (waiting := await index.count_without_vectors(scope, embed_key, embed_dim)):
        seen_by = "found by text in this search" if use_text else "a search in text mode finds them"
        warnings.append(
            f"{waiting} document(s) have no vectors yet (re-embedding in the background): "
            f"not searched by meaning; {seen_by}"
        )
    return warnings


__all__ = ["unsearched_vector_warnings"]
