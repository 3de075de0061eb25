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
* a clarification (see :mod:`agenttools.rag.clarification`) when nothing matched — naming
  the condition that matches nothing and offering to drop it, never dropping it
  silently — or when a list-all request covers at least ``overload_threshold``
  documents (``AGENT_CLARIFY_OVERLOAD_HITS``), or a query matches that many passages
  with flat scores;
* the review of the search so far (:mod:`agenttools.rag.review`: ``enough`` / ``more`` with
  the next call / ``clarify``), which the model is told to follow.

When the run was planned (:mod:`agenttools.rag.decomposition`), a search without
``filters`` gets the plan's constraints for its bucket (``filters: {}`` opts out).

Errors the model can fix (unknown bucket, bad filter) come back as tool errors naming
what is allowed, so the next call can be right.

The app factory registers them after the RAG tools::

    register_corpus_tools(registry, CorpusToolDeps(knowledge=kb, overload_threshold=100, max_tool_calls=8))
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agenttools.core.registry import EvidenceSource, RunToolState, ToolContext, ToolHandler, ToolOutcome, ToolRegistry
from agenttools.core.untrusted import TRUST, quoted, safe_url
from agenttools.rag.clarification import (
    UnmatchedConstraint,
    clarification_outcome,
    constraint_text,
    list_overload,
    no_results,
    no_results_for_constraints,
    overload,
)
from agenttools.rag.decomposition import plan_filters, plan_intent, raw_text_for
from agenttools.rag.kb_search import chunk_section
from agenttools.rag.policy import mark_kb_searched
from agenttools.rag.review import record_search, review_round
from agenttools.rag.sources import page_label, shown_source, small_metadata
from knowledge.filters import BUILTIN_FIELDS, FilterError, parse_filters
from knowledge.kb import UnknownBucketError
from knowledge.textnorm import STOP_WORDS
from knowledge.types import BucketInfo, ChunkHit, ConstraintCount, DocumentCount, OverloadRule, SearchResponse

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
        overload: OverloadRule | None = None,
    ) -> SearchResponse: ...

    async def bucket_schema(self, bucket: str) -> dict[str, str]: ...

    async def list_buckets(self) -> list[BucketInfo]: ...

    async def get_document(self, doc_id: str) -> dict[str, Any] | None: ...

    async def constraint_counts(
        self, filters: Mapping[str, Any] | str | None, *, bucket: str | None = None
    ) -> list[ConstraintCount]: ...

    async def count_documents(
        self,
        query: str | None = None,
        *,
        bucket: str | None = None,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        limit: int = 1000,
    ) -> DocumentCount: ...


@dataclass(frozen=True, slots=True)
class CorpusToolDeps:
    """What the corpus tools need, and the limits that keep their results small.

    ``overload_threshold`` (``AGENT_CLARIFY_OVERLOAD_HITS``, default 100): a list-all
    request ("list every invoice": the plan's intent is ``list``, the query says
    all/every/each/list, or it names nothing but the bucket) covering at least this many
    documents is an overload and asks the user to narrow it; so is any search the
    knowledge base flags ``overloaded`` by ``overload_rule`` (these two numbers in
    ``knowledge.types.OverloadRule``, the one decision). ``clarify`` turns the clarifications off
    (results are then returned as they are, relaxed filters included).
    ``max_tool_calls`` (``AGENT_MAX_TOOL_CALLS``) lets the review count the calls left.
    """

    knowledge: CorpusKnowledge
    overload_threshold: int = 100
    flat_spread: float = 0.05
    candidates: int = 100
    max_top_k: int = 20
    default_top_k: int = 10
    max_context_chars: int = 4000
    max_metadata_chars: int = 200
    clarify: bool = True
    max_tool_calls: int | None = None

    @property
    def overload_rule(self) -> OverloadRule:
        """The rule every search of these tools is judged by (``SearchResponse.overloaded``)."""
        return OverloadRule(self.overload_threshold, self.flat_spread)


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
    """``"chunk 3 — Payment terms"`` (``"page 5, chunk 3 — …"`` in a PDF): where in the
    document the passage is."""
    where = f"chunk {hit.position}"
    if hit.heading and hit.heading != hit.title:
        where += f" \u2014 {hit.heading[:80]}"
    pages = page_label(getattr(hit, "page", None), getattr(hit, "page_end", None))
    return f"{pages}, {where}" if pages else where


