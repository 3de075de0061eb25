"""FR-008: keywords pruned automatically, by usage and age, on a timer.

``build_services`` starts ``prune_keywords_periodically`` as a background task (cancelled
at shutdown like the run sweeper). Every ``interval_s`` it removes the keywords used fewer
than ``min_usage`` times and idle for longer than ``max_age_days``
(``KeywordIndex.prune``: their associations stay, archived) and logs what it removed.
It prunes once at start-up too, so a process restarted more often than the interval
still prunes. ``AGENT_KEYWORD_MAX_AGE_DAYS=0`` turns it off. A failed round (the
database busy past its retry window) is logged and the next round runs as planned.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("agentchat.keywords")


class Prunable(Protocol):
    async def prune(self, min_usage: int, older_than_days: float) -> int: ...


@dataclass(frozen=True, slots=True)
class KeywordPrunePolicy:
    max_age_days: float = 90.0
    min_usage: int = 2
    interval_s: float = 3600.0

    @property
    def enabled(self) -> bool:
        return self.max_age_days > 0

    def describe(self) -> str:
        return f"used fewer than {self.min_usage} times and idle for more than {self.max_age_days:g} days"


@dataclass(slots=True)
class PruneStats:
    """What the pruner did since start-up (for tests and /readyz-style views)."""

    rounds: int = 0
    removed: int = 0
    failures: int = 0
    last_removed: int = 0


async def prune_once(keywords: Prunable, policy: KeywordPrunePolicy, stats: PruneStats | None = None) -> int:
    """One pruning round; returns how many keywords were removed."""
    removed = await keywords.prune(min_usage=policy.min_usage, older_than_days=policy.max_age_days)
    if stats is not None:
        stats.rounds += 1
        stats.removed += removed
        stats.last_removed = removed
    level = logging.INFO if removed else logging.DEBUG
    log.log(
        level,
        "keywords pruned: %d removed (%s)",
        removed,
        policy.describe(),
        extra={"removed": removed, "min_usage": policy.min_usage, "max_age_days": policy.max_age_days},
    )
    return removed


async def prune_keywords_periodically(
    keywords: Prunable,
    policy: KeywordPrunePolicy,
    *,
    stats: PruneStats | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> None:
    """Prune now, then every ``policy.interval_s`` seconds, until cancelled."""
    if not policy.enabled:
        log.info("automatic keyword pruning is off (AGENT_KEYWORD_MAX_AGE_DAYS=0)")
        return
    while True:
        try:
            await prune_once(keywords, policy, stats)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if stats is not None:
                stats.failures += 1
            log.warning("keyword pruning failed; trying again next round: %s", exc, extra={"error": str(exc)})
        await sleep(policy.interval_s)
