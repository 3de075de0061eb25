"""What one run carries through the agent's steps: its scope (the run, the request, the
caller, the tool context, the state), the failure that ends it with a code, and the one
way a step is stored.

Apart from the loop so the loop's steps and the run's endings (``run_endings``) share
these without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agenttools.core.registry import ToolContext
from app.runs.records import Caller, ChatInput
from app.runs.run import Run
from app.runs.state import RunState
from events import Event, RunResumed


class RunFailed(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class RunScope:
    """One run's dependencies on the agent's side (the state is in ``state``)."""

    run: Run
    chat: ChatInput
    caller: Caller
    ctx: ToolContext
    state: RunState | None = None
    #: Text of the turn being streamed (kept if the run is cancelled mid-turn).
    partial: list[str] = field(default_factory=list)
    #: Whether time-to-first-token is still to be observed (not for a run carried on).
    first_token_pending: bool = True


async def run_step(scope: RunScope, state: RunState, *, events: list[Event] | None = None, status: Any = None) -> None:
    """Store the step: its events, the checkpoint and the messages it added, together."""
    messages = state.take_unsaved()
    await scope.run.emit_step(events or [], checkpoint=state.encode(), messages=messages, status=status)


def resumed_event(run: Run, state: RunState) -> RunResumed:
    """``run_resumed`` for a run carried on without the run manager's account of why
    (a caller handing the agent a stored state directly)."""
    pending = state.pending
    return RunResumed(
        run_id=run.id,
        reason="carried on from its last checkpoint",
        checkpoint_seq=run.last_seq,
        discarded=None,
        pending_tool_calls=len(pending.calls) - len(pending.results) if pending is not None else 0,
    )
