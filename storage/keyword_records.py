"""Records of the keyword index and of stored external (Perplexity) answers.

Plain dataclasses with their JSON encoding only; keyword validation and normalisation,
lookup ranking and the prune policy live in ``agenttools.keywords``, id generation in
``agenttools.external_results``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

#: The owner of rows nobody can be named for: saved answers and keywords stored before
#: rows had owners whose asker is not known (no conversation, or a keyword several
#: users shared), and rows written outside any user (tools, benchmarks). A real user
#: never has this id, so such rows are found only in the shared mode
#: (``AGENT_SHARED_WEB_ANSWERS``) or by a caller that asks for ``NOBODY`` itself.
NOBODY = ""


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
    """A stored external answer. ``owner`` is the user whose run fetched it (the answer
    may repeat what they asked, so it is theirs: found only for them unless the
    deployment shares web answers). ``matched_keywords`` and ``match_score`` are filled
    only by keyword lookups (they are not stored)."""

    id: str
    provider: str
    query: str
    answer: str
    citations: tuple[Citation, ...]
    model: str | None
    query_id: str | None
    conversation_id: str | None
    created_at: float
    owner: str = NOBODY
    matched_keywords: tuple[str, ...] = field(default=())
    #: How well a lookup matched it, 0..1 (filled only by lookups, not stored).
    match_score: float = 0.0

    def citation_source_id(self, citation: Citation) -> str:
        return f"{self.id}#{citation.index}"


@dataclass(frozen=True, slots=True)
class KeywordRecord:
    """A stored keyword. ``key`` is its normalised form, unique per ``owner`` (the user
    whose run indexed it: two users' keywords never merge, so neither learns what the
    other asked); ``display`` the form first seen; ``last_used_at`` is None until a
    merge or a lookup uses it again."""

    keyword_id: str
    key: str
    display: str
    usage_count: int
    created_at: float
    updated_at: float
    last_used_at: float | None
    owner: str = NOBODY


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


@dataclass(frozen=True, slots=True)
class KeywordTermHit:
    """A live keyword some of whose matching terms a query contains, and one external
    result it points at: ``matched`` of its ``terms`` terms were found."""

    external_result_id: str
    key: str
    display: str
    matched: int
    terms: int


#: What an external vector embeds: the query a saved answer was fetched with, the
#: answer text, or one keyword (``ref`` is the result id, or the keyword's key).
ExternalVectorKind = Literal["question", "answer", "keyword"]
EXTERNAL_VECTOR_KINDS: tuple[ExternalVectorKind, ...] = ("question", "answer", "keyword")


@dataclass(frozen=True, slots=True)
class NewExternalVector:
    """An embedding to store (float32, one row)."""

    kind: ExternalVectorKind
    ref: str
    vector: npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class ExternalVector:
    """A stored embedding. ``id`` grows with every row an engine stores, so a reader
    that remembers the last id it saw loads only what is new."""

    id: int
    kind: ExternalVectorKind
    ref: str
    vector: npt.NDArray[np.float32]
