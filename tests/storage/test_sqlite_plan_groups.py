"""SQLite's group-committed plans (issue 23, ``storage.sqlite.dialect.SqliteSql``):
concurrent admissions share transactions, yet each keeps its own outcome — the run cap
is still counted in the storing transaction, a refused plan undoes only its own
statements, a caller cancelled before its group starts stores nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest

from storage.errors import ConversationBusy, StorageUnavailable, TooManyRuns
from storage.records import UNFINISHED, Admitted, NewRun
from tests.support.sqlite_lock import sqlite_file_locked
from tests.support.storage import opened_storage

CAP = 8


def new_run(
    run_id: str, *, conv: str | None = None, user: str = "alice", cap: int | None = CAP, multitask: str = "enqueue"
) -> NewRun:
    return NewRun(
        run_id,
        conv or f"c-{run_id}",
        user,
        "workflow",
        orjson.dumps({"message": run_id}),
        multitask=multitask,
        max_unfinished_per_user=cap,
    )  # type: ignore[arg-type]


async def test_a_burst_of_admissions_is_few_transactions_and_the_cap_holds(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "groups.db") as storage:
        sql = storage.runs.sql
        groups0 = sql.plan_groups
        attempts = [new_run(f"a{i}") for i in range(50)] + [new_run(f"b{i}", user="bob") for i in range(3)]
        outcomes = await asyncio.gather(*(storage.runs.create(r) for r in attempts), return_exceptions=True)
        alice = outcomes[:50]
        assert sum(1 for o in alice if isinstance(o, Admitted)) == CAP
        assert all(isinstance(o, TooManyRuns) for o in alice if not isinstance(o, Admitted))
        assert all(isinstance(o, Admitted) for o in outcomes[50:])  # bob has his own cap
        assert sql.plan_groups - groups0 < len(attempts)  # shared transactions
        stored = [await storage.runs.get(r.id) for r in attempts]
        admitted = {r.id for r, o in zip(attempts, outcomes, strict=True) if isinstance(o, Admitted)}
        # Exactly the admitted runs are stored: a refused plan left nothing behind.
        assert {s.id for s in stored if s is not None} == admitted
        assert all(s.status in UNFINISHED for s in stored if s is not None)


async def test_a_refused_plan_in_a_group_undoes_only_itself(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "groups.db") as storage:
        await storage.runs.create(new_run("first", conv="busy", cap=None))
        outcomes = await asyncio.gather(
            storage.runs.create(new_run("before", conv="free-1", cap=None)),
            storage.runs.create(new_run("rejected", conv="busy", cap=None, multitask="reject")),
            storage.runs.create(new_run("after", conv="busy", cap=None)),  # enqueued behind "first"
            return_exceptions=True,
        )
        assert outcomes[0] == Admitted([]) and isinstance(outcomes[1], ConversationBusy)
        assert outcomes[2] == Admitted(["first"])
        assert await storage.runs.get("rejected") is None
        assert await storage.runs.get("before") is not None and await storage.runs.get("after") is not None


async def test_a_caller_cancelled_before_its_group_stores_nothing(tmp_path: Path) -> None:
    async with opened_storage(tmp_path / "groups.db") as storage:
        kept = asyncio.ensure_future(storage.runs.create(new_run("kept", cap=None)))
        dropped = asyncio.ensure_future(storage.runs.create(new_run("dropped", cap=None)))
        await asyncio.sleep(0)  # both plans asked for; the group has not started
        dropped.cancel()
        assert await kept == Admitted([])
        await asyncio.gather(dropped, return_exceptions=True)
        assert dropped.cancelled()
        assert await storage.runs.get("kept") is not None and await storage.runs.get("dropped") is None


async def test_a_failed_group_fails_every_plan_in_it_loudly(tmp_path: Path) -> None:
    """The group's transaction cannot run (the storage was closed): each caller hears it,
    none waits forever."""
    async with opened_storage(tmp_path / "groups.db") as storage:
        await storage.close()
        outcomes = await asyncio.wait_for(
            asyncio.gather(
                *(storage.runs.create(new_run(f"r{i}", cap=None)) for i in range(3)), return_exceptions=True
            ),
            30,
        )
        assert all(isinstance(o, Exception) for o in outcomes), outcomes


async def test_a_plan_with_a_deadline_fails_there_while_one_without_rides_out_a_locked_file(tmp_path: Path) -> None:
    """A request's admission (a ``deadline``: its storage budget) is refused with
    ``StorageUnavailable`` once the budget is spent and is not stored, even while the
    writer is busy with a group riding out the lock for the write retry (a lease, a
    cancel: no deadline), which commits once the lock is lifted. Two budgets in one
    group: the earlier one ends first, the later one still gets the rest of its own."""
    async with opened_storage(tmp_path / "groups.db") as storage:
        assert storage.db.opts.write_retry_s >= 5, "the default write retry must outlast the budgets here"
        async with sqlite_file_locked(tmp_path / "groups.db"):
            rides = asyncio.ensure_future(storage.runs.create(new_run("rides")))
            await asyncio.sleep(0)  # its group starts first and holds the writer
            now = time.monotonic()
            early = asyncio.ensure_future(storage.runs.create(new_run("early"), deadline=now + 0.3))
            later = asyncio.ensure_future(storage.runs.create(new_run("later"), deadline=now + 1.5))
            with pytest.raises(StorageUnavailable):
                await asyncio.wait_for(early, 20)
            assert not later.done(), "the later budget ended with the earlier one"
            with pytest.raises(StorageUnavailable):
                await asyncio.wait_for(later, 20)
            assert time.monotonic() >= now + 1.5, "the later plan did not get the rest of its budget"
            assert not rides.done(), "the plan without a deadline gave up within the write retry"
        admitted = await asyncio.wait_for(rides, 30)
        assert isinstance(admitted, Admitted)
        assert await storage.runs.get("rides") is not None
        assert await storage.runs.get("early") is None and await storage.runs.get("later") is None


async def test_titles_join_the_admissions_group_and_never_overwrite(tmp_path: Path) -> None:
    """Each new conversation is titled once after its first run (``app/history.py``): a
    burst of titles and admissions shares transactions, each title still only where none
    was set (issue 23: a title was a transaction of its own)."""
    async with opened_storage(tmp_path / "groups.db") as storage:
        sql, history = storage.runs.sql, storage.history
        for i in range(20):
            await storage.runs.create(new_run(f"t{i}", cap=None))
        assert await history.set_title_if_unset("alice", "c-t0", "Renamed by the user") is True
        groups0, grouped0 = sql.plan_groups, sql.plans_grouped
        titled = await asyncio.gather(
            *(history.set_title_if_unset("alice", f"c-t{i}", f"Title {i}") for i in range(20)),
            *(storage.runs.create(new_run(f"n{i}", cap=None)) for i in range(20)),
        )
        assert titled[:20] == [False] + [True] * 19  # the title set first stays
        assert sql.plans_grouped - grouped0 == 40 and sql.plan_groups - groups0 < 40
        first = await history.conversation("alice", "c-t0")
        assert first is not None and first.title == "Renamed by the user"
        for i in range(1, 20):
            stored = await history.conversation("alice", f"c-t{i}")
            assert stored is not None and stored.title == f"Title {i}"
        assert await history.set_title_if_unset("bob", "c-t1", "Not his") is False  # another user's id: nothing
