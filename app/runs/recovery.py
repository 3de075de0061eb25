"""What to do with an unfinished run this process carries on: after a restart, a lease
take-over or a decided approval.

A decision only, taken from what the store holds (the run's row, its event log, its
checkpoint and its sealed input) so it can be read and tested apart from the machinery
that then starts the agent: the run already ended (its status was not written), it
cannot be carried on (and why, for its ``run_interrupted`` error), it never started (run
it from its input), it started but stored no checkpoint yet (run it again from its
input, after the ``run_started`` already delivered), or it resumes from its checkpoint
(with the ``run_resumed`` account, the partial model turn it discards, and whether it
was parked for an approval).

A run is taken over before its first checkpoint when its owner lapsed between
``run_started`` and the first step (history, tool selection, the prompt) — under load
with a short lease that is a real window (issue 23: 11 of 1,000 runs at a 0.5 s lease
ended ``run_interrupted``). Nothing of the request is lost then: it is stored with the
run (sealed, ``app/keyring.py``), and no tool ran, so the new owner runs it from the
start. Its ``run_resumed`` (``checkpoint_seq`` 0) tells the followers so, the same event
a resume from a checkpoint sends, and ``discarded`` names anything logged after
``run_started`` that the restart runs again, as it does for a cut-off model turn.

Carrying on is not tried for ever: a run resumed ``MAX_RESUMES_WITHOUT_PROGRESS`` times
from the same point (its ``run_resumed`` events say from where) without storing a newer
checkpoint ends ``run_interrupted`` — its request may be what takes processes down.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.runs.records import Caller, ChatInput, Sealer, decode_run_input
from app.runs.state import RunState
from events import Discarded, EventDecodeError, MessageComplete, RunResumed, RunStarted, parse_event
from storage.records import RunEvent, StoredRun


@dataclass(frozen=True, slots=True)
class AlreadyEnded:
    """Its ``message_complete`` is logged; only its status was never written."""

    status: str


@dataclass(frozen=True, slots=True)
class CannotResume:
    """It ends ``run_interrupted``; ``why`` goes into the error's message."""

    why: str


@dataclass(frozen=True, slots=True)
class StartFresh:
    """Admitted, never started: it runs from its stored input."""

    chat: ChatInput
    caller: Caller


@dataclass(frozen=True, slots=True)
class RestartFromInput:
    """Started, no checkpoint yet: it runs again from its stored input; ``resumed``
    goes after the ``run_started`` already logged (and delivered) instead of a second."""

    chat: ChatInput
    caller: Caller
    resumed: RunResumed


@dataclass(frozen=True, slots=True)
class ResumeFromCheckpoint:
    chat: ChatInput
    caller: Caller
    state: RunState
    resumed: RunResumed
    #: Parked for an approval: it was admitted before any run of the conversation here,
    #: and those wait for its ending — it must not wait for them.
    parked: bool
    #: Its cancel was asked while it was parked: the state already answers the waiting
    #: call, so it is not cancelled again.
    parked_cancel: bool


RecoveryPlan = AlreadyEnded | CannotResume | StartFresh | RestartFromInput | ResumeFromCheckpoint


def plan_recovery(stored: StoredRun, events: list[RunEvent], *, reason: str, sealer: Sealer | None) -> RecoveryPlan:
    """Decide how ``stored`` (with its logged ``events``) is carried on; ``reason`` is the
    account ``run_resumed`` gives (restart, take-over), replaced by the approval's own
    account for a run parked for one."""
    if events and events[-1].event == MessageComplete.name:
        return AlreadyEnded(status_of(events[-1]))
    cannot = _cannot_resume(stored, events)
    if cannot is not None:
        return CannotResume(cannot)
    assert stored.input is not None
    try:
        chat, caller = decode_run_input(
            stored.input, conversation_id=stored.conversation_id, user_id=stored.user_id, sealer=sealer
        )
    except ValueError as exc:  # sealed under a key no longer configured
        return CannotResume(str(exc))
    if stored.checkpoint is None:
        if not events:
            return StartFresh(chat, caller)
        return RestartFromInput(chat, caller, _restarted(stored, events[0].seq, reason))
    state = RunState.decode(stored.checkpoint)
    parked = state.awaiting is not None
    parked_cancel = parked and stored.cancel_requested
    if parked:
        if parked_cancel:
            state.cancel_waiting()  # ended by its agent, the waiting call answered
        reason = state.approval_account() or reason
    cut = unsettled_span(stored)
    discarded = (
        Discarded(from_seq=cut[0], to_seq=cut[1], reason="a model turn was cut off; it is run again")
        if cut is not None
        else None
    )
    resumed = RunResumed(
        run_id=stored.id,
        reason=reason,
        checkpoint_seq=stored.checkpoint_seq,
        discarded=discarded,
        pending_tool_calls=len(state.pending.calls) - len(state.pending.results) if state.pending else 0,
    )
    return ResumeFromCheckpoint(chat, caller, state, resumed, parked, parked_cancel)


