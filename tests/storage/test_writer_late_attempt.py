"""The ordered writer (both engines) gives up only after an attempt begun past its retry
window.

A process paused inside an attempt (SIGSTOP, a frozen VM) finds, when it runs again, the
attempt failed (PostgreSQL ended its idle session; a sibling worker took the SQLite
lock) and the window spent while it was stopped. It gave up there ("failed after 1
attempts") and its runs ended with ``storage_unavailable`` - when the real answer was
that another process had taken them over, which only a new attempt's lease check tells
(tests/storage/test_pg_frozen_transaction.py has the PostgreSQL case end to end). The
commit function here stands in for an engine's; the queue, its retries and its health
are the product's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from storage.errors import LeaseLost, StorageUnavailable
from storage.writer import OrderedWriter, WriteHealth, WriteItem
from tests.support.deadline import within

WINDOW_S = 0.05


class Gone(Exception):
    """A transient failure: the connection was lost."""


def _only_the_close(batch: Sequence[WriteItem]) -> bool:
    """The empty item ``OrderedWriter.close`` commits to flush the queue."""
    return not any(item.statements for item in batch)


async def _outcome(writer: OrderedWriter) -> BaseException | None:
    done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
    writer.enqueue([("INSERT", ())], on_commit=lambda: done.set_result(None), on_fail=done.set_result)
    return await within(done, "the write's outcome")


async def test_an_attempt_that_outlasted_the_window_is_tried_once_more() -> None:
    began: list[float] = []

    async def commit_batch(batch: Sequence[WriteItem]) -> None:
        if _only_the_close(batch):
            return
        began.append(time.monotonic())
        if len(began) == 1:
            # Stopped inside the attempt until the window is spent, then the server has
            # dropped the session.
            while time.monotonic() <= began[0] + WINDOW_S:
                await asyncio.sleep(0.01)
            raise Gone("server closed the connection unexpectedly")
        raise LeaseLost("another process holds the run")

    health = WriteHealth()
    writer = OrderedWriter(commit_batch, transient=lambda e: isinstance(e, Gone), retry_s=WINDOW_S, health=health)
    writer.start()
    try:
        assert isinstance(await _outcome(writer), LeaseLost)
    finally:
        await writer.close()
    assert len(began) == 3, began  # the late try, then the item alone (LeaseLost is no retry)
    assert health.healthy and health.stats.failures == 0


async def test_a_fast_failing_outage_is_given_up_as_before() -> None:
    """What the last try costs an outage whose attempts fail at once (server down,
    connection refused): nothing - the attempt that gives up is the first one begun past
    the window, as before the rule."""
    began: list[float] = []

    async def commit_batch(batch: Sequence[WriteItem]) -> None:
        if _only_the_close(batch):
            return
        began.append(time.monotonic())
        raise Gone("connection refused")

    health = WriteHealth()
    window = 0.3  # several quick tries with backoff inside it
    writer = OrderedWriter(commit_batch, transient=lambda e: isinstance(e, Gone), retry_s=window, health=health)
    writer.start()
    try:
        queued = time.monotonic()  # the window starts after this, with the first try
        failed = await _outcome(writer)
    finally:
        await writer.close()
    assert isinstance(failed, StorageUnavailable), failed
    # Only the last attempt began past the window's end: no extra try.
    assert began[-1] >= queued + window and began[-2] < began[0] + window, began
    assert len(began) >= 3 and not health.healthy and health.stats.failures == 1
