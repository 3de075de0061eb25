"""Workflow drafts, each owned by one caller (``DraftStore``).

Why apart: the workflow tools' only store, with its own TTL and per-owner limit rules.
"""

from __future__ import annotations

from typing import Protocol

from storage.draft_records import Draft


class DraftStore(Protocol):
    """Workflow drafts, each owned by one caller. A draft is *live* while its
    ``last_access`` is after the ``live_after`` the caller passes (its TTL policy);
    a dead draft, or another owner's, reads as absent."""

    async def insert(self, draft: Draft, *, live_after: float, max_per_owner: int) -> bool:
        """Delete every draft that is no longer live, then store ``draft`` unless its
        owner already has ``max_per_owner`` live drafts (then return False) — as one
        atomic step, so concurrent inserts never overshoot the limit."""
        ...

    async def load(self, owner: str, draft_id: str, *, live_after: float) -> Draft | None: ...

    async def save(self, draft: Draft) -> None:
        """Store the draft's ``actions`` and ``last_access`` (using a draft refreshes it)."""
        ...

    async def purge(self, *, live_after: float) -> int:
        """Delete the drafts that are no longer live; return how many."""
        ...
