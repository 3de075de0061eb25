"""Preview interception: turn a validated change into an event for the user to approve.

The agent never saves a workflow or a table config itself. Preview tools (and the
table-config write tools, which are gated the same way) emit ``workflow_preview`` /
``table_config_preview`` for the UI, and the model is told only that the preview was
sent, so it waits for the user's decision instead of claiming the change was made.
Invalid table configs emit ``table_config_validation_error`` with ``"<field>: <message>"``
strings (the original decoded the wrong shape and never sent it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agenttools.core.registry import ToolOutcome
from events import UNSET, TableConfigPreview, TableConfigValidationError, WorkflowPreview

__all__ = [
    "PREVIEW_SENT",
    "table_config_preview_outcome",
    "table_config_validation_outcome",
    "workflow_preview_outcome",
]

PREVIEW_SENT: dict[str, str] = {
    "status": "preview_sent",
    "message": (
        "The preview was shown to the user, who will accept or reject it in the UI. "
        "Do not call more tools for this change; tell the user the preview is ready and wait for their decision."
    ),
}


def workflow_preview_outcome(
    *,
    description: str,
    workflow: dict[str, Any],
    result: Mapping[str, Any],
    workflow_id: str | None,
) -> ToolOutcome:
    """``workflow_preview`` carrying the transformed, dry-run-validated workflow."""
    event = WorkflowPreview(
        description=description,
        workflow=workflow,
        is_update=bool(workflow_id),
        workflow_id=workflow_id or UNSET,
    )
    content = {**result, "workflow": workflow}
    return ToolOutcome(
        content=content,
        events=[event],
        model_content=dict(PREVIEW_SENT),
    )


def table_config_preview_outcome(
    *,
    config: dict[str, Any],
    description_of_changes: str,
    config_id: str | None,
    name: str | None,
    warnings: list[dict[str, Any]],
) -> ToolOutcome:
    event = TableConfigPreview(
        description=description_of_changes,
        config=config,
        is_update=bool(config_id),
        config_id=config_id or UNSET,
        config_name=name or UNSET,
    )
    content = {"valid": True, "errors": [], "warnings": warnings, "config": config}
    return ToolOutcome(
        content=content,
        events=[event],
        model_content=dict(PREVIEW_SENT),
    )


def error_strings(errors: Iterable[Mapping[str, Any]]) -> list[str]:
    """``[{"field", "message"}]`` → ``["<field>: <message>"]`` (the event's documented format)."""
    out: list[str] = []
    for e in errors:
        field = str(e.get("field") or "config")
        out.append(f"{field}: {e.get('message', '')}")
    return out


def table_config_validation_outcome(
    *, errors: list[dict[str, Any]], warnings: list[dict[str, Any]]
) -> ToolOutcome:
    """The user sees the errors; the model sees them too, so it can fix the config."""
    strings = error_strings(errors)
    content = {
        "valid": False,
        "errors": errors,
        "warnings": warnings,
        "message": "The config is invalid and was not previewed; fix these errors and try again.",
    }
    return ToolOutcome(content=content, events=[TableConfigValidationError(errors=strings)])
