"""Review of issue 23's restart from the request (``app/runs/recovery.py``): a run carried
on again and again from the same point is not carried on for ever.

A request that takes its process down every time (a crash no handler catches: out of
memory, a native library) leaves its run unfinished; with a restart from the request
(no checkpoint yet) or from a checkpoint, every replica that claims it would run it
again and go down in turn. Each attempt logs a ``run_resumed`` naming the point it
starts from, so the store's log counts them: after ``MAX_RESUMES_WITHOUT_PROGRESS``
from the same point the run ends ``run_interrupted`` with one ``message_complete``,
while progress (a newer checkpoint) starts the count again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from app.keyring import RunInputSealer
from app.runs.manager import RunManager
from app.runs.records import Caller, ChatInput, encode_run_input
from app.runs.recovery import (
    MAX_RESUMES_WITHOUT_PROGRESS,
    CannotResume,
    RestartFromInput,
    ResumeFromCheckpoint,
    plan_recovery,
)
from app.runs.state import RunState
from events import Event, RunResumed, RunStarted
from storage.records import NewRun, RunEvent, RunWrite, StoredRun
from storage.sqlite import open_sqlite_storage
from tests.support.procs import until

RUN, CONV = "run_r", "conv_r"
REASON = "its replica stopped; another took it over"
SEALER = RunInputSealer(os.urandom(32))
STARTED = RunStarted(run_id=RUN, conversation_id=CONV)


def resumed_from(point: int) -> RunResumed:
    return RunResumed(run_id=RUN, reason=REASON, checkpoint_seq=point, discarded=None, pending_tool_calls=0)


def logged(*events: Event) -> list[RunEvent]:
    return [RunEvent(i, e.name, e.to_json().decode()) for i, e in enumerate(events, 1)]


def stored(events: list[RunEvent], *, checkpoint_seq: int | None = None) -> StoredRun:
    return StoredRun(
        id=RUN,
        conversation_id=CONV,
        user_id="alice",
        context_type="knowledge",
        status="running",
        input=encode_run_input(ChatInput("crash me", "knowledge", {}), Caller("alice"), SEALER),
        checkpoint=RunState(system="s", tool_names=[], budget=1, messages=[]).encode() if checkpoint_seq else None,
        checkpoint_seq=checkpoint_seq or 0,
        last_seq=len(events),
    )


def test_a_run_restarted_from_its_request_too_often_is_not_restarted_again() -> None:
    below = logged(STARTED, *[resumed_from(0)] * (MAX_RESUMES_WITHOUT_PROGRESS - 1))
    assert isinstance(plan_recovery(stored(below), below, reason=REASON, sealer=SEALER), RestartFromInput)
    at_cap = logged(STARTED, *[resumed_from(0)] * MAX_RESUMES_WITHOUT_PROGRESS)
    plan = plan_recovery(stored(at_cap), at_cap, reason=REASON, sealer=SEALER)
    assert isinstance(plan, CannotResume)
    assert plan.why == (
        f"it was carried on {MAX_RESUMES_WITHOUT_PROGRESS} times from its request and never got further, "
        "so it is not tried again"
    )


def test_resumes_from_one_checkpoint_are_capped_but_progress_starts_the_count_again() -> None:
    # Resumed from checkpoint 1 again and again: capped.
    same = logged(STARTED, *[resumed_from(1)] * MAX_RESUMES_WITHOUT_PROGRESS)
    plan = plan_recovery(stored(same, checkpoint_seq=1), same, reason=REASON, sealer=SEALER)
    assert isinstance(plan, CannotResume) and "from its last checkpoint" in plan.why
    # The same number of resumes, but the run stored a newer checkpoint since (seq 5):
    # it got further, so it is carried on.
    moved = logged(STARTED, *[resumed_from(1)] * MAX_RESUMES_WITHOUT_PROGRESS, resumed_from(0))
    plan = plan_recovery(stored(moved, checkpoint_seq=len(moved)), moved, reason=REASON, sealer=SEALER)
    assert isinstance(plan, ResumeFromCheckpoint)


async def test_the_manager_ends_such_a_run_once_without_running_its_agent(tmp_path: Path) -> None:
    """A restart (no leases, as the embedded engine) finds the run restarted from its
    request ``MAX_RESUMES_WITHOUT_PROGRESS`` times: it ends ``run_interrupted`` with one
    ``message_complete`` and its agent is not run again."""
    storage = await open_sqlite_storage(tmp_path / "agent.sqlite3")
    calls: list[Any] = []

    async def agent(*args: Any, **kwargs: Any) -> None:
        calls.append((args, kwargs))

    manager = RunManager(store=storage.runs, agent=agent)
    try:
        await storage.runs.create(
            NewRun(
                id=RUN,
                conversation_id=CONV,
                user_id="alice",
                context_type="knowledge",
                input=encode_run_input(ChatInput("crash me", "knowledge", {}), Caller("alice")),
            )
        )
        await storage.runs.commit(
            RunWrite(
                RUN,
                CONV,
                "alice",
                events=logged(STARTED, *[resumed_from(0)] * MAX_RESUMES_WITHOUT_PROGRESS),
                status="running",
            )
        )
        assert await manager.recover() == 1
        run = manager._runs[RUN]
        await until(lambda: run.finished and run.durable == len(run.events), "the run's ending stored", 20)
        log = await storage.runs.events_after(RUN, 0)
        names = [e.event for e in log]
        assert names.count("message_complete") == 1 and names[-1] == "message_complete"
        assert names.count("run_started") == 1
        assert names[-2] == "error" and orjson.loads(log[-2].data)["code"] == "run_interrupted"
        assert orjson.loads(log[-1].data)["status"] == "failed"
        assert calls == []
        row = await storage.runs.get(RUN)
        assert row is not None and row.status == "failed"
    finally:
        await manager.shutdown(0)
        await storage.close()
