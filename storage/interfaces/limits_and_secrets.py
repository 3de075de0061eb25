"""What every replica on one database shares about the service itself: admission limits
(``LimitStore``) and named secrets (``SecretStore``).

Why apart: small protocols about the service, not about a user's data.
"""

from __future__ import annotations

from typing import Protocol

from storage.limit_records import RateDecision


class LimitStore(Protocol):
    """Admission limits every replica shares: requests per key per minute, and the
    number of a user's unfinished runs (an indexed count, read at admission)."""

    async def hit(self, key: str, per_minute: int, now: float, *, deadline: float | None = None) -> RateDecision:
        """Count one request of ``key`` at ``now`` if the limit allows it, atomically
        across replicas; a refused request is not counted."""
        ...

    async def prune(self, now: float) -> int:
        """Forget windows that no longer count at ``now``; returns how many."""
        ...

    async def unfinished_runs(self, user_id: str, limit: int) -> list[str]:
        """Ids of up to ``limit`` of the user's runs that are queued, running or interrupted."""
        ...


class SecretStore(Protocol):
    """Named secrets every process on the database shares (``app_secrets``): generated
    once by whichever process needs one first, then read by all."""

    async def get_or_create(self, name: str, value: str) -> str:
        """Store ``value`` under ``name`` unless a value is already stored; return the
        stored one. Concurrent first calls (replicas starting together) all return the
        same value."""
        ...

    async def replace(self, name: str, value: str) -> str | None:
        """Store ``value`` under ``name`` whatever was stored; return the value it
        replaced (``None``: there was none), atomically: concurrent calls each read the
        value they replace, as if they ran one after another."""
        ...
