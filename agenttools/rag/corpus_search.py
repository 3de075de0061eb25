"""The ``search_text`` / ``search_semantic`` handler: arguments in, one
``KnowledgeBase.search`` call, and out a result, a clarification or a tool error the
model can fix.

The handler is the one place that orders the steps (plan filters, search, clarify,
register evidence, review); each step's logic lives in its own ``corpus_*`` module.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from agenttools.core.registry import ToolContext, ToolHandler, ToolOutcome
from agenttools.rag.clarification import clarification_outcome, no_results
from agenttools.rag.corpus_clarify import overload_clarification, unmatched_filters_clarification
from agenttools.rag.corpus_deps import (
    FILTER_EXAMPLE,
    OPERATORS,
    SEARCH_SEMANTIC,
    SEARCH_TEXT,
    CorpusToolDeps,
    allowed_fields,
    bucket_list,
    int_arg,
    opt_str,
)
from agenttools.rag.corpus_evidence import hit_view, register_hit
from agenttools.rag.decomposition import plan_filters
from agenttools.rag.own_bucket import own_private_buckets
from agenttools.rag.policy import mark_kb_searched
from agenttools.rag.review import record_search, review_round
from knowledge.filters import FilterError, parse_filters
from knowledge.kb import UnknownBucketError

log = logging.getLogger("agentchat.tools.corpus")


def make_search_handler(deps: CorpusToolDeps, mode: Literal["text", "semantic"], default_context: int) -> ToolHandler:
    kb = deps.knowledge
    tool = SEARCH_TEXT if mode == "text" else SEARCH_SEMANTIC

    async def search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        bucket = opt_str(args.get("bucket"))
        query = opt_str(args.get("query"))
        if bucket is None or query is None:
            return ToolOutcome.error(
                "bucket and query are required",
                **await bucket_list(kb),
                guidance="Name one bucket from the list and what to look for.",
            )
        top_k = int_arg(args.get("top_k"), deps.default_top_k, 1, deps.max_top_k)
        context_chars = int_arg(args.get("context_chars"), default_context, 50, deps.max_context_chars)
        doc_id = opt_str(args.get("doc_id"))
        filters = args.get("filters") or None
        planned = None
        if args.get("filters") is None and doc_id is None:  # absent: the plan's; {} opts out
            planned = plan_filters(ctx.state, bucket)
            filters = planned or filters

        own = own_private_buckets(ctx, deps.conversation_attachments)  # a hit's att_… bucket, if the run's
        try:
            schema = await kb.bucket_schema(bucket, private=own)
        except UnknownBucketError as exc:
            return ToolOutcome.error(
                str(exc),
                reason="unknown_bucket",
                **await bucket_list(kb),
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
                private=own,
                overload=deps.overload_rule,
            )
        except FilterError as exc:
            return ToolOutcome.error(
                f"Invalid filters: {exc}",
                reason="invalid_filters",
                allowed_fields=allowed_fields(schema),
                operators=list(OPERATORS),
                syntax=(
                    "{field: value} for equality, {field: [v1, v2]} for any of, {field: {op: value}}; "
                    'combine alternatives with {"$or": [filter, ...]} and all-of with {"$and": [...]}. '
                    "Dates as YYYY-MM-DD; 'like' takes a pattern with % wildcards."
                ),
                example=FILTER_EXAMPLE,
            )
        except UnknownBucketError as exc:  # deleted between the two calls
            return ToolOutcome.error(str(exc), reason="unknown_bucket", **await bucket_list(kb))
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
                clar, extra = await unmatched_filters_clarification(
                    kb, state, bucket, query, filters, doc_id, response, own
                )
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
            overloaded = await overload_clarification(
                deps, state, bucket, query, filters, doc_id, schema, response, own
            )
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
            state,
            tool=tool,
            bucket=bucket,
            query=query,
            filters=filters,
            hits=response.hits,
            total=response.total_matches,
        )
        calls_left = None
        if deps.max_tool_calls is not None:  # this call is not in tools_called yet
            calls_left = max(0, deps.max_tool_calls - len(state.tools_called) - 1)
        review = review_round(state, calls_left=calls_left)
        content: dict[str, Any] = {
            **details,
            "total_matches": response.total_matches,
            "results": [hit_view(h, deps.max_metadata_chars) for h in response.hits],
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
