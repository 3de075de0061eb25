"""``app.runs.recovery.plan_recovery``: what carrying a stored unfinished run on means,
decided from the store's row and log alone (issue 23: a run taken over before its first
checkpoint starts again from its request instead of ending ``run_interrupted``)."""

from __future__ import annotations

import os

from app.keyring import RunInputSealer
from app.runs.records import Caller, ChatInput, encode_run_input
from app.runs.recovery import (
    AlreadyEnded,
    CannotResume,
    RestartFromInput,
    ResumeFromCheckpoint,
    StartFresh,
    plan_recovery,
)
from app.runs.state import RunState
from events import ContentChunk, Event, MessageComplete, RunStarted, TokenUsage
from storage.records import RunEvent, StoredRun

RUN, CONV = "run_p", "conv_p"
REASON = "its replica stopped; another took it over"
SEALER = RunInputSealer(os.urandom(32))


def stored(*, last_seq: int, checkpoint_seq: int = 0, checkpoint: bytes | None = None, kept: bool = True) -> StoredRun:
    plain = encode_run_input(ChatInput("again, please", "knowledge", {"k": 1}), Caller("alice", "Bearer t"), SEALER)
    return StoredRun(
        id=RUN,
        conversation_id=CONV,
        user_id="alice",
        context_type="knowledge",
        status="running",
        input=plain if kept else None,
        checkpoint=checkpoint,
        checkpoint_seq=checkpoint_seq,
        last_seq=last_seq,
    )


def logged(*events: Event) -> list[RunEvent]:
    return [RunEvent(i, e.name, e.to_json().decode()) for i, e in enumerate(events, 1)]


STARTED = RunStarted(run_id=RUN, conversation_id=CONV)


def test_a_run_never_started_starts_from_its_input() -> None:
    plan = plan_recovery(stored(last_seq=0), [], reason=REASON, sealer=SEALER)
    assert isinstance(plan, StartFresh)
    assert plan.chat.message == "again, please" and plan.chat.context == {"k": 1}
    assert plan.caller == Caller("alice", "Bearer t")  # the credentials, opened with the key


def test_a_run_with_run_started_and_no_checkpoint_restarts_from_its_input() -> None:
    plan = plan_recovery(stored(last_seq=1), logged(STARTED), reason=REASON, sealer=SEALER)
    assert isinstance(plan, RestartFromInput)
    assert plan.chat.message == "again, please" and plan.caller.authorization == "Bearer t"
    assert plan.resumed.checkpoint_seq == 0 and plan.resumed.discarded is None
    assert plan.resumed.pending_tool_calls == 0
    assert plan.resumed.reason.startswith(REASON) and "starts again from its request" in plan.resumed.reason


def test_events_logged_after_run_started_without_a_checkpoint_are_discarded() -> None:
    events = logged(STARTED, ContentChunk(chunk="par"), ContentChunk(chunk="tial"))
    plan = plan_recovery(stored(last_seq=3), events, reason=REASON, sealer=SEALER)
    assert isinstance(plan, RestartFromInput) and plan.resumed.discarded is not None
    assert (plan.resumed.discarded.from_seq, plan.resumed.discarded.to_seq) == (2, 3)


def test_without_its_request_it_cannot_restart_and_says_why() -> None:
    plan = plan_recovery(stored(last_seq=1, kept=False), logged(STARTED), reason=REASON, sealer=SEALER)
    assert isinstance(plan, CannotResume)
    assert plan.why == "it had no checkpoint yet and its request was not kept to start it again"


def test_a_request_sealed_under_another_key_cannot_restart() -> None:
    plan = plan_recovery(stored(last_seq=1), logged(STARTED), reason=REASON, sealer=RunInputSealer(os.urandom(32)))
    assert isinstance(plan, CannotResume) and "another key" in plan.why


def test_a_checkpoint_resumes_as_before() -> None:
    state = RunState(system="s", tool_names=[], budget=1, messages=[])
    events = logged(STARTED, ContentChunk(chunk="cut"))
    plan = plan_recovery(
        stored(last_seq=2, checkpoint_seq=1, checkpoint=state.encode()), events, reason=REASON, sealer=SEALER
    )
    assert isinstance(plan, ResumeFromCheckpoint) and not plan.parked
    assert plan.resumed.checkpoint_seq == 1 and plan.resumed.reason == REASON
    assert plan.resumed.discarded is not None and (plan.resumed.discarded.from_seq, plan.resumed.discarded.to_seq) == (
        2,
        2,
    )


def test_a_logged_ending_is_only_a_missing_status() -> None:
    ended = MessageComplete(
        status="completed", run_id=RUN, conversation_id=CONV, turns=1, usage=TokenUsage(input_tokens=1, output_tokens=1)
    )
    plan = plan_recovery(stored(last_seq=2), logged(STARTED, ended), reason=REASON, sealer=SEALER)
    assert plan == AlreadyEnded("completed")
