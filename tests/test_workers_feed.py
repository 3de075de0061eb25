"""Workers on one SQLite file wake each other (``storage/sqlite/worker_feed.py``), through
real processes (``agentchat serve --workers 2``; helpers of ``tests/test_workers.py``).

The followers' safety poll is set to an hour (``AGENT_WORKERS_SAFETY_POLL_S``): whatever
a follower on worker B receives after its first look at the log came through the wake-up
from worker A, never from reading the file on a timer.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import orjson
import pytest

from tests.fakes.paced_ollama import run_body, side_effect_marker
from tests.support.procs import Trace, replay, until
from tests.test_workers import follow_on, pinned_clients, saw, start_on, workers

pytestmark = pytest.mark.slow

NO_SAFETY_POLL = {"AGENT_WORKERS_SAFETY_POLL_S": "3600"}


async def test_a_follower_on_another_worker_gets_every_token_without_polling(tmp_path: Path) -> None:
    async with (
        workers(tmp_path, "sqlite", None, **NO_SAFETY_POLL) as (tools, server),
        pinned_clients(server.base, 2) as pins,
    ):
        (a, a2), followers_on_b = pins.values()
        tags = [f"wake-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)]
        held = [tools.proxy.hold(side_effect_marker(tag)) for tag in tags]
        traces = []
        for tag in tags:
            started = await start_on(a, run_body(tag))
            traces.append(Trace(tag=tag, run_id=started["run_id"], stream_url=started["stream_url"]))
        following = [asyncio.create_task(follow_on(b, t)) for b, t in zip(followers_on_b, traces, strict=True)]
        # B has looked at the log and waits; everything from here on is written on A.
        await until(
            lambda: all(saw(t, "tool_call_start") for t in traces) and all(h.reached.is_set() for h in held),
            "B following both of A's runs, each held mid-way",
            60,
        )
        seen = [len(t.frames) for t in traces]
        for h in held:
            h.release.set()
        await asyncio.wait_for(asyncio.gather(*following), 60)

        for trace, before in zip(traces, seen, strict=True):
            assert orjson.loads(trace.frames[-1][2])["status"] == "completed", trace.frames[-3:]
            assert len(trace.frames) - before > 30, "the tokens after the hold did not come over the wake-up"
            status, stored = await replay(a2.http, a2.base, trace.stream_url or "")
            assert status == 200 and stored == trace.frames  # ids 1..N once each, as stored
            assert [f[0] for f in stored] == [str(i) for i in range(1, len(stored) + 1)]
        assert a.replica != followers_on_b[0].replica and server.running
