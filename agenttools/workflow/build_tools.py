"""The workflow tools that build a workflow without saving it: ``preview_workflow`` (the
payload transformed, its action types checked, a dry run on the backend) and the draft
(``start_draft``, ``add_draft_action``, ``remove_draft_action``, ``preview_draft``).

Apart from the reading tools because these share the transform and dry run, and the
draft's edit rules (ports, reconnecting around a removed action).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agenttools.core.backend_client import BackendError, require_object
from agenttools.core.drafts import Draft, DraftAction, DraftError, draft_payload
from agenttools.core.previews import workflow_preview_outcome
from agenttools.core.registry import ToolOutcome
from agenttools.core.resolution import ActionTypeInfo
from agenttools.core.tool_support import (
    CallScope,
    ToolInputError,
    object_arg,
    opt_str,
    req_str,
)
from agenttools.workflow.lookup_tools import rules_path
from agenttools.workflow.payload import PayloadError, parse_after, transform_workflow

# -- previews --------------------------------------------------------------------------------


async def _check_action_types(s: CallScope, workflow: dict[str, Any]) -> None:
    """Unknown action types fail here with the list of valid ones (cheap: cached)."""
    try:
        known = await s.resolver.action_types()
    except BackendError:
        return  # the dry run will judge
    if not known:
        return
    for action in workflow.get("actions") or []:
        if isinstance(action, dict):
            t = action.get("action_type")
            if t not in known:
                valid = ", ".join(sorted(known))
                raise PayloadError(f"action {action.get('name')!r} has unknown action_type {t!r}; valid types: {valid}")


async def _transform(s: CallScope, payload: Any) -> dict[str, Any]:
    return await transform_workflow(
        payload,
        entity_id=s.resolver.entity_id,
        trigger_type_id=s.resolver.trigger_type_id,
        default_port=s.resolver.default_port,
    )


async def _dry_run(s: CallScope, workflow: dict[str, Any], description: str, workflow_id: str | None) -> ToolOutcome:
    await _check_action_types(s, workflow)
    if workflow_id:
        raw = await s.client.put(rules_path(workflow_id, "full"), workflow, {"dry_run": "true"})
    else:
        raw = await s.client.post(rules_path("full"), workflow, {"dry_run": "true"})
    result = require_object(raw, "workflow validation")
    if result.get("valid") is True:
        return workflow_preview_outcome(
            description=description, workflow=workflow, result=result, workflow_id=workflow_id
        )
    content = {
        "valid": False,
        "errors": result.get("errors") or [],
        "action_count": result.get("action_count"),
        "edge_count": result.get("edge_count"),
        "generated_edges": workflow.get("edges"),
        "message": "The workflow is invalid and was not shown to the user; fix these errors and preview again.",
    }
    return ToolOutcome(content=content)


async def preview_workflow(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    description = req_str(args, "description", "say in one sentence what the workflow does or what changed")
    raw_id = opt_str(args, "workflow_id")
    workflow_id: str | None = None
    if raw_id:
        workflow_id = await s.resolver.rule_id(raw_id)
    payload = object_arg(args, "workflow", s.deps)
    workflow = await _transform(s, payload)
    return await _dry_run(s, workflow, description, workflow_id)


# -- drafts ----------------------------------------------------------------------------------


async def start_draft(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    name = req_str(args, "name", "a short name for the workflow")
    entity = req_str(args, "entity", "'schema.table', e.g. 'inventory.inventory_items'")
    trigger = req_str(args, "trigger_type", "e.g. 'on_create'")
    description = opt_str(args, "description")
    conditions = args.get("trigger_conditions")
    if conditions is not None and not isinstance(conditions, dict):
        raise ToolInputError("trigger_conditions must be a JSON object")
    # Resolve now so a wrong name fails at the first step, not at preview time.
    await asyncio.gather(s.resolver.entity_id(entity), s.resolver.trigger_type_id(trigger))
    draft = await s.deps.drafts.create(
        s.owner,
        name=name,
        entity=entity,
        trigger_type=trigger,
        description=description,
        trigger_conditions=conditions or None,
    )
    return ToolOutcome(
        content={
            "draft_id": draft.id,
            "status": "draft_created",
            "message": (
                f'Draft "{name}" created. Add actions with add_draft_action (the first one without '
                "'after'), then call preview_draft."
            ),
        }
    )


def _ports_of(info: ActionTypeInfo | None) -> list[str]:
    return list(info.ports) if info and info.ports else ["success", "failure"]


async def add_draft_action(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    draft_id = req_str(args, "draft_id", "the id returned by start_draft")
    name = req_str(args, "name", "a unique name for this step")
    action_type = req_str(args, "action_type")
    config = object_arg(args, "action_config", s.deps)
    after = opt_str(args, "after")
    description = opt_str(args, "description")
    is_active = args.get("is_active", True)
    if not isinstance(is_active, bool):
        raise ToolInputError("is_active must be true or false")

    types = await s.resolver.action_types()  # network first, lock later
    info = types.get(action_type)
    if types and info is None:
        raise ToolInputError(f"unknown action_type {action_type!r}; valid types: {', '.join(sorted(types))}")
    missing = [f for f in (info.required_config_fields if info else ()) if f not in config]
    if missing:
        raise ToolInputError(f"action_config for {action_type} is missing required field(s): {', '.join(missing)}")
    after_name, after_port = parse_after(after) if after else ("", "")

    def mutate(draft: Draft) -> dict[str, Any]:
        if draft.action(name) is not None:
            raise DraftError(
                f"action {name!r} already exists in the draft; use a different name or remove_draft_action first"
            )
        if after_name:
            source = draft.action(after_name)
            if source is None:
                existing = ", ".join(a.name for a in draft.actions) or "(none yet)"
                raise DraftError(f"'after' references unknown action {after_name!r}; existing actions: {existing}")
            source_ports = _ports_of(types.get(source.action_type))
            if after_port and types and after_port not in source_ports:
                raise DraftError(
                    f"action {after_name!r} ({source.action_type}) has no output port {after_port!r}; "
                    f"its ports are: {', '.join(source_ports)}"
                )
        elif draft.actions:
            raise DraftError(
                f"the draft already has a start action ({draft.actions[0].name!r}); set 'after' to "
                "'<previous action name>' or '<previous action name>:<port>'"
            )
        draft.actions.append(
            DraftAction(
                name=name,
                action_type=action_type,
                action_config=config,
                is_active=is_active,
                description=description,
                after=after,
            )
        )
        return {"action_index": len(draft.actions) - 1, "action_count": len(draft.actions)}

    done = await s.deps.drafts.update(s.owner, draft_id, mutate)
    ports = _ports_of(info)
    return ToolOutcome(
        content={
            "status": "action_added",
            "action_name": name,
            "action_index": done["action_index"],
            "output_ports": ports,
            "message": (f'Action "{name}" ({action_type}) added to the draft. Its output ports: {", ".join(ports)}.'),
        }
    )


def _reconnect_after(draft: Draft, removed: DraftAction) -> list[str]:
    """Point the removed action's dependants at its own predecessor; return their names."""
    moved: list[str] = []
    for a in draft.actions:
        if a.after and parse_after(a.after)[0] == removed.name:
            a.after = removed.after
            moved.append(a.name)
    return moved


