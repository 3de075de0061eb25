"""The arithmetic of the shared request limiter, the same for every engine.

Counts are kept per key in fixed one-minute windows; a request is admitted while the
current window's count stays under ``per_minute`` minus the part of the previous
window that still overlaps the last sixty seconds (the sliding-window estimate), so a
burst straddling two windows cannot reach twice the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class RateDecision:
    allowed: bool
    retry_after_s: float | None = None


def window_of(now: float) -> int:
    return int(now // WINDOW_S) * WINDOW_S


def decide(per_minute: int, previous: int, now: float) -> tuple[int, float]:
    """(the count the current window may reach, seconds to wait when it is reached)."""
    elapsed = now - window_of(now)
    overlap = previous * (1.0 - elapsed / WINDOW_S)
    allowance = per_minute - math.ceil(overlap - 1e-9)
    # A hint: at the next window the current one starts to weigh less.
    return allowance, float(max(1, math.ceil(WINDOW_S - elapsed)))
