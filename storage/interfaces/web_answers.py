"""Saved answers from external (web) search and the keywords that point at them:
``ExternalResultStore``, ``KeywordStore`` and their embeddings (``ExternalVectorStore``).

Why apart: the RAG flow's memory of what the web answered, owner-scoped as one whole
(a vector reaches a user only through the owner-scoped reads here).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from storage.keyword_records import (
    ExternalResult,
    ExternalVector,
    KeywordAssociation,
    KeywordHit,
    KeywordRecord,
    KeywordTermHit,
    NewExternalVector,
)


class ExternalResultStore(Protocol):
    """Answers from external search, kept so keywords can point at them. Each has an
    ``owner`` (the user whose run fetched it); every read that could cross users takes
    ``owner``: a user id reads only that user's rows, ``None`` every row (the shared
    pool of ``AGENT_SHARED_WEB_ANSWERS``, and operator tools)."""

    async def save(self, result: ExternalResult) -> None:
        """Store ``result`` with its ``owner`` (its id and ``created_at`` are the
        caller's; not ``matched_keywords``)."""
        ...

    async def get(self, result_id: str, *, owner: str | None) -> ExternalResult | None: ...

    async def get_many(self, result_ids: Sequence[str], *, owner: str | None) -> list[ExternalResult]:
        """The results that exist and belong to ``owner`` (any owner when None), in the
        order of ``result_ids`` (unknown and other users' ids skipped)."""
        ...


class KeywordStore(Protocol):
    """Keywords by their normalised ``key`` (unique per owner: the user whose run
    indexed them), with usage counts and the associations to the queries, external
    results and conversations they came from. Reads take ``owner`` like
    ``ExternalResultStore``'s: a user id, or ``None`` for every owner."""

    async def upsert(
        self,
        keywords: Mapping[str, str],
        *,
        query_id: str | None,
        external_result_ids: Sequence[str] = (),
        conversation_id: str | None = None,
        owner: str,
        now: float,
        terms: Mapping[str, Sequence[str]] | None = None,
    ) -> list[KeywordRecord]:
        """``keywords`` maps key -> display form, all ``owner``'s (another owner's
        keyword of the same key is another row). A new key is stored with usage 1; a
        known one gets ``usage_count + 1`` and ``updated_at = last_used_at = now`` (its
        display form kept). Each keyword is associated once with every result id (or,
        with none given, with the query alone). ``terms`` (key -> matching terms) are
        stored for ``term_hits``, replacing the keyword's earlier ones. All or nothing;
        concurrent calls never lose an update. Returns the keywords as stored, in the
        order given. Raises ``ValueError`` when there is neither a query id nor a
        result id."""
        ...

    async def term_hits(self, terms: Collection[str], *, owner: str | None) -> list[KeywordTermHit]:
        """The live keywords of ``owner`` with at least one of ``terms`` that point at an external
        result: one hit per (keyword, result), with how many of the keyword's terms
        are among ``terms`` and how many it has."""
        ...

    async def set_terms(self, terms: Mapping[str, Sequence[str]]) -> None:
        """Replace the matching terms of these keys, every owner's (terms derive from
        the key alone; unknown keys are skipped)."""
        ...

    async def without_terms(self, limit: int) -> dict[str, str]:
        """Up to ``limit`` live keywords (key -> display) whose terms were never stored
        (indexed before terms existed)."""
        ...

    async def hits(self, keys: Collection[str], *, owner: str | None) -> list[KeywordHit]:
        """The live keywords of ``owner`` among ``keys`` that point at an external result, one hit
        per (keyword, result)."""
        ...

    async def touch(self, keys: Collection[str], *, owner: str | None, now: float) -> None:
        """Set ``last_used_at`` of these keywords of ``owner`` (a lookup used them)."""
        ...

    async def prune(self, *, usage_below: int, idle_before: float, now: float) -> int:
        """Delete the keywords used fewer than ``usage_below`` times whose last use
        (``last_used_at``, else ``updated_at``) is before ``idle_before``. Their
        associations stay, archived at ``now``. Every owner's (an operator's policy).
        Returns how many keywords went."""
        ...

    async def get(self, key: str, *, owner: str) -> KeywordRecord | None: ...

    async def associations(self, key: str, *, owner: str | None) -> list[KeywordAssociation]:
        """Every association of ``owner`` recorded for ``key``, archived ones included,
        oldest first."""
        ...

    async def count(self) -> int: ...


class ExternalVectorStore(Protocol):
    """Embeddings of saved external answers (their question and answer text) and of
    keywords, per embedder (``embed_model``), so later questions find them by meaning.
    Rows are never updated: a reader keeps the highest ``id`` it has loaded and asks
    for what came after.

    No owner column: a vector is an index entry, not content. It names a result id or a
    keyword key, and a hit reaches a user only through the owner-scoped reads of
    ``ExternalResultStore.get_many`` and ``KeywordStore.hits`` (a keyword key's vector
    serves every owner's keyword of that key)."""

    async def save(self, embed_model: str, rows: Sequence[NewExternalVector]) -> None:
        """Store the rows; a (kind, ref) that already has a vector of ``embed_model`` keeps it."""
        ...

    async def after(self, embed_model: str, dim: int, after_id: int, limit: int) -> list[ExternalVector]:
        """Up to ``limit`` vectors of ``embed_model`` at ``dim`` dimensions with an id
        above ``after_id``, in id order."""
        ...

    async def unembedded_results(self, embed_model: str, limit: int) -> list[ExternalResult]:
        """Up to ``limit`` external results without an ``answer`` vector of ``embed_model``."""
        ...

    async def unembedded_keywords(self, embed_model: str, limit: int) -> dict[str, str]:
        """Up to ``limit`` live keywords (key -> display) without a vector of ``embed_model``."""
        ...
