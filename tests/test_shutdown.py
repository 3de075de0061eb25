"""Graceful shutdown: running runs finish (up to a deadline) into the durable run log,
and the next process replays them to a reconnecting client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from agenttools.core.registry import ToolRegistry
from app.config import Settings
from app.factory import create_app
from client import AgentClient
from llm.provider import ProviderHealth
from llm.types import ChatRequest, ContentDelta, MessageComplete, MessageStart, StreamEvent, Usage
from tests.support.server import serve_app

pytestmark = pytest.mark.slow  # shutdown deadlines waited out, the next process replays


class SlowProvider:
    """Streams ``chunks`` deltas with a pause between them; ``hold`` never finishes."""

    name = model = "slow"

    def __init__(self, chunks: int, pause_s: float, *, hold: bool = False) -> None:
        self.chunks, self.pause_s, self.hold = chunks, pause_s, hold
        self.started = asyncio.Event()

    async def stream_chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        yield MessageStart()
        self.started.set()
        for i in range(self.chunks):
            yield ContentDelta(f"part{i} ")
            await asyncio.sleep(self.pause_s)
        if self.hold:
            await asyncio.Event().wait()
        yield MessageComplete(stop_for_tool_use=False, usage=Usage(1, self.chunks))

    async def health(self) -> ProviderHealth:
        return ProviderHealth(True, "slow")

    async def aclose(self) -> None:
        return None


def settings_for(tmp_path: Path) -> Settings:
    return Settings.from_env({"AGENT_DB_PATH": str(tmp_path / "a.db"), "AGENT_MANDATORY_CONTEXTS": "none"})


async def start_run_then_stop(tmp_path: Path, provider: SlowProvider, deadline_s: float) -> str:
    app = create_app(settings_for(tmp_path), provider=provider, registry=ToolRegistry(), embedder=None,
                     shutdown_deadline_s=deadline_s)
    async with serve_app(app) as base:
        async with httpx.AsyncClient(timeout=30) as client:
            r = await client.post(f"{base}/v1/agent/runs", json={"message": "hi", "context_type": "knowledge"})
            assert r.status_code == 201
            run_id = r.json()["run_id"]
        await asyncio.wait_for(provider.started.wait(), 10)
    return str(run_id)


async def replay(tmp_path: Path, run_id: str, after: int = 0) -> list[str]:
    """The run's events after ``after``, read by the next process, as ``id:event:data``."""
    app = create_app(settings_for(tmp_path), provider=SlowProvider(0, 0), registry=ToolRegistry(), embedder=None)
    async with serve_app(app) as base, AgentClient(base) as agent:
        stream = agent.stream(run_id, after=after)
        return [f"{stream.last_event_id}:{e.name}:{e.to_json().decode()}" async for e in stream]


async def test_running_run_finishes_during_shutdown_and_replays_on_the_next_process(tmp_path: Path) -> None:
    run_id = await start_run_then_stop(tmp_path, SlowProvider(8, 0.02), deadline_s=30)
    events = await replay(tmp_path, run_id)
    assert [e.split(":")[0] for e in events] == [str(i) for i in range(1, len(events) + 1)]
    text = "".join(e for e in events if ":content_chunk:" in e)
    assert all(f"part{i} " in text for i in range(8))
    assert ":message_complete:" in events[-1] and '"status":"completed"' in events[-1]
    tail = await replay(tmp_path, run_id, after=3)
    assert tail == events[3:]


async def test_run_past_the_deadline_is_interrupted_and_carried_on_by_the_next_process(tmp_path: Path) -> None:
    run_id = await start_run_then_stop(tmp_path, SlowProvider(1, 0, hold=True), deadline_s=0.2)
    events = await replay(tmp_path, run_id)
    assert [e.split(":")[0] for e in events] == [str(i) for i in range(1, len(events) + 1)]
    kinds = [e.split(":")[1] for e in events]
    # The cut-off turn was shown, then discarded and run again by the next process.
    assert kinds.count("run_resumed") == 1 and kinds.count("message_complete") == 1
    resumed = next(e for e in events if ":run_resumed:" in e)
    assert '"discarded":{"from_seq"' in resumed
    assert kinds.index("content_chunk") < kinds.index("run_resumed")
    assert '"status":"completed"' in events[-1]
