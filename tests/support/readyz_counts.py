"""Waiting for ``/readyz``'s knowledge counts to be current.

A probe never counts the knowledge base in its request (``knowledge.kb_counts_memo``):
after a write it answers with the counts kept for an older generation (``counted.current``
false) and counts the new one in the background. A test that asserts counts after a
write probes until they are current - a condition, with a guard against a hang.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: Only against a hang: a count of a test's knowledge base takes milliseconds.
COUNTED_GUARD_S = 60.0


def knowledge_check(body: dict[str, Any]) -> dict[str, Any]:
    """The knowledge check of a ``/readyz`` body, or ``body`` itself when it is one
    (``KnowledgeComponent.readiness()``)."""
    if "checks" in body:
        return dict(body["checks"]["knowledge"])
    return body


def counts_current(body: dict[str, Any] | None) -> bool:
    """Whether ``body``'s knowledge counts were counted at the generation it read."""
    if body is None:
        return False
    counted = knowledge_check(body).get("counted")
    return bool(counted and counted.get("current"))


async def current(
    probe: Callable[[], Awaitable[T]],
    body_of: Callable[[T], dict[str, Any] | None] | None = None,
    *,
    timeout: float = COUNTED_GUARD_S,
    step: float = 0.01,
) -> T:
    """``probe()``'s first answer whose knowledge counts are current (``body_of`` takes
    the body out of an answer: ``AgentServer.readyz`` gives ``(status, body)``; without
    it the answer is the body)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await probe()
        body = body_of(answer) if body_of is not None else answer
        if counts_current(body if isinstance(body, dict) else None):
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"/readyz's knowledge counts were not current after {timeout} s: {answer}")
        await asyncio.sleep(step)


async def current_readiness(component: Any) -> dict[str, Any]:
    """``component.readiness()`` (a ``KnowledgeComponent``) once its counts are current."""
    out: dict[str, Any] = await current(component.readiness)
    return out


__all__ = ["COUNTED_GUARD_S", "counts_current", "current", "current_readiness", "knowledge_check"]
