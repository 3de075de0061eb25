"""Handlers of the 12 workflow tools (§3.3–§3.4, §4 of the reference).

Each handler reads its arguments defensively, calls the backend through the caller's
``BackendClient``, and returns a compact summary. Previews never save anything: they
dry-run the transformed workflow and hand it to the UI for approval.

The handlers live in ``lookup_tools`` (discover, rules, alerts) and ``build_tools``
(previews, drafts); this module names them and attaches them to the registry.
"""

from __future__ import annotations

from agenttools.core.registry import ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps, guarded
from agenttools.workflow.build_tools import (
    add_draft_action,
    preview_draft,
    preview_workflow,
    remove_draft_action,
    start_draft,
)
from agenttools.workflow.lookup_tools import (
    discover,
    explain_workflow_node,
    get_alert_detail,
    get_workflow_rule,
    list_alerts_for_rule,
    list_my_alerts,
    list_workflow_rules,
)

__all__ = ["WORKFLOW_TOOL_NAMES", "WorkflowToolDeps", "register_workflow_tools"]

_HANDLERS = {
    "discover": discover,
    "get_workflow_rule": get_workflow_rule,
    "explain_workflow_node": explain_workflow_node,
    "list_workflow_rules": list_workflow_rules,
    "list_my_alerts": list_my_alerts,
    "get_alert_detail": get_alert_detail,
    "list_alerts_for_rule": list_alerts_for_rule,
    "preview_workflow": preview_workflow,
    "start_draft": start_draft,
    "add_draft_action": add_draft_action,
    "remove_draft_action": remove_draft_action,
    "preview_draft": preview_draft,
}

WORKFLOW_TOOL_NAMES: tuple[str, ...] = tuple(_HANDLERS)


def register_workflow_tools(registry: ToolRegistry, deps: WorkflowToolDeps) -> None:
    """Attach a handler to each workflow tool the registry (catalog) declares."""
    for name, fn in _HANDLERS.items():
        if name in registry:
            registry.set_handler(name, guarded(name, deps, fn))
