"""Per-user admission control: concurrent runs and requests per minute (429 + Retry-After)."""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from storage.errors import StorageUnavailable
from storage.interfaces import LimitStore

log = logging.getLogger("agentchat.limits")


@dataclass(slots=True)
class RateLimiter:
    """Sliding one-minute window per user; bounded in users (oldest forgotten first)."""

    per_minute: int
    max_users: int = 100_000
    _hits: dict[str, deque[float]] = field(default_factory=dict)

    def check(self, user_id: str, now: float | None = None) -> float | None:
        """Record a request; return None if allowed, else seconds until one is allowed."""
        now = time.monotonic() if now is None else now
        window = self._hits.get(user_id)
        if window is None:
            if len(self._hits) >= self.max_users:
                self._hits.pop(next(iter(self._hits)))
            window = self._hits[user_id] = deque()
        while window and now - window[0] >= 60.0:
            window.popleft()
        if len(window) >= self.per_minute:
            return max(1.0, math.ceil(60.0 - (now - window[0])))
        window.append(now)
        return None

    def forget_last(self, user_id: str) -> None:
        """Take back the request ``check`` just admitted (another limit refused it)."""
        window = self._hits.get(user_id)
        if window:
            window.pop()


class RunRegistry(Protocol):
    def count_active(self, user_id: str) -> int: ...

    def finished_here(self, user_id: str, run_id: str) -> bool: ...


@dataclass(slots=True)
class Admission:
    """The per-user limits of every replica on one database.

    Requests per minute: with a ``store`` (the PostgreSQL engine: many replicas) every
    admitted request is counted in the database, atomically (``LimitStore.hit``); the
    in-process window runs first and may only *refuse* — it has seen a subset of the
    user's requests, so it never admits what the shared count would refuse. Without a
    store (the embedded SQLite default: one process) the in-process window decides.

    Concurrent runs: the user's unfinished runs in the store (an indexed count), less
    those this process has finished whose ending is still in the write queue, and never
    fewer than the ones running here.

    The shared count is one step of a request not yet acknowledged, so it waits at most
    until the request's storage ``deadline`` (``app/server/storage_budget.py``), once:
    when the database does not answer, the replica's own count decides (a warning, and
    ``shared_fallbacks`` counts it; ``/readyz`` shows the database away), and for the
    next ``fallback_s`` every request is counted here at once, without waiting on the
    database again — the budget is left to the admission write, whose 503 is the
    answer the client must get promptly."""

    per_minute: int
    store: LimitStore | None = None
    runs_store: LimitStore | None = None
    local: RateLimiter = field(init=False)
    prune_every_s: float = 60.0
    #: After the shared count failed, how long the replica's own count decides alone.
    fallback_s: float = 5.0
    #: Requests the replica's own count decided because the shared count was away.
    shared_fallbacks: int = 0
    _last_prune: float = 0.0
    _shared_away_until: float = 0.0

    def __post_init__(self) -> None:
        self.local = RateLimiter(self.per_minute)

    async def check_rate(self, key: str, now: float | None = None, *, deadline: float | None = None) -> float | None:
        """None when the request may go on, else seconds until one may. ``deadline``
        (``time.monotonic()``): the request's storage budget (see the class)."""
        wait = self.local.check(key)
        if wait is not None or self.store is None:
            return wait
        if time.monotonic() < self._shared_away_until:
            self.shared_fallbacks += 1
            return None
        now = time.time() if now is None else now
        try:
            decision = await self.store.hit(key, self.per_minute, now, deadline=deadline)
        except StorageUnavailable as exc:
            self.shared_fallbacks += 1
            self._shared_away_until = time.monotonic() + self.fallback_s
            log.warning(
                "shared rate limit unavailable; using this replica's count",
                extra={"key": key, "for_s": self.fallback_s, "error": str(exc)[:200]},
            )
            return None
        if now - self._last_prune >= self.prune_every_s:
            self._last_prune = now
            with contextlib.suppress(StorageUnavailable):
                await self.store.prune(now)
        if decision.allowed:
            return None
        self.local.forget_last(key)  # refused: this request does not count here either
        return decision.retry_after_s or 1.0

    def status(self) -> dict[str, object] | None:
        """Where requests per minute are counted now, for ``/readyz`` (``None``: one
        process, always here): the fallback to this replica's count is never silent."""
        if self.store is None:
            return None
        away = time.monotonic() < self._shared_away_until
        return {
            "counted": "this replica (the shared count is unavailable)" if away else "shared",
            "shared_fallbacks": self.shared_fallbacks,
        }

    async def active_runs(self, user_id: str, registry: RunRegistry, cap: int) -> int:
        here = registry.count_active(user_id)
        if self.runs_store is None:
            return here
        stored = await self.runs_store.unfinished_runs(user_id, cap + 64)
        # Each stored id looked up in the user's runs here (at most cap + 64 look-ups),
        # not a sorted set of every run of the user in memory built per admission: with
        # one user (AGENT_AUTH=none) that was every run of the replica (issue 23).
        return max(here, sum(1 for run_id in stored if not registry.finished_here(user_id, run_id)))
