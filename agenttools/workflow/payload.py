"""Turn the model's workflow payload into the backend's ``SaveWorkflowRequest``.

The model writes names (``entity``, ``trigger_type``) and ``after: "Prev:port"`` links;
the backend wants ``entity_id``, ``trigger_type_id`` and explicit edges. This module does
that translation for both the full-payload path (``preview_workflow``) and the draft path
(``preview_draft``), so the workflow shown in a ``workflow_preview`` is always the same
transformed, validated object.

Unlike the original, a payload whose actions carry no ``after`` at all still gets its
start edge (a single-action workflow is valid), and edges are generated whenever none
were supplied.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

from agenttools.core.backend_client import BackendError

__all__ = ["PayloadError", "generate_edges", "parse_after", "transform_workflow"]

DefaultPort = Callable[[str], Awaitable[str]]


class PayloadError(BackendError):
    """The workflow payload itself is wrong (the model can fix it)."""


def parse_after(value: Any) -> tuple[str, str]:
    """``"Check stock:in_stock"`` → ``("Check stock", "in_stock")``; no colon → empty port.

    Splits on the last colon so action names may contain colons.
    """
    if not isinstance(value, str):
        raise PayloadError(f"'after' must be a string like \"Action name\" or \"Action name:port\", got {value!r}")
    text = value.strip()
    if not text:
        raise PayloadError("empty 'after' value")
    name, sep, port = text.rpartition(":")
    if not sep:
        return text, ""
    name, port = name.strip(), port.strip()
    if not name:
        raise PayloadError(f"invalid 'after' format {text!r}: action name is empty")
    return name, port


def _has_after(action: dict[str, Any]) -> bool:
    value = action.get("after")
    return isinstance(value, str) and value.strip() != ""


async def generate_edges(actions: list[Any], default_port: DefaultPort) -> list[dict[str, Any]]:
    """Edges for ``actions`` from their ``after`` fields: one start edge, then sequences.

    The action without ``after`` is the start; exactly one is allowed. Forward references
    are allowed (cycles are the backend's to catch). Edge order is one counter over all
    edges, in action order.
    """
    names: dict[str, int] = {}
    for i, action in enumerate(actions):
        if not isinstance(action, dict):
            raise PayloadError(f"action at index {i} is not an object")
        name = action.get("name")
        if not isinstance(name, str) or not name.strip():
            raise PayloadError(f"action at index {i} has no name")
        if name in names:
            raise PayloadError(f"two actions are named {name!r}; action names must be unique")
        names[name] = i
    edges: list[dict[str, Any]] = []
    start_index: int | None = None
    for i, action in enumerate(actions):
        if not _has_after(action):
            if start_index is not None:
                raise PayloadError(
                    f"actions {actions[start_index]['name']!r} and {action['name']!r} both have no 'after': "
                    "exactly one start action may omit it"
                )
            start_index = i
            edges.append({"target_action_id": f"temp:{i}", "edge_type": "start", "edge_order": len(edges)})
            continue
        source_name, port = parse_after(action["after"])
        source = names.get(source_name)
        if source is None:
            raise PayloadError(
                f"action {action['name']!r} has 'after' = {action['after']!r}, but no action is named {source_name!r}"
            )
        if source == i:
            raise PayloadError(f"action {action['name']!r} cannot come after itself")
        if not port:
            source_type = actions[source].get("action_type")
            if not isinstance(source_type, str) or not source_type:
                raise PayloadError(
                    f"cannot determine the default port: action {source_name!r} has no action_type"
                )
            port = await default_port(source_type)
        edges.append(
            {
                "source_action_id": f"temp:{source}",
                "target_action_id": f"temp:{i}",
                "edge_type": "sequence",
                "source_output": port,
                "edge_order": len(edges),
            }
        )
    if actions and start_index is None:
        raise PayloadError("no start action found: exactly one action must omit the 'after' field")
    return edges


async def transform_workflow(
    payload: Any,
    *,
    entity_id: Callable[[Any], Awaitable[str]],
    trigger_type_id: Callable[[Any], Awaitable[str]],
    default_port: DefaultPort,
) -> dict[str, Any]:
    """A deep copy of ``payload`` with names resolved, edges generated and ``after`` removed."""
    if not isinstance(payload, dict):
        raise PayloadError("workflow must be a JSON object with name, is_active and actions")
    workflow = copy.deepcopy(payload)
    if isinstance(workflow.get("entity"), str) and workflow["entity"].strip():
        workflow["entity_id"] = await entity_id(workflow.pop("entity"))
    else:
        workflow.pop("entity", None)
    if isinstance(workflow.get("trigger_type"), str) and workflow["trigger_type"].strip():
        workflow["trigger_type_id"] = await trigger_type_id(workflow.pop("trigger_type"))
    else:
        workflow.pop("trigger_type", None)
    if not workflow.get("entity_id"):
        raise PayloadError("workflow needs an entity ('schema.table') or an entity_id")
    if not workflow.get("trigger_type_id"):
        raise PayloadError("workflow needs a trigger_type (e.g. 'on_create') or a trigger_type_id")
    actions = workflow.get("actions")
    if actions is None:
        workflow["actions"] = actions = []
    if not isinstance(actions, list):
        raise PayloadError("workflow.actions must be an array")
    edges = workflow.get("edges")
    if edges is not None and not isinstance(edges, list):
        raise PayloadError("workflow.edges must be an array")
    if actions and not edges:
        workflow["edges"] = await generate_edges(actions, default_port)
    elif edges is None:
        workflow["edges"] = []
    for action in actions:
        if isinstance(action, dict):
            action.pop("after", None)
    workflow.setdefault("is_active", True)
    return workflow
