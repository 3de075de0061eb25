"""RunStore leases (both engines): a run is claimed by one process at a time, renewed
while it runs, taken over once its lease expires, and given up at shutdown."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from storage.errors import LeaseLost
from storage.records import NewRun, RunEvent, RunWrite


def leased(run_id: str, owner: str | None, lease_s: float = 30.0) -> NewRun:
    return NewRun(run_id, f"c-{run_id}", "alice", "knowledge", orjson.dumps({"message": "hi"}),
                  lease_owner=owner, lease_s=lease_s)


async def claim_until(runs: Any, owner: str, run_id: str, timeout: float = 10) -> dict[str, Any]:
    """Claim as ``owner`` until ``run_id`` is among the runs taken; return every run taken
    meanwhile. A lease runs out on the database's clock: wait for that, not a fixed time
    (a claim that finds nothing expired changes nothing)."""
    claimed: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    while True:
        claimed.update({r.id: r for r in await runs.claim(owner, 5)})
        if run_id in claimed:
            return claimed
        assert time.monotonic() < deadline, f"the lease of {run_id} never ran out"
        await asyncio.sleep(0.02)


async def test_only_expired_or_unleased_runs_are_claimed(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(leased("held", "A"))
    await runs.create(leased("never", None))
    assert [r.id for r in await runs.claim("B", 5)] == ["never"]
    assert await runs.claim("C", 5) == []  # B holds it now
    # Made only now: a 0.2 s lease made with the others ran out before C's claim on a
    # loaded machine, and C took it.
    await runs.create(leased("short", "A", lease_s=0.2))
    assert list(await claim_until(runs, "B", "short")) == ["short"]
    assert await runs.renew("A", ["held", "short"], 30) == {"held"}
    # At start-up of a lone process: every unfinished run, whoever held it.
    assert sorted(r.id for r in await runs.claim("D", 5, expired_only=False)) == ["held", "never", "short"]
    await runs.release_leases("D", ["held"])
    assert [r.id for r in await runs.claim("E", 5)] == ["held"]


async def test_concurrent_claims_take_each_run_once(store_engine: Any) -> None:
    runs = store_engine.runs
    for i in range(12):
        await runs.create(leased(f"r{i}", None))
    claimed = await asyncio.gather(*(runs.claim(f"P{i}", 5) for i in range(4)))
    ids = [r.id for batch in claimed for r in batch]
    assert sorted(ids) == sorted(f"r{i}" for i in range(12))


async def test_a_step_of_a_process_that_lost_the_lease_stores_nothing(store_engine: Any) -> None:
    runs = store_engine.runs
    if store_engine.engine != "postgres":  # the check several processes on one file turn on
        runs.guard_leases = True
    await runs.create(leased("r", "A", lease_s=0.1))
    claimed = await claim_until(runs, "B", "r")
    assert list(claimed) == ["r"]
    failures: list[BaseException] = []
    done = asyncio.Event()
    step = RunWrite("r", "c-r", "alice", events=[RunEvent(1, "content_chunk", "{}")], lease_owner="A", lease_s=5)
    runs.write(step, on_commit=done.set, on_fail=lambda exc: (failures.append(exc), done.set()))
    ok = RunWrite("r", "c-r", "alice", events=[RunEvent(1, "run_resumed", "{}")], lease_owner="B", lease_s=5,
                  lease_epoch=claimed["r"].lease_epoch)
    await runs.commit(ok)
    await asyncio.wait_for(done.wait(), 10)
    assert len(failures) == 1 and isinstance(failures[0], LeaseLost)
    assert [e.event for e in await runs.events_after("r", 0)] == ["run_resumed"]


async def test_a_direct_commit_under_a_lost_lease_raises_lease_lost(store_engine: Any) -> None:
    """The rescue writer (a failed run's ending) commits directly; once another process
    took the run over it must get ``LeaseLost`` and store nothing, not overwrite the log."""
    runs = store_engine.runs
    if store_engine.engine != "postgres":  # the check several processes on one file turn on
        runs.guard_leases = True
    await runs.create(leased("r", "A", lease_s=0.1))
    epoch = (await claim_until(runs, "B", "r"))["r"].lease_epoch
    await runs.commit(RunWrite("r", "c-r", "alice", events=[RunEvent(1, "run_resumed", "{}")], lease_owner="B",
                               lease_s=5, lease_epoch=epoch))
    stale = RunWrite("r", "c-r", "alice", events=[RunEvent(2, "message_complete", "{}")], status="failed", finished=True,
                     lease_owner="A", lease_s=5)
    with pytest.raises(LeaseLost):
        await runs.commit(stale)
    assert [e.event for e in await runs.events_after("r", 0)] == ["run_resumed"]


async def test_a_claim_says_when_the_lease_it_replaced_had_expired(store_engine: Any) -> None:
    """What the take-over latency metric measures from (``lease_expired_at``)."""
    runs = store_engine.runs
    before = time.time()
    await runs.create(leased("dead", "A", lease_s=0.2))
    await runs.create(leased("never", None))
    claimed = await claim_until(runs, "B", "dead")  # "never" at once, "dead" once its lease ran out
    assert claimed["never"].lease_expired_at is None
    expired_at = claimed["dead"].lease_expired_at
    # (SQLite's clock in SQL is julianday-based: milliseconds)
    assert expired_at is not None and before + 0.19 <= expired_at <= time.time()
    # Read any other way, a run carries no such value.
    stored = await runs.get("dead")
    assert stored is not None and stored.lease_expired_at is None


async def test_renewing_never_waits_for_a_run_in_the_middle_of_a_step(store_engine: Any) -> None:
    """A renewal that waited for a row a step holds deadlocked with the writer (each
    locking the same runs in another order), and PostgreSQL broke the cycle only after
    its ``deadlock_timeout``: a second of delay for every follower of those runs."""
    if store_engine.engine != "postgres":
        pytest.skip("one writer per SQLite file: a renewal and a step never overlap")
    import psycopg

    runs = store_engine.runs
    for rid in ("busy", "idle", "gone"):
        await runs.create(leased(rid, "A"))
    await runs.release_leases("A", ["gone"])
    assert [r.id for r in await runs.claim("B", 5)] == ["gone"]
    async with await psycopg.AsyncConnection.connect(store_engine.db.url) as step:
        await step.execute("SELECT agentchat_hold_lease('busy', 'A', 30)")  # a step in flight
        held = await asyncio.wait_for(runs.renew("A", ["busy", "idle", "gone"], 30), 2)
        assert held == {"busy", "idle"}
        await step.rollback()
    assert await runs.renew("A", ["busy", "idle", "gone"], 30) == {"busy", "idle"}


# --- fencing (issue 23): a per-claim lease epoch ----------------------------------------


def _guarded(store_engine: Any) -> Any:
    runs = store_engine.runs
    if store_engine.engine != "postgres":  # the check several processes on one file turn on
        runs.guard_leases = True
    return runs


def _step(seq: int, event: str, owner: str, epoch: int, *, finished: bool = False, lease_s: float = 5) -> RunWrite:
    return RunWrite("r", "c-r", "alice", events=[RunEvent(seq, event, "{}")], lease_owner=owner, lease_s=lease_s,
                    lease_epoch=epoch, status="completed" if finished else None, finished=finished)


async def _write(runs: Any, step: RunWrite) -> BaseException | None:
    """Queue ``step`` in the writer as a run's copy does; its failure, or ``None``."""
    result: list[BaseException | None] = []
    done = asyncio.Event()
    runs.write(step, on_commit=lambda: (result.append(None), done.set()),
               on_fail=lambda exc: (result.append(exc), done.set()))
    await asyncio.wait_for(done.wait(), 10)
    return result[0]


async def test_a_claim_that_changes_hands_mints_a_new_epoch_a_lapsed_owner_keeps_its_own(store_engine: Any) -> None:
    runs = store_engine.runs
    await runs.create(leased("r", "A", lease_s=0.1))
    first = (await claim_until(runs, "A", "r"))["r"].lease_epoch  # A takes its own lapsed lease back
    assert first == 0  # nobody claimed in between: the copy A still runs is the current one
    await runs.release_leases("A", ["r"])
    to_b = (await claim_until(runs, "B", "r"))["r"].lease_epoch
    await runs.release_leases("B", ["r"])
    back_to_a = (await claim_until(runs, "A", "r"))["r"].lease_epoch
    assert first < to_b < back_to_a
    await runs.release_leases("A", ["r"])
    assert await runs.claim_one_epoch("r", "C", 5) == back_to_a + 1
    assert await runs.claim_one_epoch("r", "D", 5) is None  # C holds it


async def test_a_stale_copy_in_the_owners_own_process_is_refused_after_an_intervening_claim(
    store_engine: Any,
) -> None:
    """The split-brain of issue 23: A's lease lapses, B claims the run, B's lease lapses
    and A takes the run back — A's *old* copy (same owner) must store nothing more: its
    queued token, its ending. Only the copy of A's new claim writes; the log is gap-free
    and ends once."""
    runs = _guarded(store_engine)
    await runs.create(leased("r", "A", lease_s=0.1))
    old = 0  # admission's claim
    # A's old copy writes on a short lease (each step renews it to now + lease_s): it
    # lapses in 0.1 s instead of making B's claim wait out 5 s of real time.
    assert await _write(runs, _step(1, "run_started", "A", old, lease_s=0.1)) is None
    assert await _write(runs, _step(2, "content_chunk", "A", old, lease_s=0.1)) is None
    b = (await claim_until(runs, "B", "r"))["r"].lease_epoch
    await runs.release_leases("B", ["r"])  # B stalls; its lease is given up / lapses
    new = (await claim_until(runs, "A", "r"))["r"].lease_epoch
    assert new not in (old, b)
    # The stale copy (A, old epoch) still has steps queued: refused, nothing stored.
    stale = [_step(3, "content_chunk", "A", old), _step(4, "message_complete", "A", old, finished=True)]
    refused = [await _write(runs, s) for s in stale]
    assert all(isinstance(e, LeaseLost) for e in refused)
    # B's copy too (it lost the run to A's new claim).
    assert isinstance(await _write(runs, _step(3, "content_chunk", "B", b)), LeaseLost)
    # The copy of A's new claim carries the run on from the log and ends it once.
    for seq, event in ((3, "run_resumed"), (4, "content_chunk"), (5, "content_chunk")):
        assert await _write(runs, _step(seq, event, "A", new)) is None
    assert await _write(runs, _step(6, "message_complete", "A", new, finished=True)) is None
    log = await runs.events_after("r", 0)
    assert [e.seq for e in log] == [1, 2, 3, 4, 5, 6]  # gap-free
    assert [e.event for e in log].count("message_complete") == 1
    stored = await runs.get("r")
    assert stored is not None and stored.status == "completed"


async def test_a_direct_commit_of_a_stale_copy_raises_lease_lost(store_engine: Any) -> None:
    """The rescue writer of a stale copy (same owner, older claim) must not write a
    failure over the current copy's log."""
    runs = _guarded(store_engine)
    await runs.create(leased("r", "A", lease_s=0.1))
    await claim_until(runs, "B", "r")
    await runs.release_leases("B", ["r"])
    new = (await claim_until(runs, "A", "r"))["r"].lease_epoch
    with pytest.raises(LeaseLost):
        await runs.commit(_step(1, "message_complete", "A", 0, finished=True))
    await runs.commit(_step(1, "run_resumed", "A", new))
    assert [e.event for e in await runs.events_after("r", 0)] == ["run_resumed"]


async def test_a_claim_of_a_run_another_process_held_counts_a_resume(store_engine: Any) -> None:
    """``RunInfo.resumes`` (``GET /v1/agent/runs/{id}``) counts the take-overs, written by
    the claim itself: a dead process's run (its lease expired), a run handed back at
    shutdown. Not a run nobody held (never leased, or a parked approval handed back), nor
    a process taking back its own lapsed lease."""
    runs, history = store_engine.runs, store_engine.history

    async def resumes(run_id: str) -> int:
        view = await history.run("alice", run_id)
        assert view is not None
        return int(view.resumes)

    await runs.create(leased("dead", "A", lease_s=0.1))
    await runs.create(leased("never", None))
    claimed = await claim_until(runs, "B", "dead")  # A died: B takes it over
    assert claimed["dead"].resumes == 1 and await resumes("dead") == 1
    assert await resumes("never") == 0  # nobody held it: started, not resumed
    await runs.claim("B", 5, expired_only=False)  # B takes back its own lease: no resume
    assert await resumes("dead") == 1
    await runs.claim("C", 5, expired_only=False)  # a lone process's start-up takes everything
    assert await resumes("dead") == 2 and await resumes("never") == 1
    await runs.release_leases("C", ["dead"])  # C stops; the next one carries it on
    assert [r.id for r in await runs.claim("D", 5)] == ["dead"]
    assert await resumes("dead") == 3
