"""``app/ops/stopping.cancel_and_wait``: shutdown never waits for ever on a background
task that does not end when cancelled, and says which one it left."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from app.ops.stopping import cancel_and_wait


async def test_cooperative_tasks_end_and_none_is_named() -> None:
    tasks = [asyncio.create_task(asyncio.sleep(3600), name=f"job-{i}") for i in range(3)]
    assert await cancel_and_wait(tasks, 5) == []
    assert all(t.cancelled() for t in tasks)


async def test_a_task_that_swallows_its_cancellation_is_left_and_named(caplog: pytest.LogCaptureFixture) -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()

    stuck = asyncio.create_task(stubborn(), name="stubborn-job")
    polite = asyncio.create_task(asyncio.sleep(3600), name="polite-job")
    await asyncio.sleep(0)  # both started
    with caplog.at_level(logging.ERROR, logger="agentchat.serving"):
        assert await cancel_and_wait([stuck, polite], 0.2) == ["stubborn-job"]
    assert polite.cancelled() and not stuck.done()
    (record,) = [r for r in caplog.records if "did not end" in r.getMessage()]
    assert record.task == "stubborn-job" and "stubborn" in record.stack  # type: ignore[attr-defined]
    release.set()
    await asyncio.wait_for(stuck, 5)


async def test_finished_tasks_are_not_waited_for() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    assert await cancel_and_wait([done], 0.01) == []
