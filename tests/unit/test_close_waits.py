"""The close's waits for cancelled helper tasks are bounded (``app/ops/close_budget.py``).

Each of these was a cancel followed by an unbounded gather: a task that swallows its
cancellation (an await cancellation cannot interrupt, a library's shielded clean-up)
held the shutdown - and a SIGTERM'd process - for ever. Now each wait ends within its
step of the close budget, names what it left in the log, and the caller's own
cancellation goes through. The stubborn task here is released afterwards either way, so
a close that still waits on it fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import app.history
import app.ops.embedder_check
import app.rooms
from agenttools.mcp.client import McpConnection
from agenttools.mcp.config import McpServerConfig
from app.history import Titler
from app.ops.embedder_check import EmbedderCheck
from app.ops.history_metrics import HistoryMetrics
from tests.support.deadline import GUARD_S, until, within

BOUND_S = 0.2


class Stubborn:
    """A task that ignores every cancellation until the test releases it."""

    def __init__(self, name: str) -> None:
        self.release = asyncio.Event()
        self.task: asyncio.Task[None] = asyncio.create_task(self._run(), name=name)

    async def _run(self) -> None:
        while not self.release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await self.release.wait()

    async def end(self) -> None:
        self.release.set()
        await within(self.task, f"{self.task.get_name()} to end once released")


async def closes_without(stubborn: Stubborn, close: Callable[[], Awaitable[Any]]) -> None:
    """``close()`` returns although ``stubborn`` ignores its cancel."""
    await asyncio.sleep(0)  # the stubborn task is running
    try:
        closer = asyncio.ensure_future(close())
        done, _ = await asyncio.wait({closer}, timeout=10)
    finally:
        await stubborn.end()
    await within(closer, "the close after the task was released")
    assert closer in done, "the close waited on a task that ignores its cancellation"


def left_behind(caplog: pytest.LogCaptureFixture, name: str) -> bool:
    return any(
        r.levelno >= logging.WARNING and "did not end" in r.getMessage() and getattr(r, "task", None) == name
        for r in caplog.records
    )


async def test_titles_being_written_do_not_hold_the_close(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(app.history, "TITLES_STOP_S", BOUND_S)
    titler = Titler(None, HistoryMetrics(CollectorRegistry()))  # type: ignore[arg-type]
    stubborn = Stubborn("conversation-title")
    titler._tasks.add(stubborn.task)
    await closes_without(stubborn, titler.aclose)
    assert left_behind(caplog, "conversation-title")


async def test_the_embedder_check_does_not_hold_the_close(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(app.ops.embedder_check, "EMBEDDER_CHECK_STOP_S", BOUND_S)
    check = EmbedderCheck(None, "test", "none")
    stubborn = Stubborn("embedder-first-answer")
    check._task = stubborn.task
    await closes_without(stubborn, check.aclose)
    assert left_behind(caplog, "embedder-first-answer")


async def test_the_knowledge_rooms_tasks_do_not_hold_the_close(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(app.rooms, "KB_TASKS_STOP_S", BOUND_S)
    stubborn = Stubborn("sample-kb")
    polite = asyncio.create_task(asyncio.Event().wait(), name="keyword-backfill")
    await closes_without(stubborn, lambda: app.rooms._stop([stubborn.task, polite]))
    assert polite.cancelled() and left_behind(caplog, "sample-kb")


def connection() -> McpConnection:
    async def on_tools(server: str, tools: Any) -> None:
        return None

    return McpConnection(McpServerConfig(name="desk", transport="http", url="http://127.0.0.1:9/mcp"), on_tools)


async def test_an_mcp_supervisor_that_swallows_its_cancel_does_not_hold_the_close(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conn = connection()
    stubborn = Stubborn("mcp:desk")
    conn._task = stubborn.task
    await closes_without(stubborn, lambda: conn.close(BOUND_S, BOUND_S))
    assert conn.state == "closed"
    assert any(getattr(r, "mcp_server", None) == "desk" and "did not end" in r.getMessage() for r in caplog.records)


async def test_an_mcp_close_passes_the_callers_cancellation_on() -> None:
    """The close used to catch the caller's ``CancelledError`` with its own timeout and
    return normally: a shutdown cancelled while closing MCP went on as if not."""
    conn = connection()
    supervisor = asyncio.create_task(asyncio.Event().wait(), name="mcp:desk")  # ignores the stop, not a cancel
    conn._task = supervisor
    closer = asyncio.create_task(conn.close(GUARD_S))
    await until(conn._stop.is_set, "the close to ask the supervisor to stop")
    closer.cancel()
    await asyncio.wait({closer}, timeout=GUARD_S)
    assert closer.cancelled()
    await asyncio.wait({supervisor}, timeout=GUARD_S)
    assert supervisor.cancelled()
