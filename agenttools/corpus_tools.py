"""The bucketed-corpus tools of seed 004: ``search_text``, ``search_semantic`` and
``get_document_metadata``.

They are thin on purpose: the knowledge base does the retrieval (high-recall candidate
set, fusion, cheap re-ranking, at most three chunks per document, snippets) and the
filter language. This module turns what the model sent into one ``KnowledgeBase.search``
call and what came back into three things:

* a compact result the model reads (``source_id``/``doc_id``, ``chunk_id``, title,
  snippet, score, metadata, location);
* evidence: every document a result came from is registered in ``RunToolState.sources``
  under its ``doc_id``, so a ``[doc_id]`` citation in the answer (or a ``source_id`` in
  ``generate_response``) resolves to a title and a location;
* a clarification (see :mod:`agenttools.clarification`) when nothing matched even with
  the filters relaxed once, or when the query matches far too much with flat scores.

Errors the model can fix (unknown bucket, bad filter) come back as tool errors naming
what is allowed, so the next call can be right.

The app factory registers them after the RAG tools::

    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb, overload_threshold=200))
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agenttools.clarification import clarification_outcome, no_results, overload
from agenttools.rag.policy import mark_kb_searched
from agenttools.rag.sources import small_metadata
from agenttools.registry import EvidenceSource, RunToolState, ToolContext, ToolHandler, ToolOutcome, ToolRegistry
from knowledge.filters import BUILTIN_FIELDS, FilterError
from knowledge.kb import UnknownBucketError
from knowledge.types import BucketInfo, ChunkHit, SearchResponse

log = logging.getLogger("agentchat.tools.corpus")

SEARCH_TEXT = "search_text"
SEARCH_SEMANTIC = "search_semantic"
GET_DOCUMENT_METADATA = "get_document_metadata"
CORPUS_TOOL_NAMES = (SEARCH_TEXT, SEARCH_SEMANTIC, GET_DOCUMENT_METADATA)

OPERATORS = ("=", "!=", ">", ">=", "<", "<=", "in", "nin", "like")
FILTER_EXAMPLE = {"vendor": "ACME", "invoice_date": {">=": "2023-01-01", "<": "2024-01-01"}, "amount": {">": 1000}}
MAX_LOCATIONS = 5


class CorpusKnowledge(Protocol):
    """The slice of ``knowledge.KnowledgeBase`` these tools use."""

    async def search(
        self,
        query: str,
        *,
        bucket: str | None = None,
        top_k: int = 5,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        mode: Literal["hybrid", "text", "semantic"] = "hybrid",
        context_chars: int | None = None,
        candidates: int | None = None,
        relax: bool = False,
    ) -> SearchResponse: ...

    async def bucket_schema(self, bucket: str) -> dict[str, str]: ...

    async def list_buckets(self) -> list[BucketInfo]: ...

    async def get_document(self, doc_id: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class CorpusToolDeps:
    """What the corpus tools need, and the limits that keep their results small.

    ``overload_threshold`` / ``flat_spread``: a search is an overload (and asks the user
    to narrow it) when it matched more than ``overload_threshold`` passages and the
    knowledge base's ``score_spread`` (relative drop of the raw relevance signal over
    the top results) is below ``flat_spread``. ``clarify`` turns both clarifications
    off (results are then returned as they are).
    """

    knowledge: CorpusKnowledge
    overload_threshold: int = 200
    flat_spread: float = 0.05
    candidates: int = 100
    max_top_k: int = 20
    default_top_k: int = 10
    max_context_chars: int = 4000
    max_metadata_chars: int = 200
    clarify: bool = True


# --------------------------------------------------------------------------- argument helpers


def _int_arg(value: Any, default: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return max(lo, min(int(value), hi))


def _opt_str(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _allowed_fields(schema: Mapping[str, str]) -> dict[str, str]:
    return {**BUILTIN_FIELDS, **dict(schema)}


async def _bucket_list(kb: CorpusKnowledge) -> list[dict[str, Any]]:
    try:
        buckets = await kb.list_buckets()
    except Exception:  # the error message is what matters; the list is a courtesy
        log.exception("listing buckets failed")
        return []
    return [{"bucket": b.name, "fields": b.fields, "documents": b.documents} for b in buckets]


# --------------------------------------------------------------------------- evidence


def location_of(hit: ChunkHit) -> str:
    """``"chunk 3 — Payment terms"``: where in the document the passage is."""
    where = f"chunk {hit.position}"
    if hit.heading and hit.heading != hit.title:
        where += f" \u2014 {hit.heading[:80]}"
    return where


def register_hit(state: RunToolState, hit: ChunkHit) -> EvidenceSource:
    """Record ``hit``'s document as evidence under its ``doc_id``; a document found again
    (another chunk, a later search) gains the new location instead of a second source."""
    source = state.sources.get(hit.doc_id)
    if source is None:
        meta = small_metadata(hit.metadata)
        meta.update(doc_id=hit.doc_id, bucket=hit.bucket, chunks=[], origin="corpus")
        if hit.source:
            meta["source"] = hit.source
        source = EvidenceSource(
            id=hit.doc_id, title=hit.title or hit.doc_id, url=hit.url, kind="internal", metadata=meta
        )
        state.add_source(source)
    chunks = source.metadata.setdefault("chunks", [])
    if isinstance(chunks, list) and hit.chunk_id not in chunks:
        chunks.append(hit.chunk_id)
        locations = [loc for loc in (source.location or "").split("; ") if loc]
        loc = location_of(hit)
        if loc not in locations and len(locations) < MAX_LOCATIONS:
            locations.append(loc)
            source.location = "; ".join(locations)
    return source


def _hit_view(hit: ChunkHit, max_meta: int) -> dict[str, Any]:
    meta = {k: (v[:max_meta] if isinstance(v, str) else v) for k, v in small_metadata(hit.metadata).items()}
    return {
        "source_id": hit.doc_id,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        "location": location_of(hit),
        "snippet": hit.text,
        "score": round(float(hit.score), 4),
        "metadata": meta,
    }


# --------------------------------------------------------------------------- handlers


def make_search_handler(deps: CorpusToolDeps, mode: Literal["text", "semantic"], default_context: int) -> ToolHandler:
    kb = deps.knowledge
    tool = SEARCH_TEXT if mode == "text" else SEARCH_SEMANTIC

    async def search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        bucket = _opt_str(args.get("bucket"))
        query = _opt_str(args.get("query"))
        if bucket is None or query is None:
            return ToolOutcome.error(
                "bucket and query are required",
                available_buckets=await _bucket_list(kb),
                guidance="Name one bucket from the list and what to look for.",
            )
        top_k = _int_arg(args.get("top_k"), deps.default_top_k, 1, deps.max_top_k)
        context_chars = _int_arg(args.get("context_chars"), default_context, 50, deps.max_context_chars)
        doc_id = _opt_str(args.get("doc_id"))
        filters = args.get("filters") or None

        try:
            schema = await kb.bucket_schema(bucket)
        except UnknownBucketError as exc:
            return ToolOutcome.error(
                str(exc),
                reason="unknown_bucket",
                available_buckets=await _bucket_list(kb),
                guidance="Retry with one of the available buckets.",
            )
        try:
            response = await kb.search(
                query,
                bucket=bucket,
                top_k=top_k,
                filters=filters,
                doc_id=doc_id,
                mode=mode,
                context_chars=context_chars,
                candidates=deps.candidates,
                relax=True,
            )
        except FilterError as exc:
            return ToolOutcome.error(
                f"Invalid filters: {exc}",
                reason="invalid_filters",
                allowed_fields=_allowed_fields(schema),
                operators=list(OPERATORS),
                syntax=(
                    '{field: value} for equality, {field: [v1, v2]} for any of, {field: {op: value}}; '
                    'combine alternatives with {"$or": [filter, ...]} and all-of with {"$and": [...]}. '
                    "Dates as YYYY-MM-DD; 'like' takes a pattern with % wildcards."
                ),
                example=FILTER_EXAMPLE,
            )
        except UnknownBucketError as exc:  # deleted between the two calls
            return ToolOutcome.error(str(exc), reason="unknown_bucket", available_buckets=await _bucket_list(kb))
        except ValueError as exc:
            return ToolOutcome.error(f"The search was rejected: {str(exc)[:300]}", reason="invalid_search")

        state = ctx.state
        mark_kb_searched(state)  # a corpus search is a knowledge-base search for the RAG flow
        details: dict[str, Any] = {"bucket": bucket, "query": query, "filters": filters, "mode": response.mode}
        if response.relaxed:
            details["relaxed"] = True
            details["dropped_filter"] = response.dropped_filter

        if not response.hits:
            if deps.clarify:
                clar = no_results(bucket, query, filters, response.dropped_filter, schema)
                log.info("clarification: no results", extra={"run_id": ctx.run_id, "tool": tool, "bucket": bucket})
                return clarification_outcome(state, clar, {**details, "total_matches": 0})
            return ToolOutcome(content={**details, "total_matches": 0, "results": []})

        overloaded = (
            response.total_matches > deps.overload_threshold and response.score_spread < deps.flat_spread
        )
        if overloaded and deps.clarify:
            clar = overload(bucket, response.total_matches, filters, schema)
            log.info(
                "clarification: overload",
                extra={"run_id": ctx.run_id, "tool": tool, "bucket": bucket, "total": response.total_matches},
            )
            return clarification_outcome(
                state,
                clar,
                {**details, "total_matches": response.total_matches, "score_spread": response.score_spread},
            )

        for hit in response.hits:
            register_hit(state, hit)
        content: dict[str, Any] = {
            **details,
            "total_matches": response.total_matches,
            "results": [_hit_view(h, deps.max_metadata_chars) for h in response.hits],
            "cite_with": (
                "Cite a passage by its doc_id in square brackets, e.g. [" + response.hits[0].doc_id + "], "
                "and list the same ids as sources in generate_response."
            ),
        }
        if response.relaxed:
            content["note"] = (
                f"Nothing matched all conditions; the condition {response.dropped_filter} was dropped "
                "to find these. Say so if it matters for the answer."
            )
        if response.warnings:
            content["warnings"] = list(response.warnings)
        return ToolOutcome(content=content)

    return search


def make_metadata_handler(deps: CorpusToolDeps) -> ToolHandler:
    kb = deps.knowledge

    async def get_document_metadata(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        doc_id = _opt_str(args.get("doc_id"))
        if doc_id is None:
            return ToolOutcome.error("doc_id is required", guidance="Pass a doc_id from a search result.")
        doc = await kb.get_document(doc_id)
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
            meta = {"doc_id": doc_id, "bucket": doc.get("bucket"), "chunks": [], "origin": "corpus"}
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
            "source": doc.get("source"),
            "url": doc.get("url"),
            "fields": doc.get("fields") or {},
            "metadata": _capped(doc.get("metadata") or {}, deps.max_metadata_chars),
            "chars": doc.get("chars"),
            "chunks": doc.get("chunks"),
            "created_at": doc.get("created_at"),
            "updated_at": doc.get("updated_at"),
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


def register_corpus_tools(registry: ToolRegistry, deps: CorpusToolDeps) -> None:
    """Attach the three handlers; the catalog must already hold their specs."""
    registry.set_handler(SEARCH_TEXT, make_search_handler(deps, "text", 400))
    registry.set_handler(SEARCH_SEMANTIC, make_search_handler(deps, "semantic", 500))
    registry.set_handler(GET_DOCUMENT_METADATA, make_metadata_handler(deps))


__all__ = [
    "CORPUS_TOOL_NAMES",
    "GET_DOCUMENT_METADATA",
    "SEARCH_SEMANTIC",
    "SEARCH_TEXT",
    "CorpusKnowledge",
    "CorpusToolDeps",
    "location_of",
    "register_corpus_tools",
    "register_hit",
]
