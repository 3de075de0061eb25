"""When a corpus search should ask the user instead of answering: a list-all request or a
flat, too-large match (overload), and a filtered search whose conditions match nothing.

Kept apart from the search handler because deciding *whether* to clarify needs extra
counts from the knowledge base; the wording of each clarification lives in
:mod:`agenttools.rag.clarification`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from agenttools.core.registry import RunToolState
from agenttools.rag.clarification import (
    UnmatchedConstraint,
    constraint_text,
    list_overload,
    no_results_for_constraints,
    overload,
)
from agenttools.rag.corpus_deps import CorpusKnowledge, CorpusToolDeps
from agenttools.rag.decomposition import plan_intent, raw_text_for
from knowledge.textnorm import STOP_WORDS
from knowledge.types import SearchResponse

log = logging.getLogger("agentchat.tools.corpus")


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


async def overload_clarification(
    deps: CorpusToolDeps,
    state: RunToolState,
    bucket: str,
    query: str,
    filters: Any,
    doc_id: str | None,
    schema: Mapping[str, str],
    response: SearchResponse,
    private: tuple[str, ...] = (),
) -> tuple[Any, dict[str, Any]] | None:
    """The overload clarification for this search, or ``None``. ``private``: the run's
    own private buckets (``agenttools.rag.own_bucket``), which ``bucket`` may be.

    A list-all request counts the documents it covers (exactly for a whole scope, a lower
    bound past a few hundred matching passages); any other search is an overload when
    the knowledge base says so (``SearchResponse.overloaded``, ``OverloadRule``).
    """
    threshold = deps.overload_threshold
    is_list, topic = list_request(query, bucket, plan_intent(state))
    if is_list and doc_id is None:
        try:
            counted = await deps.knowledge.count_documents(
                topic, bucket=bucket, filters=filters, limit=min(1000, max(3 * threshold, 100)), private=private
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


async def unmatched_filters_clarification(
    kb: CorpusKnowledge,
    state: RunToolState,
    bucket: str,
    query: str,
    filters: Any,
    doc_id: str | None,
    response: SearchResponse,
    private: tuple[str, ...] = (),
) -> tuple[Any, dict[str, Any]]:
    """The ``no_results`` clarification of a filtered search: which condition matches
    nothing (alone, or only in combination), and what dropping it would find.
    ``private`` as for ``overload_clarification``."""
    try:
        counts = await kb.constraint_counts(filters, bucket=bucket, private=private)
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
            found = await kb.count_documents(query, bucket=bucket, filters=remaining, doc_id=doc_id, private=private)
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
