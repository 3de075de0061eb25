"""Calls that wait for the user's decision, as the tool step sees them.

A call of a tool whose spec says ``needs_approval`` is not run when the model asks for
it: the run parks (``AwaitingApproval`` carries the call up to the loop, which stores
the step with ``approval_required`` and hands the run back — no model connection, no
live-run slot, no lease). The decision route writes the user's answer into the parked
checkpoint; the process that carries the run on applies it here: an approved or edited
call runs through the ordinary at-most-once path (marked started before it runs), a
rejected one goes back to the model as the call's result, and a call the run parked on
that has no decision was left to expire.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

import orjson

from agenttools.core.registry import ToolOutcome
from llm.types import ToolCall

#: The ``error`` of a rejected call's result (and so the start of its ``tool_call_result.error``).
REJECTED_BY_USER = "rejected_by_user"
Decision = Literal["approve", "reject", "edit"]
DECISIONS: tuple[Decision, ...] = ("approve", "reject", "edit")


class AwaitingApproval(Exception):
    """The tool step reached a call that waits for a decision: the run parks."""

    def __init__(self, call: ToolCall, reason: str) -> None:
        super().__init__(f"{call.name} waits for the user's decision")
        self.call = call
        self.reason = reason


#: Not a user's decision: written by the process that claims a parked run whose cancel was
#: asked for, so the agent ends it ``cancelled`` itself (answering the waiting call).
CANCELLED_WHILE_WAITING = "cancel"


class ApprovalCancelled(Exception):
    """The run was cancelled while it waited for the decision."""


class ApprovalExpired(Exception):
    """The call the run parked on was not decided within ``AGENT_APPROVAL_TTL_S``."""

    def __init__(self, name: str) -> None:
        super().__init__(f"The approval of {name} was not decided in time; the run was cancelled.")


def approval_reason(name: str) -> str:
    return f"{name} may change data outside this conversation, so it runs only once you approve it."


def rejected_outcome() -> ToolOutcome:
    """What the model gets for a call the user rejected (not counted as an execution)."""
    return ToolOutcome(
        content={
            "error": REJECTED_BY_USER,
            "reason": "The user rejected this call; it was not run. Do not repeat it unless the user asks; "
            "answer with what you have or ask the user what to do instead.",
        },
        is_error=True,
        counts_as_execution=False,
    )


def decided_call(call: ToolCall, decided: dict[str, Any]) -> ToolCall:
    """The call as the user let it run (an edit replaces its arguments)."""
    if decided.get("decision") == "edit" and isinstance(decided.get("arguments"), dict):
        args = dict(decided["arguments"])
        return replace(call, arguments=args, raw_arguments=orjson.dumps(args).decode(), parse_error=None)
    return call


def edited_note(outcome: ToolOutcome, call: ToolCall) -> ToolOutcome:
    """Tell the model the call ran with the user's arguments, not the ones it sent."""
    body = outcome.model_content if outcome.model_content is not None else outcome.content
    note = {"edited_by_user": True, "arguments_used": call.arguments, "result": body}
    return replace(outcome, model_content=note)
