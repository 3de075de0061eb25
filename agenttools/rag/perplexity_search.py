"""``perplexity_search``: external knowledge when the knowledge base is not enough.

Only after ``knowledge_base_search`` (policy). A success is stored as an external result
(so keywords can point at it and later runs find it) and registered as evidence. Every
failure — unconfigured, 429, timeout, 5xx, junk — is a tool error telling the model to
answer from the knowledge base alone; the run carries on.
"""

from __future__ import annotations

import logging
from typing import Any

from agenttools.core.registry import ToolContext, ToolHandler, ToolOutcome
from agenttools.core.untrusted import quoted, safe_url
from agenttools.rag.deps import RagToolDeps
from agenttools.rag.external_results import new_external_result
from agenttools.rag.perplexity import PerplexityError
from agenttools.rag.policy import (
    PERPLEXITY_SEARCH,
    missing_prerequisite,
    note_external_result,
    prerequisite_error,
)
from agenttools.rag.sources import external_sources

log = logging.getLogger(__name__)

ORIGIN_FRESH = "perplexity"

KB_ONLY_GUIDANCE = (
    "Answer from the knowledge-base results only: call generate_response with "
    "used_external_kb=false and say what could not be verified."
)

_FAILURE_MESSAGES: dict[str, str] = {
    "rate_limited": "Perplexity is rate-limiting requests right now (HTTP 429).",
    "timeout": "Perplexity did not answer in time.",
    "unavailable": "Perplexity is unavailable right now.",
    "auth": "Perplexity rejected the server's credentials.",
    "bad_request": "Perplexity rejected the request.",
    "bad_response": "Perplexity returned an unusable answer.",
}


def make_perplexity_search_handler(deps: RagToolDeps) -> ToolHandler:
    async def perplexity_search(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        blocked = missing_prerequisite(PERPLEXITY_SEARCH, ctx.state)
        if blocked:
            return prerequisite_error(blocked)
        client = deps.perplexity
        if client is None:
            return ToolOutcome.error(
                "External search is not configured on this server.",
                reason="unconfigured",
                guidance=KB_ONLY_GUIDANCE,
            )
        query = str(args.get("query") or "").strip()
        if not query:
            return ToolOutcome.error(
                "query must not be empty",
                reason="invalid_query",
                guidance="Pass a search query aimed at the facts the knowledge base lacked.",
            )
        context = args.get("context")
        context_text = context.strip() if isinstance(context, str) else None

        try:
            answer = await client.search(query, context_text or None, before_send=ctx.before_send)
        except PerplexityError as exc:
            log.warning("perplexity_search failed (run %s): %s", ctx.run_id, exc)
            extra: dict[str, Any] = {"reason": exc.kind, "guidance": KB_ONLY_GUIDANCE}
            if exc.retry_after:
                extra["retry_after"] = exc.retry_after
            return ToolOutcome.error(_FAILURE_MESSAGES[exc.kind], **extra)
        except Exception as exc:  # never let an unexpected bug crash the run
            log.exception("perplexity_search crashed (run %s)", ctx.run_id)
            return ToolOutcome.error(
                f"External search failed ({type(exc).__name__}).",
                reason="internal",
                guidance=KB_ONLY_GUIDANCE,
            )

        try:
            result = new_external_result(
                provider=client.provider,
                query=query,
                answer=answer.answer,
                citations=answer.citations,
                model=answer.model,
                query_id=ctx.state.query_id,
                conversation_id=ctx.conversation_id,
                owner=ctx.user_id,  # the answer may repeat what this user asked: theirs
            )
            await deps.keywords.save_result(result)  # stored, and embedded for later lookups
        except Exception:
            log.exception("storing the perplexity result failed (run %s)", ctx.run_id)
            return ToolOutcome.error(
                "The external answer could not be stored.",
                reason="storage",
                guidance=KB_ONLY_GUIDANCE,
            )

        for source in external_sources(result, ORIGIN_FRESH):
            ctx.state.add_source(source)
        note_external_result(ctx.state, result.id, needs_keywords=True)
        return ToolOutcome(
            content={
                "perplexity_result_id": result.id,
                "source_id": result.id,
                **quoted(answer.answer, source=f"{client.provider} web search answer", field="answer"),
                "citations": [
                    {
                        "source_id": result.citation_source_id(c),
                        "title": c.title,
                        "url": safe_url(c.url),
                        **({"date": c.date} if c.date else {}),
                    }
                    for c in answer.citations
                ],
                "model": answer.model,
                "next_step": (
                    "Extract 3-10 specific keywords (2-50 characters each, no generic words) "
                    f'from this answer and call index_keywords with perplexity_result_id "{result.id}"; '
                    "then call generate_response combining the knowledge-base and external "
                    "information, citing source_ids."
                ),
            }
        )

    return perplexity_search
