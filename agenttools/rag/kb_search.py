"""``knowledge_base_search``: the mandatory first step of every run.

Besides the knowledge-base passages it returns the stored external answers the query
asks about (``origin: "external_indexed"``, with their web citations' URLs), found by
their keywords' stemmed terms in any order and by the meaning of their question, answer
and keywords (``agenttools.rag.keywords.KeywordIndex.lookup``): this is how an answer
fetched from Perplexity once is found by the next related question (seed 002, SC-006)
without another external call — the same user's question: saved answers are their
asker's (issue 21), shared only with ``AGENT_SHARED_WEB_ANSWERS``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from agenttools.core.registry import RunToolState, ToolContext, ToolHandler, ToolOutcome
from agenttools.core.untrusted import neutralize_text, quoted, safe_url
from agenttools.rag.deps import ChunkHitLike, RagToolDeps
from agenttools.rag.external_results import ExternalResult
from agenttools.rag.own_bucket import own_private_buckets
from agenttools.rag.policy import mark_kb_searched, note_external_result
from agenttools.rag.sources import chunk_source, chunk_source_id, external_sources, iso_time

log = logging.getLogger(__name__)

ORIGIN_INDEXED = "external_indexed"


def new_query_id() -> str:
    return "q_" + uuid.uuid4().hex[:16]


def ensure_query_id(state: RunToolState) -> str:
    """One query id per run (per user question), created by the first KB search."""
    if state.query_id is None:
        state.query_id = new_query_id()
    return state.query_id


def make_kb_search_handler(deps: RagToolDeps) -> ToolHandler:
    settings = deps.settings

    async def knowledge_base_search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        query = str(args.get("query") or "").strip()
        if not query:
            return ToolOutcome.error(
                "query must not be empty",
                guidance="Pass the key concepts of the user's question as the query.",
            )
        top_k = _top_k(args.get("top_k"), settings.max_top_k)
        kb_id = str(args.get("kb_id") or settings.default_kb_id).strip() or settings.default_kb_id
        bucket = None if kb_id == settings.default_kb_id else kb_id
        scope, named_by = ({}, "") if bucket is not None else _default_scope(ctx.context, settings.default_buckets)
        # The files dropped into this conversation, and no other's (issue 25 item 4):
        # searched along with the scope, or alone when ``kb_id`` names their bucket.
        own = own_private_buckets(ctx, settings.conversation_attachments)
        if own:  # none: the search is asked as before, with no private= at all
            scope["private"] = own
        state = ctx.state
        query_id = ensure_query_id(state)
        # The model did its mandatory step even if the backend fails below.
        mark_kb_searched(state)

        hits: list[ChunkHitLike] = []
        total_matches, relaxed, kb_error, duplicates = 0, False, None, 0
        fused_sides: list[str] | None = None
        dropped_sides: dict[str, str] = {}
        warnings: list[str] = []
        missing: list[str] = []
        try:
            response = await deps.knowledge.search(query, bucket=bucket, top_k=top_k, **scope)
            hits = list(response.hits)[:top_k]
            total_matches, relaxed = int(response.total_matches), bool(response.relaxed)
            duplicates = int(getattr(response, "duplicates", 0) or 0)
            fused_sides = getattr(response, "fused_sides", None)
            dropped_sides = dict(getattr(response, "dropped_sides", None) or {})
            warnings = [str(w) for w in getattr(response, "warnings", None) or ()]
            missing = [str(b) for b in getattr(response, "missing_buckets", None) or ()]
        except ValueError as exc:  # the KB's own "bad request" (unknown bucket, bad filter)
            return ToolOutcome.error(
                f"The knowledge base rejected the search: {str(exc)[:300]}",
                query_id=query_id,
                guidance=f'Retry with kb_id "{settings.default_kb_id}" or one named in the error.',
            )
        except Exception as exc:  # a broken KB must not crash the run
            log.exception("knowledge_base_search failed (run %s)", ctx.run_id)
            kb_error = f"{type(exc).__name__}"

        external: list[ExternalResult] = []
        try:
            # The asker's own saved answers only (everyone's in the shared mode); a lookup
            # that fell back (its database or its embedder failed) says so among the warnings.
            saved = await deps.keywords.find(query, owner=ctx.user_id, limit=settings.max_external_answers)
            external = saved.results
            warnings.extend(saved.warnings)
        except Exception:
            log.exception("keyword lookup failed (run %s)", ctx.run_id)
            warnings.append("saved web answers could not be searched")

        if kb_error is not None and not external:
            return ToolOutcome.error(
                f"The knowledge base is unavailable right now ({kb_error}).",
                query_id=query_id,
                guidance=(
                    "Continue without it: use perplexity_search if it is available, or answer "
                    "through generate_response saying the knowledge base could not be searched."
                ),
            )

        for hit in hits:
            state.add_source(chunk_source(hit))
        for result in external:
            for source in external_sources(result, ORIGIN_INDEXED):
                state.add_source(source)
            note_external_result(state, result.id, needs_keywords=False)

        content: dict[str, Any] = {"query_id": query_id, "kb_id": kb_id}
        if missing:
            # A bucket of the scope that is no bucket (a typo in AGENT_KB_DEFAULT_BUCKETS,
            # one deleted since): said first, never passed off as "no passages matched".
            content["missing_buckets"] = missing
            warnings = [_missing_warning(missing, named_by), *warnings]
        if warnings:
            # A search that fell back (the embedder failed: ranked by text only; documents
            # still waiting for vectors) says so, first, like the corpus tools do.
            content["warnings"] = warnings
        if fused_sides and dropped_sides:
            # A hybrid search ranked on one side (fusion gave the other no weight): said
            # before the chunks, so the stream's one-line summary shows it too.
            content["fused_sides"] = list(fused_sides)
            content["dropped_sides"] = dropped_sides
        content |= {
            "chunks": [_chunk_view(hit, settings.max_chunk_chars) for hit in hits],
            "total_matches": total_matches,
            "external_answers": [_external_view(r, settings.max_external_answer_chars) for r in external],
            "sufficient_hint": (
                _nothing_searched_hint(missing, named_by)
                if missing and not hits and not total_matches and not external
                else _sufficiency_hint(len(hits), relaxed, bool(external))
            ),
            "cite_with": "Cite what you use in generate_response by its source_id.",
        }
        if relaxed:
            content["relaxed"] = True
        if duplicates:  # copies of a passage shown (a page as .md and .html): said, not hidden
            content["duplicates_collapsed"] = duplicates
        if kb_error is not None:
            content["kb_error"] = f"The knowledge base could not be searched ({kb_error})."
        return ToolOutcome(content=content)

    return knowledge_base_search


#: Who named the buckets a search without ``kb_id`` covers, as its result says it.
BY_CONTEXT = "the chat's context.buckets"
BY_SETTING = "AGENT_KB_DEFAULT_BUCKETS"


def _default_scope(context: Mapping[str, Any], default: tuple[str, ...]) -> tuple[dict[str, Any], str]:
    """The buckets a search without ``kb_id`` covers, and who named them: those the
    caller's UI context names (``{"buckets": [...]}`` or ``{"bucket": "..."}``), else the
    configured default; nothing (every bucket) when neither names any."""
    named = context.get("buckets", context.get("bucket")) if isinstance(context, Mapping) else None
    if isinstance(named, str):
        named = [named]
    if isinstance(named, list):
        chosen = tuple(b.strip() for b in named if isinstance(b, str) and b.strip())[:20]
        if chosen:
            return {"buckets": chosen}, BY_CONTEXT
    if default and "*" not in default:
        return {"buckets": default}, BY_SETTING
    return {}, ""


def _missing_warning(missing: list[str], named_by: str) -> str:
    """First the names (the stream's one-line summary keeps a warning's first 60 characters)."""
    names = ", ".join(repr(b) for b in missing)
    return f"no bucket{'s' if len(missing) > 1 else ''} {names}: not searched (named by {named_by or 'the search'})"


def _nothing_searched_hint(missing: list[str], named_by: str) -> str:
    """The hint when no bucket the search covers exists: the knowledge base was not
    searched at all, which is not "it has no information on this"."""
    names = ", ".join(repr(b) for b in missing)
    return (
        f"Nothing was searched: no bucket this search covers exists ({names}, named by "
        f"{named_by or 'the search'}). Say through generate_response that the knowledge base "
        "could not be searched because that bucket does not exist, not that it has no information."
    )


def _top_k(value: object, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 5
    return max(1, min(int(value), maximum))


#: A section heading's length at most in a search result (characters, plus "… ").
SECTION_CHARS = 200


def chunk_section(hit: object) -> str:
    """The heading a passage sits under in its document ("Does npm send any information
    about me back to the registry?"), as the chunker recorded it: a passage that
    continues a section no longer says its heading, so without it neither a model nor
    the offline answerer knows what the passage is about. A Markdown page's first chunk
    is headed by the page's summary for search (``knowledge.ingest_docs.with_summary``); the
    summary is the page's, not the section's, and already in ``metadata``, so it is left
    out here. "" when the passage sits under no heading. A heading longer than
    ``SECTION_CHARS`` keeps its end (the nearest, most specific heading of a path) behind
    "… ", so a document with an overlong heading cannot crowd other passages out of the
    result's budget."""
    heading = str(getattr(hit, "heading", "") or "").strip()
    metadata = getattr(hit, "metadata", None)
    summary = metadata.get("description") if isinstance(metadata, Mapping) else None
    if isinstance(summary, str) and summary.strip() and heading.startswith(summary.strip()):
        heading = heading[len(summary.strip()) :].lstrip(" —").strip()
    if len(heading) > SECTION_CHARS:
        tail = heading[-SECTION_CHARS:]
        heading = "… " + (tail.split(" ", 1)[1] if " " in tail[:40] else tail).lstrip()
    return neutralize_text(heading) if heading else ""


def _chunk_view(hit: ChunkHitLike, max_chars: int) -> dict[str, Any]:
    text = hit.text if len(hit.text) <= max_chars else hit.text[:max_chars].rstrip() + " …"
    section = chunk_section(hit)
    return {
        "source_id": chunk_source_id(hit),
        "doc_id": hit.doc_id,
        "chunk_id": hit.chunk_id,
        "title": hit.title,
        **({"section": section} if section else {}),
        **quoted(text, source=f"knowledge-base document {hit.doc_id!r}"),
        "score": round(float(hit.score), 4),
        "metadata": chunk_source(hit).metadata,
    }


def _external_view(result: ExternalResult, max_chars: int) -> dict[str, Any]:
    answer = result.answer
    if len(answer) > max_chars:
        answer = answer[:max_chars].rstrip() + " …"
    return {
        "source_id": result.id,
        "origin": ORIGIN_INDEXED,
        "provider": result.provider,
        "question": result.query,
        **quoted(answer, source=f"stored {result.provider} web answer", field="answer"),
        "citations": [
            {"source_id": result.citation_source_id(c), "title": c.title, "url": safe_url(c.url)}
            for c in result.citations
        ],
        "matched_keywords": list(result.matched_keywords),
        "match_score": result.match_score,
        "retrieved_at": iso_time(result.created_at),
    }


def _sufficiency_hint(n_chunks: int, relaxed: bool, has_external: bool) -> str:
    if has_external:
        return (
            "Stored external answers match this question (origin external_indexed). If they "
            "and the passages answer it, cite them; a new perplexity_search is not needed."
        )
    if n_chunks == 0:
        return (
            "No passages matched. If answering needs facts the knowledge base lacks, call "
            "perplexity_search (when available); otherwise say through generate_response that "
            "the knowledge base has no information on this."
        )
    caution = " Some search constraints were relaxed to find them." if relaxed else ""
    return (
        f"{n_chunks} passage(s) found.{caution} Decide whether they fully answer the question; "
        "if not, call perplexity_search with a query aimed at the missing facts."
    )
