"""What the corpus tools share: the knowledge base's slice they call, their settings and
limits, their names, and the argument helpers every handler uses.

Split out of ``corpus_tools`` so the search handler, the clarification logic and the
metadata handler each depend on one small module instead of on each other.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from knowledge.filters import BUILTIN_FIELDS
from knowledge.types import BucketInfo, ConstraintCount, DocumentCount, OverloadRule, SearchResponse

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
        private: Sequence[str] = (),
        overload: OverloadRule | None = None,
    ) -> SearchResponse: ...

    async def bucket_schema(self, bucket: str, *, private: Sequence[str] = ()) -> dict[str, str]: ...

    async def list_buckets(self) -> list[BucketInfo]: ...

    async def get_document(self, doc_id: str, *, private: str | None = None) -> dict[str, Any] | None: ...

    async def constraint_counts(
        self, filters: Mapping[str, Any] | str | None, *, bucket: str | None = None, private: Sequence[str] = ()
    ) -> list[ConstraintCount]: ...

    async def count_documents(
        self,
        query: str | None = None,
        *,
        bucket: str | None = None,
        filters: Mapping[str, Any] | str | None = None,
        doc_id: str | None = None,
        limit: int = 1000,
        private: Sequence[str] = (),
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
    ``conversation_attachments``: the run's own conversation's attachment bucket may be
    named (a ``knowledge_base_search`` hit's bucket followed: ``agenttools.rag.own_bucket``).
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
    conversation_attachments: bool = False

    @property
    def overload_rule(self) -> OverloadRule:
        """The rule every search of these tools is judged by (``SearchResponse.overloaded``)."""
        return OverloadRule(self.overload_threshold, self.flat_spread)


# --------------------------------------------------------------------------- argument helpers


def int_arg(value: Any, default: int, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    return max(lo, min(int(value), hi))


def opt_str(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def allowed_fields(schema: Mapping[str, str]) -> dict[str, str]:
    return {**BUILTIN_FIELDS, **dict(schema)}


async def bucket_list(kb: CorpusKnowledge) -> dict[str, Any]:
    """A tool error's ``available_buckets``; when the listing itself fails,
    ``available_buckets_error`` says so instead: an empty list read as "there are no
    buckets", and the model told the user the knowledge base was empty (the failure is
    counted by the knowledge base, ``agentchat_kb_bucket_list_failures_total``)."""
    try:
        buckets = await kb.list_buckets()
    except Exception as exc:  # the error message is what matters; the list is a courtesy
        log.exception("listing buckets failed")
        return {
            "available_buckets_error": f"the bucket list could not be read right now ({type(exc).__name__}): "
            "the buckets are unknown, not absent; retry shortly"
        }
    return {"available_buckets": [{"bucket": b.name, "fields": b.fields, "documents": b.documents} for b in buckets]}
