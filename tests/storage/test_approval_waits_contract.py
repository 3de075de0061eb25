"""Runs parked for an approval (both engines): parking hands the lease back and keeps
the deadline; of racing ways out (decisions, cancel, expiry) exactly one wins; a parked
run is never claimed until one has, then exactly one process takes it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson

from storage.records import NewRun, RunEvent, RunWrite


def leased(run_id: str, owner: str = "A") -> NewRun:
    return NewRun(run_id, f"c-{run_id}", "alice", "workflow", orjson.dumps({"message": "hi"}),
                  lease_owner=owner, lease_s=30.0)


async def park(runs: Any, run_id: str, wait_s: float, owner: str = "A") -> int:
    """Park ``run_id`` as its owner's step would; the checkpoint's seq."""
    await runs.commit(RunWrite(
        run_id, f"c-{run_id}", "alice", events=[RunEvent(1, "approval_required", "{}")],
        checkpoint=b'{"parked": 1}', checkpoint_seq=1, status="waiting_approval", wait_s=wait_s,
        lease_owner=owner, lease_s=30.0,
    ))
    stored = await runs.get(run_id)
    assert stored.status == "waiting_approval"
    return int(stored.checkpoint_seq)


async def test_a_parked_run_is_held_by_nobody_and_claimed_only_once_decided(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(leased("p1"))
    seq = await park(runs, "p1", 60)
    assert await runs.claim("B", 5) == []  # waiting: nobody carries it
    assert await runs.renew("A", ["p1"], 30) == set()  # its lease was handed back
    assert not await runs.claim_one("p1", "B", 30)
    assert not await runs.decide("p1", "mallory", seq, b"{}")  # only its owner
    assert not await runs.decide("p1", "alice", seq + 1, b"{}")  # not the checkpoint read
    results = await asyncio.gather(*(runs.decide("p1", "alice", seq, b'{"d": %d}' % i) for i in range(4)))
    assert sorted(results) == [False, False, False, True]
    stored = await runs.get("p1")
    assert stored.status == "interrupted" and stored.checkpoint in {b'{"d": %d}' % i for i in range(4)}
    taken = await asyncio.gather(*(runs.claim_one("p1", f"P{i}", 30) for i in range(3)))
    assert sorted(taken) == [False, False, True]
    assert not await runs.decide("p1", "alice", seq, b"{}")  # a second decision loses


async def test_an_expired_wait_becomes_claimable_and_a_cancel_frees_a_parked_run(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(leased("short"))
    await runs.create(leased("long"))
    await runs.create(leased("cancelled"))
    await park(runs, "short", 0.2)
    long_seq = await park(runs, "long", 60)
    await park(runs, "cancelled", 60)
    expired: list[str] = []
    deadline = time.monotonic() + 10
    while not expired:  # the deadline runs out on the database's clock
        expired = await runs.expire_waits()
        assert time.monotonic() < deadline, "the wait never expired"
        await asyncio.sleep(0.02)
    assert expired == ["short"]
    assert (await runs.get("long")).status == "waiting_approval"
    stored = await runs.request_cancel("cancelled")
    assert stored.status == "interrupted" and stored.cancel_requested
    assert sorted(r.id for r in await runs.claim("B", 5)) == ["cancelled", "short"]
    assert await runs.decide("long", "alice", long_seq, b"{}")