def register_hit(state: RunToolState, hit: ChunkHit) -> EvidenceSource:
    """Record ``hit``'s document as evidence under its ``doc_id``; a document found again
    (another chunk, a later search) gains the new location instead of a second source."""
    source = state.sources.get(hit.doc_id)
    if source is None:
        meta = small_metadata(hit.metadata)
        meta.update(doc_id=hit.doc_id, bucket=hit.bucket, chunks=[], origin="corpus")
        if hit.source:
            meta["source"] = shown_source(hit.source)
        source = EvidenceSource(
            id=hit.doc_id, title=hit.title or hit.doc_id, url=hit.url, kind="internal", metadata=meta
        )
        state.add_source(source)
    chunks = source.metadata.setdefault("chunks", [])
    if isinstance(chunks, list) and hit.chunk_id not in chunks:
        chunks.append(hit.chunk_id)
        page = getattr(hit, "page", None)
        if page is not None:
            end = getattr(hit, "page_end", None) or page
            # ``pages`` is the document's page count (PDF metadata); these are the pages read.
            cited = source.metadata.setdefault("cited_pages", [])
            if isinstance(cited, list):
                cited[:] = sorted(set(cited) | set(range(page, end + 1)))
            source.metadata.setdefault("page", page)  # the first cited passage's page
        locations = [loc for loc in (source.location or "").split("; ") if loc]
        loc = location_of(hit)
        if loc not in locations and len(locations) < MAX_LOCATIONS:
            locations.append(loc)
            source.location = "; ".join(locations)
    return source


def _hit_view(hit: ChunkHit, max_meta: int) -> dict[str, Any]:
    meta = {k: (v[:max_meta] if isinstance(v, str) else v) for k, v in small_metadata(hit.metadata).items()}
    section = chunk_section(hit)  # the heading the passage sits under, as knowledge_base_search shows it
    return {
        "source_id": hit.doc_id,
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        **({"section": section} if section else {}),
        "location": location_of(hit),
        **quoted(hit.text, source=f"corpus document {hit.doc_id!r}, {location_of(hit)}", field="snippet"),
        "score": round(float(hit.score), 4),
        "metadata": meta,
        **_page_view(hit),
    }


def _page_view(hit: ChunkHit) -> dict[str, Any]:
    page = getattr(hit, "page", None)
    if page is None:
        return {}
    end = getattr(hit, "page_end", None)
    return {"page": page, **({"page_end": end} if end is not None and end != page else {})}


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
        planned = None
        if args.get("filters") is None and doc_id is None:  # absent: the plan's; {} opts out
            planned = plan_filters(ctx.state, bucket)
            filters = planned or filters

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
                overload=deps.overload_rule,
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
        filters = parse_filters(filters)  # valid (the search ran); a JSON string becomes its object
        details: dict[str, Any] = {"bucket": bucket, "query": query, "filters": filters, "mode": response.mode}
        if response.warnings:  # e.g. a semantic search that ran on text: said on every path
            details["warnings"] = list(response.warnings)
        if planned:
            details["filters_from_plan"] = True
        # ``relaxed``: the filters as given matched nothing; the hits (if any) are of a
        # relaxed search and are never passed off as answers to the question asked.
        unmatched = not response.hits or response.relaxed

        if unmatched and deps.clarify:
            record_search(state, tool=tool, bucket=bucket, query=query, filters=filters, hits=[], total=0)
            if filters:
                clar, extra = await _unmatched_filters(kb, state, bucket, query, filters, doc_id, response)
            else:
                clar, extra = no_results(bucket, query, None, None, schema), {}
            log.info(
                "clarification: no results",
                extra={"run_id": ctx.run_id, "tool": tool, "bucket": bucket, **extra},
            )
            return clarification_outcome(state, clar, {**details, "total_matches": 0, **extra})
        if not response.hits:
            return ToolOutcome(content={**details, "total_matches": 0, "results": []})
        if response.relaxed:
            details["relaxed"] = True
            details["dropped_filter"] = response.dropped_filter

        if deps.clarify:
            overloaded = await _overload(deps, state, bucket, query, filters, doc_id, schema, response)
            if overloaded is not None:
                clar, extra = overloaded
                record_search(
                    state, tool=tool, bucket=bucket, query=query, filters=filters, hits=[], total=response.total_matches
                )
                log.info(
                    "clarification: overload", extra={"run_id": ctx.run_id, "tool": tool, "bucket": bucket, **extra}
                )
                return clarification_outcome(state, clar, {**details, **extra})

        for hit in response.hits:
            register_hit(state, hit)
        record_search(
            state, tool=tool, bucket=bucket, query=query, filters=filters, hits=response.hits,
            total=response.total_matches,
        )
        calls_left = None
        if deps.max_tool_calls is not None:  # this call is not in tools_called yet
            calls_left = max(0, deps.max_tool_calls - len(state.tools_called) - 1)
        review = review_round(state, calls_left=calls_left)
        content: dict[str, Any] = {
            **details,
            "total_matches": response.total_matches,
            "results": [_hit_view(h, deps.max_metadata_chars) for h in response.hits],
            "cite_with": (
                "Cite a passage by its doc_id in square brackets, e.g. [" + response.hits[0].doc_id + "], "
                "and list the same ids as sources in generate_response."
            ),
            "review": review.to_dict(),
            "next_step": review.instruction(),
        }
        if planned:
            content["note"] = (
                "The filters come from the question's conditions (the search plan); pass filters {} to "
                "search without them."
            )
        if response.relaxed:
            content["note"] = (
                f"Nothing matched all conditions; the condition {response.dropped_filter} was dropped "
                "to find these. Say so if it matters for the answer."
            )
        return ToolOutcome(content=content)

    return search


