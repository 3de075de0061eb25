"""What a live run's step holds while it waits in the store's writer queue.

Under load thousands of steps wait there at once (500 streams on one worker), so what
each one keeps alive is per-stream memory (issue 22: a wrapper that held every leased
step on SQLite cost +25-30 % peak RSS per stream). Only an engine that checks the
step's lease needs to map its failure, and only then may the queue hold the step.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any

import pytest

from app.runs.run import Run
from events import ContentChunk
from storage.errors import LeaseLost, StorageUnavailable
from storage.records import NewRun, RunWrite

Handlers = tuple[Callable[[], None] | None, Callable[[BaseException], None] | None]


def _holds_a_step(handlers: Handlers) -> bool:
    """Whether a ``RunWrite`` is reachable from the queued handlers (closures, cells,
    bound methods), not counting what the run itself holds, nor module globals: every
    function reaches its module's globals and through them every module and the whole
    heap (in a worker that has run many test files, millions of objects: ~5-10 s a
    walk), and a step a module held would be no step the queue holds."""
    seen: set[int] = set()
    todo: list[object] = [h for h in handlers if h is not None]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, Run | type | ModuleType):
            continue
        seen.add(id(obj))
        if isinstance(obj, RunWrite):
            return True
        referents = gc.get_referents(obj)
        if isinstance(obj, FunctionType):
            referents = [r for r in referents if r is not obj.__globals__]
        todo.extend(referents)
    return False


async def _queued_handlers(storage: Any, *, guard_leases: bool) -> tuple[Run, list[Handlers]]:
    store = storage.runs
    store.guard_leases = guard_leases
    await store.create(
        NewRun(
            id="run_1",
            conversation_id="conv_1",
            user_id="alice",
            context_type="knowledge",
            input=b"{}",
            lease_owner="me",
            lease_s=30.0,
        )
    )
    queued: list[Handlers] = []
    enqueue = store.sql.enqueue

    def spy(statements: Any, *, on_commit: Any = None, on_fail: Any = None) -> None:
        queued.append((on_commit, on_fail))
        enqueue(statements, on_commit=on_commit, on_fail=on_fail)

    store.sql.enqueue = spy
    run = Run(id="run_1", conversation_id="conv_1", user_id="alice", context_type="knowledge", log=store)
    run.lease_owner, run.lease_s = "me", 30.0
    await run.emit_step([ContentChunk(chunk="token ")])
    return run, queued


async def test_a_step_waiting_on_one_process_holds_no_copy_of_itself(storage: Any) -> None:
    run, queued = await _queued_handlers(storage, guard_leases=False)
    assert len(queued) == 1 and run.durable == 1
    assert not _holds_a_step(queued[0])


async def test_a_step_whose_lease_is_checked_still_maps_a_refusal_to_lease_lost(storage: Any) -> None:
    # Workers sharing the file check every leased step's lease: a refusal must reach the
    # run as LeaseLost (it abandons the run quietly instead of failing it).
    run, queued = await _queued_handlers(storage, guard_leases=True)
    assert len(queued) == 1 and run.durable == 1
    assert _holds_a_step(queued[0])
    claimed = await storage.runs.claim("other", 30.0, expired_only=False)
    assert [r.id for r in claimed] == ["run_1"]
    fut = run.emit_step([ContentChunk(chunk="more ")])
    with pytest.raises(LeaseLost):
        await fut
    assert run.lost and run.durable == 1


async def test_a_run_taken_over_makes_up_no_ending_when_a_later_failure_reaches_it(storage: Any) -> None:
    # Issue 23 item 3 (--workers 2 under load): a worker whose run was taken over still
    # heard of a failed write of it, and showed its own followers an error and a failed
    # ending under ids 1 and 2 — events no log holds (the new owner completed the run).
    run, _ = await _queued_handlers(storage, guard_leases=True)
    await storage.runs.claim("other", 30.0, expired_only=False)
    with pytest.raises(LeaseLost):
        await run.emit_step([ContentChunk(chunk="more ")])
    assert run.lost
    rescued: list[Any] = []
    run.on_storage_failure = lambda r, events: rescued.append(events)
    shown = list(run.events)
    run.storage_lost(StorageUnavailable("database write failed after 12 attempts: database is locked"))
    assert run.events == shown and run.durable == 1 and run.storage_error is None and not rescued
    assert [e.seq for e in await storage.runs.events_after("run_1", 0)] == [1]
