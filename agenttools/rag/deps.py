"""What the RAG tool handlers need, handed in explicitly by the app factory."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agenttools.rag.keywords import KeywordIndex
from agenttools.rag.perplexity import PerplexityClient
from storage.interfaces import ExternalResultStore


class ChunkHitLike(Protocol):
    """The fields of ``knowledge.ChunkHit`` the tools read (read-only, so frozen dataclasses fit)."""

    @property
    def doc_id(self) -> str: ...
    @property
    def chunk_id(self) -> Any: ...
    @property
    def title(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def source(self) -> str | None: ...
    @property
    def url(self) -> str | None: ...
    @property
    def bucket(self) -> str | None: ...
    @property
    def position(self) -> int | None: ...


class SearchResponseLike(Protocol):
    @property
    def hits(self) -> Sequence[ChunkHitLike]: ...
    @property
    def total_matches(self) -> int: ...
    @property
    def relaxed(self) -> bool: ...


class KnowledgeSearcher(Protocol):
    """The slice of ``knowledge.KnowledgeBase`` that ``knowledge_base_search`` uses."""

    async def search(
        self,
        query: str,
        *,
        bucket: str | None = None,
        top_k: int = 5,
        buckets: Sequence[str] | None = None,
        private: Sequence[str] = (),
    ) -> SearchResponseLike: ...


@dataclass(frozen=True, slots=True)
class RagToolSettings:
    """Limits that keep tool results small enough for a model's context."""

    default_kb_id: str = "default_kb"
    #: The buckets the default ``kb_id`` covers (``AGENT_KB_DEFAULT_BUCKETS``); empty or
    #: ``"*"`` means every bucket. A UI context's ``buckets`` overrides them.
    default_buckets: tuple[str, ...] = ()
    #: Search the conversation's own attachments (its private bucket,
    #: ``knowledge.attachments``) along with the default buckets.
    conversation_attachments: bool = False
    max_top_k: int = 20
    max_chunk_chars: int = 1_500
    max_external_answers: int = 3
    max_external_answer_chars: int = 3_000


@dataclass(frozen=True, slots=True)
class RagToolDeps:
    """Everything the four RAG tools touch. ``perplexity`` is None when no key is configured."""

    knowledge: KnowledgeSearcher
    keywords: KeywordIndex
    external_results: ExternalResultStore
    perplexity: PerplexityClient | None = None
    settings: RagToolSettings = field(default_factory=RagToolSettings)
