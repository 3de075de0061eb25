"""Stopping background tasks at shutdown, with a bound.

A SIGTERM'd process must exit: a background task that does not end when cancelled (a
job swallowing the cancellation, an await that cancellation cannot interrupt) would
otherwise hold the lifespan's shutdown — and the process — for ever, with nothing in
the log to say which. Past ``timeout_s`` the stragglers are named with the stack they
are stuck at, and shutdown goes on to close the storage and the clients.
"""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterable

log = logging.getLogger("agentchat.serving")


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]], timeout_s: float) -> list[str]:
    """Cancel ``tasks`` and wait up to ``timeout_s`` for them to end; returns the names
    of those still running then (logged with their stacks)."""
    pending = [t for t in tasks if not t.done()]
    for task in pending:
        task.cancel()
    if not pending:
        return []
    _, stuck = await asyncio.wait(pending, timeout=timeout_s)
    names: list[str] = []
    for task in stuck:
        stack = io.StringIO()
        task.print_stack(file=stack)
        names.append(task.get_name())
        log.error(
            "a background task did not end within %.0f s of its cancellation; shutting down without it",
            timeout_s,
            extra={"task": task.get_name(), "stack": stack.getvalue()[-3000:]},
        )
    return sorted(names)


__all__ = ["cancel_and_wait"]
