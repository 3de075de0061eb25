"""``index_keywords``: keywords from an external answer, stored so later queries find it.

Validation is seed 001's (see :mod:`agenttools.rag.keyword_rules`): individual bad keywords come
back with reasons while the good ones are indexed; fewer than three good ones make the
whole call an error so the model retries with better keywords.

Which external result the keywords belong to: the ``perplexity_result_id`` given (it must
be one this run retrieved), else every Perplexity answer of this run still waiting for
keywords, else the run's latest external result.
"""

from __future__ import annotations

import logging
from typing import Any

from agenttools.core.registry import ToolContext, ToolHandler, ToolOutcome
from agenttools.rag.deps import RagToolDeps
from agenttools.rag.keyword_rules import MAX_PER_CALL, MIN_PER_CALL, validate_keywords
from agenttools.rag.policy import (
    INDEX_KEYWORDS,
    external_result_ids,
    mark_indexed,
    missing_prerequisite,
    prerequisite_error,
    unindexed_result_ids,
)

log = logging.getLogger(__name__)

GUIDANCE = (
    "Send 3-10 keywords, each 2-50 characters, naming the core concepts of the answer: "
    "specific terms like 'AAPL stock price', 'quantum computing applications' or "
    "'2026 market trends' - not generic words like 'the' or 'information'."
)


def make_index_keywords_handler(deps: RagToolDeps) -> ToolHandler:
    async def index_keywords(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        state = ctx.state
        blocked = missing_prerequisite(INDEX_KEYWORDS, state)
        if blocked:
            return prerequisite_error(blocked)

        raw = args.get("keywords")
        if not isinstance(raw, list):
            return ToolOutcome.error("keywords must be an array of strings", guidance=GUIDANCE)
        if len(raw) > MAX_PER_CALL:
            return ToolOutcome.error(
                f"Too many keywords: {len(raw)} given, at most {MAX_PER_CALL} allowed. "
                "Keep the most specific ones.",
                reason="too_many",
                guidance=GUIDANCE,
            )
        checked = validate_keywords(raw)
        rejected = [r.to_dict() for r in checked.rejected]
        if len(checked.accepted) < MIN_PER_CALL:
            return ToolOutcome.error(
                f"Only {len(checked.accepted)} valid distinct keyword(s); at least "
                f"{MIN_PER_CALL} are required. Nothing was indexed.",
                reason="too_few",
                valid=[c.display for c in checked.accepted],
                rejected=rejected,
                guidance=GUIDANCE,
            )

        retrieved = external_result_ids(state)
        given = args.get("perplexity_result_id")
        if isinstance(given, str) and given.strip():
            if given.strip() not in retrieved:
                return ToolOutcome.error(
                    f'Unknown perplexity_result_id "{given.strip()[:60]}".',
                    reason="unknown_result",
                    valid_result_ids=retrieved,
                    guidance="Use the perplexity_result_id returned by perplexity_search, or omit it.",
                )
            result_ids = [given.strip()]
        else:
            result_ids = unindexed_result_ids(state) or retrieved[-1:]
        # The run's own query id is authoritative; the model's is only a fallback. The
        # original question (``query``, seed 000's diagram) names that same query: it is
        # echoed back and kept in the tool-call log with the call.
        given_query = args.get("query_id")
        query_id = state.query_id or (given_query.strip() if isinstance(given_query, str) else None)
        question = args.get("query")
        question = question.strip() if isinstance(question, str) and question.strip() else None

        try:
            indexed = await deps.keywords.index(
                checked.accepted,
                query_id=query_id or None,
                external_result_ids=result_ids,
                conversation_id=ctx.conversation_id,
                owner=ctx.user_id,
            )
        except Exception as exc:
            log.exception("index_keywords failed (run %s)", ctx.run_id)
            # The model did its part; an infrastructure failure must not block the answer.
            mark_indexed(state, result_ids)
            return ToolOutcome.error(
                f"The keyword index is unavailable ({type(exc).__name__}); nothing was indexed.",
                reason="storage",
                guidance="Continue with generate_response.",
            )

        mark_indexed(state, result_ids)
        content: dict[str, Any] = {
            "indexed": True,
            "keyword_count": len(indexed),
            "merged": any(k.merged for k in indexed) or bool(checked.duplicates),
            "keywords": [k.to_dict() for k in indexed],
            "perplexity_result_ids": result_ids,
            "query_id": query_id,
        }
        if question is not None:
            content["query"] = question
        if checked.duplicates:
            content["duplicates_merged"] = list(checked.duplicates)
        if rejected:
            content["rejected"] = rejected
            content["guidance"] = GUIDANCE
        return ToolOutcome(content=content)

    return index_keywords