#: Words that make a query a list-all request, and the filler around them.
_LIST_MARKERS = frozenset("all every each list enumerate".split())
_LIST_FILLER = _LIST_MARKERS | frozenset(
    "show give find me documents document docs entries entry records record items item files file".split()
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def list_request(query: str, bucket: str, intent: str | None) -> tuple[bool, str]:
    """``(is a list-all request, what it is about)``.

    A list-all request asks for every document of a kind: the plan's intent is ``list``
    (when there is no plan: the query says all / every / each / list), or the query names
    nothing but the bucket ("invoice" in ``invoices``). The topic is the query without
    list words, stop words and the bucket's name ("every invoice with late fees" → "late
    fees"), empty when it is the whole bucket.
    """
    words = _WORD.findall(query.casefold())
    stem = bucket.casefold().rstrip("s")
    topic = [w for w in words if w not in _LIST_FILLER and w not in STOP_WORDS and w.rstrip("s") != stem]
    if intent is not None:
        wanted = intent == "list"
    else:
        wanted = any(w in _LIST_MARKERS for w in words)
    return wanted or not topic, " ".join(topic)


async def _overload(
    deps: CorpusToolDeps,
    state: RunToolState,
    bucket: str,
    query: str,
    filters: Any,
    doc_id: str | None,
    schema: Mapping[str, str],
    response: SearchResponse,
) -> tuple[Any, dict[str, Any]] | None:
    """The overload clarification for this search, or ``None``.

    A list-all request counts the documents it covers (exactly for a whole scope, a lower
    bound past a few hundred matching passages); any other search is an overload when
    the knowledge base says so (``SearchResponse.overloaded``, ``OverloadRule``).
    """
    threshold = deps.overload_threshold
    is_list, topic = list_request(query, bucket, plan_intent(state))
    if is_list and doc_id is None:
        try:
            counted = await deps.knowledge.count_documents(
                topic, bucket=bucket, filters=filters, limit=min(1000, max(3 * threshold, 100))
            )
        except Exception:  # the count is a courtesy; the results still go back
            log.exception("counting the documents of a list request failed")
        else:
            if counted.documents >= threshold:
                clar = list_overload(bucket, counted.documents, counted.exact, topic, filters, schema)
                return clar, {"documents": counted.documents, "exact": counted.exact, "list_request": True}
    if response.overloaded:  # decided by the search, by ``deps.overload_rule`` (no doc_id, flat, many)
        clar = overload(bucket, response.total_matches, filters, schema)
        return clar, {"total_matches": response.total_matches, "score_spread": response.score_spread}
    return None


async def _unmatched_filters(
    kb: CorpusKnowledge,
    state: RunToolState,
    bucket: str,
    query: str,
    filters: Any,
    doc_id: str | None,
    response: SearchResponse,
) -> tuple[Any, dict[str, Any]]:
    """The ``no_results`` clarification of a filtered search: which condition matches
    nothing (alone, or only in combination), and what dropping it would find."""
    try:
        counts = await kb.constraint_counts(filters, bucket=bucket)
    except Exception:
        log.exception("counting the documents of each condition failed")
        counts = []
    culprits = [c for c in counts if c.documents == 0]
    together = not culprits and len(counts) > 1
    if not culprits:
        culprits = [c for c in counts if c.label == response.dropped_filter][:1] or counts[:1]
    rest = [c.constraint for c in counts if c not in culprits]
    without: int | None = None
    if culprits:
        remaining: Any = None if not rest else (rest[0] if len(rest) == 1 else {"$and": rest})
        try:
            found = await kb.count_documents(query, bucket=bucket, filters=remaining, doc_id=doc_id)
            without = found.documents
        except Exception:
            log.exception("counting the documents without the condition failed")
        if response.relaxed and response.hits:
            without = max(without or 0, len({h.doc_id for h in response.hits}))
    named = [
        UnmatchedConstraint(constraint_text(c.constraint), c.documents, raw_text_for(state, c.constraint))
        for c in culprits
    ]
    label = " and ".join(u.text for u in named) or None
    clar = no_results_for_constraints(bucket, query, named, together=together, without=without, without_label=label)
    extra: dict[str, Any] = {
        "unmatched_conditions": [u.text for u in named],
        "documents_without_them": without,
    }
    if rest:
        extra["filters_without_them"] = rest[0] if len(rest) == 1 else {"$and": rest}
    return clar, extra


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
