"""Answers from external search (Perplexity): what was asked, what came back, cited where.

Every successful ``perplexity_search`` is kept with an id so that (a) the keywords the
model extracts can point at it (``index_keywords``), (b) a later
``knowledge_base_search`` whose query contains those keywords returns it again without
a second paid call (seed 002, SC-006), and (c) a final answer can cite it.

The records (``ExternalResult``, ``Citation``) and the store (``ExternalResultStore``)
live in ``storage``; this module names new results.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Sequence

from storage.interfaces import ExternalResultStore
from storage.keyword_records import NOBODY, Citation, ExternalResult

__all__ = ["Citation", "ExternalResult", "ExternalResultStore", "new_external_result", "new_result_id"]


def new_result_id() -> str:
    """``px_`` + 16 hex chars: short enough for a model to copy, safe in any id validator."""
    return "px_" + secrets.token_hex(8)


def new_external_result(
    *,
    provider: str,
    query: str,
    answer: str,
    citations: Sequence[Citation],
    model: str | None = None,
    query_id: str | None = None,
    conversation_id: str | None = None,
    owner: str = NOBODY,
    now: float | None = None,
) -> ExternalResult:
    """A new result with a fresh id, timestamped ``now`` (default: the current time),
    owned by ``owner`` (the user whose run fetched it); hand it to
    ``ExternalResultStore.save``."""
    return ExternalResult(
        id=new_result_id(),
        provider=provider,
        query=query,
        answer=answer,
        citations=tuple(citations),
        model=model,
        query_id=query_id,
        conversation_id=conversation_id,
        owner=owner,
        created_at=time.time() if now is None else now,
    )
