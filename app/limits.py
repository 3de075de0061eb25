"""Per-user admission control: concurrent runs and requests per minute (429 + Retry-After)."""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field


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
