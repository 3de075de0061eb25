"""The ``get_document_metadata`` handler: one document's fields and metadata, capped,
registered as evidence so the answer may cite it.

Apart from the search handler because it shares nothing with it but the deps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agenttools.core.registry import EvidenceSource, ToolContext, ToolHandler, ToolOutcome
from agenttools.core.untrusted import TRUST, safe_url
from agenttools.rag.corpus_deps import CorpusToolDeps, opt_str
from agenttools.rag.own_bucket import own_private_buckets
from agenttools.rag.sources import shown_source, small_metadata


def make_metadata_handler(deps: CorpusToolDeps) -> ToolHandler:
    kb = deps.knowledge

    async def get_document_metadata(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        doc_id = opt_str(args.get("doc_id"))
        if doc_id is None:
            return ToolOutcome.error("doc_id is required", guidance="Pass a doc_id from a search result.")
        # A document of the run's own conversation's attachments is readable, no other private one's.
        own = own_private_buckets(ctx, deps.conversation_attachments)
        doc = await kb.get_document(doc_id, private=own[0] if own else None)
        if doc is None:
            known = [s.id for s in ctx.state.sources.values() if s.kind == "internal"][:20]
            return ToolOutcome.error(
                f"No document with doc_id {doc_id[:80]!r}.",
                reason="unknown_document",
                doc_ids_seen_in_this_run=known,
                guidance="Use a doc_id exactly as a search result gave it.",
            )
        source = ctx.state.sources.get(doc_id)
        if source is None:
            meta: dict[str, Any] = {"doc_id": doc_id, "bucket": doc.get("bucket"), "chunks": [], "origin": "corpus"}
            source = EvidenceSource(
                id=doc_id, title=str(doc.get("title") or doc_id), url=doc.get("url"), kind="internal", metadata=meta
            )
            ctx.state.add_source(source)
        if isinstance(doc.get("fields"), dict):
            source.metadata.setdefault("fields", small_metadata(doc["fields"]))
        if not source.location:
            source.location = "document metadata"
        content = {
            "source_id": doc_id,
            "doc_id": doc_id,
            "bucket": doc.get("bucket"),
            "title": doc.get("title"),
            "source": shown_source(doc.get("source")),
            "url": safe_url(doc.get("url")),
            "fields": doc.get("fields") or {},
            "metadata": _capped(doc.get("metadata") or {}, deps.max_metadata_chars),
            "chars": doc.get("chars"),
            "chunks": doc.get("chunks"),
            "created_at": doc.get("created_at"),
            "updated_at": doc.get("updated_at"),
            "trust": TRUST,  # title, fields and metadata come from the document
        }
        return ToolOutcome(content=content)

    return get_document_metadata


def _capped(value: Any, limit: int, depth: int = 0) -> Any:
    """Metadata as stored, with long strings and deep or long structures cut."""
    if isinstance(value, str):
        return value if len(value) <= limit else value[:limit] + "…"
    if depth >= 3:
        return "…"
    if isinstance(value, Mapping):
        return {str(k): _capped(v, limit, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return [_capped(v, limit, depth + 1) for v in list(value)[:50]]
    return value