async def remove_draft_action(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    draft_id = req_str(args, "draft_id")
    action_name = req_str(args, "action_name")

    def mutate(draft: Draft) -> tuple[int, list[str]]:
        target = draft.action(action_name)
        if target is None:
            names = ", ".join(a.name for a in draft.actions) or "(none)"
            raise DraftError(f"action {action_name!r} not found in the draft; its actions: {names}")
        dependants = [a for a in draft.actions if a.after and parse_after(a.after)[0] == action_name]
        if not target.after and len(dependants) > 1:
            raise DraftError(
                f"{action_name!r} is the start action and {len(dependants)} actions follow it "
                f"({', '.join(a.name for a in dependants)}); remove those first"
            )
        draft.actions.remove(target)
        return len(draft.actions), _reconnect_after(draft, target)

    remaining, moved = await s.deps.drafts.update(s.owner, draft_id, mutate)
    message = f'Action "{action_name}" removed from the draft. {remaining} action(s) remaining.'
    if moved:
        message += f" Reconnected to its predecessor: {', '.join(moved)}."
    return ToolOutcome(content={"status": "action_removed", "reconnected": moved, "message": message})


async def preview_draft(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    draft_id = req_str(args, "draft_id")
    description = req_str(args, "description", "say in one sentence what the workflow does")
    draft = await s.deps.drafts.get(s.owner, draft_id)
    if not draft.actions:
        raise ToolInputError("the draft has no actions yet; add at least one with add_draft_action")
    workflow = await _transform(s, draft_payload(draft))
    return await _dry_run(s, workflow, description, None)
