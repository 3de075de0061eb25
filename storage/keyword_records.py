"""Records of the keyword index and of stored external (Perplexity) answers.

Plain dataclasses with their JSON encoding only; keyword validation and normalisation,
lookup ranking and the prune policy live in ``agenttools.keywords``, id generation in
``agenttools.external_results``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Citation:
    """One web source behind an external answer.

    ``index`` is the 1-based position in the provider's list, i.e. the ``[n]`` marker the
    answer text uses, so ``"<result_id>#<index>"`` names the same source the text cites.
    """

    index: int
    url: str
    title: str = ""
    date: str | None = None
    snippet: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"index": self.index, "url": self.url, "title": self.title}
        if self.date:
            d["date"] = self.date
        if self.snippet:
            d["snippet"] = self.snippet
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Citation:
        return cls(
            index=int(d["index"]),
            url=str(d["url"]),
            title=str(d.get("title") or ""),
            date=d.get("date"),
            snippet=d.get("snippet"),
        )


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """A stored external answer. ``matched_keywords`` is filled only by keyword lookups
    (it is not stored)."""

    id: str
    provider: str
    query: str
    answer: str
    citations: tuple[Citation, ...]
    model: str | None
    query_id: str | None
    conversation_id: str | None
    created_at: float
    matched_keywords: tuple[str, ...] = field(default=())

    def citation_source_id(self, citation: Citation) -> str:
        return f"{self.id}#{citation.index}"


@dataclass(frozen=True, slots=True)
class KeywordRecord:
    """A stored keyword. ``key`` is its normalised, unique form; ``display`` the form
    first seen; ``last_used_at`` is None until a merge or a lookup uses it again."""

    keyword_id: str
    key: str
    display: str
    usage_count: int
    created_at: float
    updated_at: float
    last_used_at: float | None


@dataclass(frozen=True, slots=True)
class KeywordAssociation:
    """Where a keyword was indexed from. ``archived`` once its keyword was pruned (kept
    for audit; it no longer leads lookups anywhere)."""

    keyword_key: str
    query_id: str | None
    external_result_id: str | None
    conversation_id: str | None
    archived: bool


@dataclass(frozen=True, slots=True)
class KeywordHit:
    """A live keyword that points at a stored external result."""

    external_result_id: str
    key: str
    display: str