def _restarted(stored: StoredRun, started_seq: int, reason: str) -> RunResumed:
    """``run_resumed`` for a run that starts again from its input: everything logged
    after its ``run_started`` (``started_seq``) is discarded."""
    cut = unsettled_span(stored, started_seq)
    discarded = (
        Discarded(
            from_seq=cut[0],
            to_seq=cut[1],
            reason="the run had no checkpoint yet; it starts again from its request",
        )
        if cut is not None
        else None
    )
    return RunResumed(
        run_id=stored.id,
        reason=f"{reason}; it had no checkpoint yet, so it starts again from its request",
        checkpoint_seq=0,
        discarded=discarded,
        pending_tool_calls=0,
    )


def unsettled_span(stored: StoredRun, started_seq: int = 1) -> tuple[int, int] | None:
    """The event ids of ``stored``'s log that a take-over now would discard and run
    again (its ``run_resumed.discarded``): everything after its checkpoint, or after its
    ``run_started`` (``started_seq``, the log's first event) when it stored none yet;
    ``None`` when its log ends on what it stored. The one rule for recovery and for a
    face that must not show what may yet be discarded (the AI SDK resume)."""
    settled = stored.checkpoint_seq if stored.checkpoint is not None else started_seq
    return (settled + 1, stored.last_seq) if stored.last_seq > settled else None


#: A run carried on this many times from the same point (the same checkpoint, or its
#: request when it stored none) without getting further is not carried on again: it ends
#: ``run_interrupted``. A request that takes its process down each time (a crash no
#: handler catches: out of memory, a native library) would otherwise be taken over by
#: every replica in turn, for ever. Progress (a new checkpoint) starts the count again,
#: so a long run taken over now and then is never cut short by it.
MAX_RESUMES_WITHOUT_PROGRESS = 3


def resumes_from(stored: StoredRun, events: list[RunEvent]) -> int:
    """How many times ``stored`` was already carried on from the point it would be now
    (its checkpoint's ``checkpoint_seq``, 0 without one): its logged ``run_resumed``
    events naming that point."""
    point = stored.checkpoint_seq if stored.checkpoint is not None else 0
    count = 0
    for ev in events:
        if ev.event != RunResumed.name:
            continue
        try:
            resumed = parse_event(ev.event, ev.data)
        except EventDecodeError:
            continue
        if isinstance(resumed, RunResumed) and resumed.checkpoint_seq == point:
            count += 1
    return count


def _cannot_resume(stored: StoredRun, events: list[RunEvent]) -> str | None:
    tries = resumes_from(stored, events)
    if tries >= MAX_RESUMES_WITHOUT_PROGRESS:
        start = "its last checkpoint" if stored.checkpoint is not None else "its request"
        return f"it was carried on {tries} times from {start} and never got further, so it is not tried again"
    if stored.input is None:
        if stored.checkpoint is None and events:
            return "it had no checkpoint yet and its request was not kept to start it again"
        return "its input was not kept"
    if stored.checkpoint is None and events and events[0].event != RunStarted.name:
        return f"it has no checkpoint and its log begins with {events[0].event}, not run_started"
    if stored.checkpoint is not None:
        try:
            RunState.decode(stored.checkpoint)
        except (ValueError, KeyError, TypeError) as exc:
            return f"its checkpoint is unreadable ({exc})"
    return None


def parked_account(stored: StoredRun) -> str | None:
    """Why a claimed run was parked for an approval, if it was (its checkpoint says)."""
    if stored.checkpoint is None:
        return None
    try:
        return RunState.decode(stored.checkpoint).approval_account()
    except (ValueError, KeyError, TypeError):
        return None


def status_of(event: RunEvent) -> str:
    """The status a stored ``message_complete`` names (``failed`` if it cannot be read)."""
    try:
        ended = parse_event(event.event, event.data)
    except EventDecodeError:
        return "failed"
    return ended.status if isinstance(ended, MessageComplete) else "failed"
