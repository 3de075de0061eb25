"""Fill the UI context's ids into tool arguments (§6 of the reference).

The browser knows which workflow or table config is open; the model often does not
repeat its id, or mangles it. Before a call runs, ``workflow_id`` and ``config_id`` from
the context replace a missing or malformed argument; a well-formed UUID from the model is
kept, because it may deliberately mean another object. The caller's dict is never
mutated: the stored history keeps what the model actually sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agenttools.core.ids import is_strict_uuid

__all__ = ["TOOLS_NEEDING_CONFIG_ID", "TOOLS_NEEDING_WORKFLOW_ID", "inject_context_ids"]

TOOLS_NEEDING_WORKFLOW_ID: frozenset[str] = frozenset(
    {"explain_workflow_node", "get_workflow_rule", "list_alerts_for_rule"}
)
TOOLS_NEEDING_CONFIG_ID: frozenset[str] = frozenset(
    {"preview_table_config", "get_table_config", "update_table_config"}
)

# (tool set, argument field, context key), applied in this order.
_INJECTIONS: tuple[tuple[frozenset[str], str, str], ...] = (
    (TOOLS_NEEDING_WORKFLOW_ID, "workflow_id", "workflow_id"),
    (TOOLS_NEEDING_CONFIG_ID, "id", "config_id"),
)


def _context_string(context: Mapping[str, Any] | None, key: str) -> str:
    """A context id counts only when it is a non-empty string."""
    if not isinstance(context, Mapping):
        return ""
    value = context.get(key)
    return value if isinstance(value, str) else ""


def inject_context_ids(
    tool_name: str, args: dict[str, Any], context_type: str, context: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Return a NEW argument dict with the context's ids filled in where §6 says so.

    ``context_type`` is accepted for symmetry with the rest of the pipeline; like the
    original, injection depends only on which ids the context carries.
    """
    result = dict(args) if isinstance(args, Mapping) else {}
    if not isinstance(args, Mapping):
        # Not an object: nothing to inject into (the original left such input unchanged).
        return result
    for tools, field, context_key in _INJECTIONS:
        if tool_name not in tools:
            continue
        value = _context_string(context, context_key)
        if not value:
            continue
        if is_strict_uuid(result.get(field)):
            continue
        result[field] = value
    return result
