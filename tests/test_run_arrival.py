"""``RunRegistry.arrival``: a follower waiting for a run claimed here but not yet in memory
(``app.runs.follow._arriving``)."""

from __future__ import annotations

import asyncio

from app.runs.registry import RunRegistry
from app.runs.run import Run


def make(run_id: str) -> Run:
    return Run(id=run_id, conversation_id=f"conv_{run_id}", user_id="alice", context_type="knowledge")


async def test_a_registered_run_arrives_at_once_and_a_later_one_wakes_the_waiter() -> None:
    registry = RunRegistry()
    here = make("r1")
    registry.register(here)
    assert await registry.arrival("r1", timeout=30) is here
    waiting = asyncio.create_task(registry.arrival("r2", timeout=30))
    await asyncio.sleep(0)
    later = make("r2")
    registry.register(later)
    assert await asyncio.wait_for(waiting, 30) is later
    assert registry.arrivals == {}


async def test_a_lost_copy_is_not_the_run_arriving_the_claim_replacing_it_is() -> None:
    """A copy marked lost (the lease lapsed and a claim is reading the run back) made
    ``arrival`` return at once, so a follower asked again at once: a loop of heartbeats and
    store reads for as long as the claim's read took."""
    registry = RunRegistry()
    old = make("r1")
    registry.register(old)
    old.abandon()
    assert old.lost
    assert await registry.arrival("r1", timeout=0.01) is None  # waited its tick out
    waiting = asyncio.create_task(registry.arrival("r1", timeout=30))
    await asyncio.sleep(0)
    assert not waiting.done()
    new = make("r1")
    registry.register(new)
    assert await asyncio.wait_for(waiting, 30) is new
