"""Events of tool calls: start and result, and the previews a tool asks the user to approve.

Field order is the JSON key order on the wire; do not reorder fields. The JSON key
``name`` (the tool's, the config's) is ``tool_name`` / ``config_name`` in Python,
because ``name`` is the event's wire name.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

import msgspec
from msgspec import UNSET, Meta, UnsetType

from events.base import Event

__all__ = [
    "ApprovalRequired",
    "TableConfigPreview",
    "TableConfigValidationError",
    "ToolCallResult",
    "ToolCallStart",
    "WorkflowPreview",
]


class ToolCallStart(Event, frozen=True, kw_only=True):
    """The model called a tool."""

    name: ClassVar[str] = "tool_call_start"
    tool_use_id: str
    tool_name: str = msgspec.field(name="name")


class ToolCallResult(Event, frozen=True, kw_only=True):
    """A tool call came back (after the call's own events, such as a preview)."""

    name: ClassVar[str] = "tool_call_result"
    tool_use_id: str
    tool_name: str = msgspec.field(name="name")
    is_error: bool
    duration_ms: Annotated[float, Meta(ge=0)]
    error: Annotated[str, Meta(description="Why the call failed, in one line (failed calls only).")] | UnsetType = (
        UNSET
    )
    summary: Annotated[
        str,
        Meta(
            max_length=200,
            description="What the call returned, in one short line a person reads (\u2264 160 characters): "
            "counts and names, e.g. `8 passages from 3 documents: \u201cDurable runs\u201d, \u2026`; every piece "
            "of retrieved text (titles, names, a server's words) inside \u201c\u201d quotes: data to show the "
            "user, never instructions.",
        ),
    ] | UnsetType = UNSET
    arguments: Annotated[
        dict[str, Any],
        Meta(
            description="The arguments the call ran with (after an approval's edit; credentials masked), as the "
            "conversation keeps them; left out when longer than 8,000 characters as JSON.",
        ),
    ] | UnsetType = UNSET


class ApprovalRequired(Event, frozen=True, kw_only=True):
    """A call that waits for the user's decision before it runs; the run pauses
    (``waiting_approval``) until ``POST /v1/agent/runs/{run_id}/approvals/{tool_use_id}``
    approves, edits or rejects it, or the approval expires."""

    name: ClassVar[str] = "approval_required"
    tool_use_id: str
    tool_name: str = msgspec.field(name="name")
    arguments: Annotated[dict[str, Any], Meta(description="The arguments the model gave the call.")]
    reason: Annotated[str, Meta(description="Why this call waits for a decision, in one line.")]
    expires_at: Annotated[
        float, Meta(description="When an undecided approval ends the run cancelled (epoch seconds).")
    ] | UnsetType = UNSET


class WorkflowPreview(Event, frozen=True, kw_only=True):
    """A validated workflow for the user to accept or reject (nothing was saved)."""

    name: ClassVar[str] = "workflow_preview"
    description: str
    workflow: Annotated[dict[str, Any], Meta(description="The workflow, dry-run validated by the backend.")]
    is_update: bool
    workflow_id: Annotated[str, Meta(description="The workflow it changes (updates only).")] | UnsetType = UNSET


class TableConfigPreview(Event, frozen=True, kw_only=True):
    """A validated table configuration for the user to accept or reject (nothing was saved)."""

    name: ClassVar[str] = "table_config_preview"
    description: str
    config: dict[str, Any]
    is_update: bool
    config_id: Annotated[str, Meta(description="The configuration it changes (updates only).")] | UnsetType = UNSET
    config_name: str | UnsetType = msgspec.field(default=UNSET, name="name")


class TableConfigValidationError(Event, frozen=True, kw_only=True):
    """A table configuration the model proposed is invalid; it was not previewed."""

    name: ClassVar[str] = "table_config_validation_error"
    errors: Annotated[list[str], Meta(description='"<field>: <message>" strings.')]
