"""How many documents a scope covers, and which filter condition to drop when a
search finds nothing (``KnowledgeBase.count_documents``, ``constraint_counts``,
``relax_filters``); and ``search_scope``, the scope of a search or a count.

Why apart from ``knowledge.search``: these count documents and never rank; the
searcher uses them only to relax a filter that matched nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from knowledge.attachments import PRIVATE_PREFIX
from knowledge.buckets import Buckets
from knowledge.filters import (
    compile_filters,
    constraint_label,
    join_constraints,
    parse_filters,
    split_constraints,
)
from knowledge.textnorm import STOP_WORDS, tokens
from knowledge.types import ConstraintCount, DocumentCount
from storage.interfaces import KBIndex
from storage.kb_records import KBFilter, KBScope, KBTextTuning


class ScopeCounts:
    """Document counts of scopes, on the knowledge base's index."""

    def __init__(self, index: KBIndex, buckets: Buckets, tuning: KBTextTuning) -> None:
        self.index = index
        self.buckets = buckets
        self._tuning = tuning

    async def relax_filters(
        self, filters: Mapping[str, Any], *, bucket: str | None = None
    ) -> tuple[dict[str, Any] | None, str] | None:
        counted = await self.constraint_counts(filters, bucket=bucket)
        if not counted:
            return None
        drop = min(range(len(counted)), key=lambda i: counted[i].documents)
        rest = [c.constraint for i, c in enumerate(counted) if i != drop]
        return join_constraints(rest), counted[drop].label

    async def constraint_counts(
        self, filters: Mapping[str, Any] | str | None, *, bucket: str | None = None
    ) -> list[ConstraintCount]:
        """Each top-level constraint of ``filters`` alone, with how many documents of
        ``bucket`` (without one: of every shared bucket, ``search_scope``) it matches:
        which condition is the one that matches nothing."""
        parsed = parse_filters(filters)
        if not parsed:
            return []
        schema = await self.buckets.schema(bucket) if bucket is not None else None
        out: list[ConstraintCount] = []
        for c in split_constraints(parsed):
            compiled = compile_filters(c, schema, bucket=bucket)
            documents = await self.index.count_documents(search_scope(bucket, compiled))
            out.append(ConstraintCount(c, constraint_label(c), documents))
        return out

    async def count_documents(
        self,
        query: str | None = None,
        *,
        bucket: str | None = None,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        limit: int = 1000,
    ) -> DocumentCount:
        """How many documents a request covers: those in scope (bucket, filters,
        doc_id) and, when ``query`` has content terms, whose text matches one of them.

        Exact for a scope alone; with terms, the distinct documents among the best
        ``limit`` matching passages (``exact`` is false when there were more passages,
        so the count is a lower bound). Without ``bucket``: every shared bucket
        (``search_scope``).
        """
        schema = await self.buckets.schema(bucket) if bucket is not None else None
        scope = search_scope(bucket, compile_filters(filters, schema, bucket=bucket), doc_id)
        terms = [t for t in tokens(query or "") if t not in STOP_WORDS]
        if not terms:
            return DocumentCount(await self.index.count_documents(scope), True)
        ranked = await self.index.text_candidates(list(dict.fromkeys(terms)), scope, max(1, limit), self._tuning)
        if not ranked.ids:
            return DocumentCount(0, True)
        rows = await self.index.hydrate(ranked.ids)
        return DocumentCount(len({r.doc_id for r in rows}), ranked.total <= len(ranked.ids))


def search_scope(bucket: str | None, compiled: KBFilter | None, doc_id: str | None = None) -> KBScope:
    """A search's or a count's scope. Without a bucket it is every shared one: the
    conversations' private buckets (``knowledge.attachments``) are left out by each
    side's own selection (the text statement, the vector statement or the in-memory
    matrix's stored bucket of each row), so one made by another replica an instant
    before is never ranked nor counted, whoever's it is. A caller's own private bucket
    is searched by name (``KnowledgeBase.search``'s ``private``: a list of buckets)."""
    if bucket is not None:
        return KBScope(bucket, compiled, doc_id)
    return KBScope(None, compiled, doc_id, hidden_prefix=PRIVATE_PREFIX)


__all__ = ["ScopeCounts", "search_scope"]
