"""One entry point for the app factory: attach every workflow and table tool handler.

The app builds :class:`WorkflowToolDeps` once (backend URL, timeouts, the draft store and
the resolution cache) and calls :func:`register_backend_tools` on its registry.
"""

from __future__ import annotations

from agenttools.core.registry import ToolRegistry
from agenttools.core.tool_support import WorkflowToolDeps
from agenttools.tables.tools import TABLE_TOOL_NAMES, register_table_tools
from agenttools.workflow.tools import WORKFLOW_TOOL_NAMES, register_workflow_tools

__all__ = ["BACKEND_TOOL_NAMES", "WorkflowToolDeps", "register_backend_tools"]

BACKEND_TOOL_NAMES: tuple[str, ...] = WORKFLOW_TOOL_NAMES + TABLE_TOOL_NAMES


def register_backend_tools(registry: ToolRegistry, deps: WorkflowToolDeps) -> None:
    register_workflow_tools(registry, deps)
    register_table_tools(registry, deps)
