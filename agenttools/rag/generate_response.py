"""``generate_response``: the mandatory last step; its payload becomes the ``response`` event.

Citations must name sources this run actually retrieved (FR-014 without invention): an
unknown one sends the call back to the model with the list of valid ids. The
``used_internal_kb`` / ``used_external_kb`` flags are made consistent with what was cited
and retrieved (and the correction reported) rather than bounced, so a small slip does not
burn the single retry the flow allows.
"""

from __future__ import annotations

from typing import Any

from agenttools.core.registry import EvidenceSource, RunToolState, ToolContext, ToolHandler, ToolOutcome
from agenttools.rag.citations import verify_citations
from agenttools.rag.deps import RagToolDeps
from agenttools.rag.policy import GENERATE_RESPONSE, kb_search_failed, missing_prerequisite, prerequisite_error
from agenttools.rag.sources import resolve_citations
from events import Response, Source

MAX_LISTED_SOURCES = 40
_CITATIONS_REPORTED = "citations.unknown_reported"


def make_generate_response_handler(deps: RagToolDeps) -> ToolHandler:
    """``deps`` is unused today; the factory signature is uniform across the four tools."""
    del deps

    async def generate_response(args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        state = ctx.state
        blocked = missing_prerequisite(GENERATE_RESPONSE, state)
        if blocked:
            return prerequisite_error(blocked)

        answer = str(args.get("answer") or "").strip()
        if not answer:
            return ToolOutcome.error(
                "answer must not be empty", guidance="Put the complete answer text in answer."
            )

        confidence = args.get("confidence_score")
        if confidence is not None:
            if isinstance(confidence, bool) or not isinstance(confidence, int | float):
                return ToolOutcome.error("confidence_score must be a number between 0 and 1")
            if not 0.0 <= float(confidence) <= 1.0:
                return ToolOutcome.error(
                    f"confidence_score {confidence} is out of range; use a number between 0 and 1"
                )
            confidence = round(float(confidence), 4)

        refs = args.get("sources")
        if refs is None:
            refs = []
        if not isinstance(refs, list):
            return ToolOutcome.error(
                "sources must be an array of source_ids", valid_sources=_valid_sources(state)
            )
        cited, unknown = resolve_citations(refs, state)
        if unknown:
            return ToolOutcome.error(
                "These sources were not retrieved in this conversation turn: "
                + ", ".join(f'"{u}"' for u in unknown)
                + ". Cite only source_ids returned by knowledge_base_search or perplexity_search.",
                reason="unknown_sources",
                valid_sources=_valid_sources(state),
            )

        # Inline [id] citations: unknown ones go back to the model once, then are removed.
        check = verify_citations(answer, state)
        corrections: list[str] = []
        if check.unknown_ids:
            if not state.extras.get(_CITATIONS_REPORTED):
                state.extras[_CITATIONS_REPORTED] = True
                return ToolOutcome.error(
                    "The answer cites ids that were not retrieved in this run: "
                    + ", ".join(f"[{u}]" for u in check.unknown_ids)
                    + ". Cite only ids from the search results, or remove these citations.",
                    reason="unknown_citations",
                    unknown_ids=check.unknown_ids,
                    valid_sources=_valid_sources(state),
                )
            answer = check.answer_without_unknown.strip() or answer
            corrections.append("removed citations of ids not retrieved: " + ", ".join(check.unknown_ids))
        cited += [s for s in check.cited_sources if s.id not in {c.id for c in cited}]

        used_internal = bool(args.get("used_internal_kb"))
        used_external = bool(args.get("used_external_kb"))
        if any(s.kind == "external" for s in cited) and not used_external:
            used_external = True
            corrections.append("used_external_kb set to true: external sources are cited")
        if any(s.kind == "internal" for s in cited) and not used_internal:
            used_internal = True
            corrections.append("used_internal_kb set to true: knowledge-base sources are cited")
        if used_external and not any(s.kind == "external" for s in state.sources.values()):
            used_external = False
            corrections.append("used_external_kb set to false: no external source was retrieved")
        if used_internal and not any(s.kind == "internal" for s in state.sources.values()):
            used_internal = False
            corrections.append(
                "used_internal_kb set to false: "
                + (
                    "the knowledge-base search failed"
                    if kb_search_failed(state)
                    else "no knowledge-base passage was retrieved"
                )
            )
        if not cited and state.sources and (used_internal or used_external):
            return ToolOutcome.error(
                "The answer claims to use retrieved information but cites no sources. List "
                "the source_ids you used in sources, or set used_internal_kb and "
                "used_external_kb to false if the answer does not rely on them.",
                reason="missing_citations",
                valid_sources=_valid_sources(state),
            )

        payload: dict[str, Any] = {
            "answer": answer,
            "sources": [s.to_dict() for s in cited],
            "confidence_score": confidence,
            "used_internal_kb": used_internal,
            "used_external_kb": used_external,
        }
        state.final_response = payload
        # The cited sources as the ``response`` event shows them (title, link or file, not
        # the metadata): the conversation keeps this result, so a reloaded page shows the
        # same source cards as the live one, not bare ids.
        content: dict[str, Any] = {
            "delivered": True,
            "source_count": len(cited),
            "sources": [_card(s) for s in payload["sources"]],
        }
        if corrections:
            content["corrections"] = corrections
        event = Response(
            answer=answer,
            sources=[Source(**s) for s in payload["sources"]],
            confidence_score=confidence,
            used_internal_kb=used_internal,
            used_external_kb=used_external,
        )
        return ToolOutcome(content=content, events=[event], ends_run=True)

    return generate_response


def _card(source: dict[str, Any]) -> dict[str, Any]:
    """A cited source without its metadata: what a source card shows."""
    card = {k: source[k] for k in ("id", "title", "kind", "url", "location") if source.get(k)}
    if isinstance(card.get("title"), str):
        card["title"] = card["title"][:200]
    return card


def _valid_sources(state: RunToolState) -> list[dict[str, str]]:
    return [_brief(s) for s in list(state.sources.values())[:MAX_LISTED_SOURCES]]


def _brief(source: EvidenceSource) -> dict[str, str]:
    return {"source_id": source.id, "title": source.title[:100], "kind": source.kind}
