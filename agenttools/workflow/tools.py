"""Handlers of the 12 workflow tools (§3.3–§3.4, §4 of the reference).

Each handler reads its arguments defensively, calls the backend through the caller's
``BackendClient``, and returns a compact summary. Previews never save anything: they
dry-run the transformed workflow and hand it to the UI for approval.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agenttools.core.backend_client import BackendError, build_path, require_object, require_sequence
from agenttools.core.drafts import Draft, DraftAction, DraftError, draft_payload
from agenttools.core.ids import parse_uuid, uuid_error
from agenttools.core.previews import workflow_preview_outcome
from agenttools.core.registry import ToolOutcome, ToolRegistry
from agenttools.core.resolution import ActionTypeInfo
from agenttools.core.tool_support import (
    CallScope,
    ToolInputError,
    WorkflowToolDeps,
    cap_items,
    guarded,
    object_arg,
    opt_enum,
    opt_str,
    page_args,
    req_str,
)
from agenttools.workflow.payload import PayloadError, parse_after, transform_workflow
from agenttools.workflow.summaries import (
    explain_node,
    flow_summary,
    page_info,
    summarise_action_types,
    summarise_alert,
    summarise_rule_row,
)

__all__ = ["WORKFLOW_TOOL_NAMES", "WorkflowToolDeps", "register_workflow_tools"]

ALERT_STATUSES = ("active", "acknowledged", "dismissed", "resolved")
ALERT_SEVERITIES = ("low", "medium", "high", "critical")
_MAX_ENRICH_IDS = 25


def _rules_path(*rest: str) -> str:
    return build_path("v1", "workflow", "rules", *rest)


# -- discover ------------------------------------------------------------------------------


async def discover(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    category = opt_str(args, "category")
    paths = {
        "action_types": "action-types",
        "trigger_types": "trigger-types",
        "entities": "entities",
    }
    if category not in paths:
        raise ToolInputError(
            f"unknown discover category {category!r}: use action_types, trigger_types or entities"
        )
    rows = require_sequence(await s.client.get(build_path("v1", "workflow", paths[category])), category)
    if category == "action_types":
        items: list[Any] = summarise_action_types(rows)
    elif category == "trigger_types":
        items = sorted(
            (
                {"id": r.get("id"), "name": r.get("name"), "description": r.get("description") or ""}
                for r in rows
                if isinstance(r, dict) and r.get("is_active", True) is not False
            ),
            key=lambda r: str(r["name"]),
        )
    else:
        items = sorted(
            (
                {
                    "id": r.get("id"),
                    "name": f"{r.get('schema_name')}.{r.get('name')}",
                }
                for r in rows
                if isinstance(r, dict) and r.get("is_active", True) is not False
            ),
            key=lambda r: str(r["name"]),
        )
    items, note = cap_items(items, s.deps.max_result_chars, what=category.replace("_", " "))
    content: dict[str, Any] = {"category": category, "count": len(rows), category: items}
    if note:
        content["note"] = note
    return ToolOutcome(content=content)


# -- rules -----------------------------------------------------------------------------------


async def _enrich_alert_configs(s: CallScope, actions: list[dict[str, Any]]) -> None:
    """Replace recipient ids in ``create_alert`` configs by names and emails (in place).

    Lookups run concurrently, once per distinct id; failures read "Unknown User/Role".
    """
    user_ids: set[str] = set()
    role_ids: set[str] = set()
    for a in actions:
        cfg = a.get("action_config")
        if a.get("action_type") == "create_alert" and isinstance(cfg, dict):
            rec = cfg.get("recipients")
            if isinstance(rec, dict):
                user_ids.update(u for u in rec.get("users") or [] if isinstance(u, str))
                role_ids.update(r for r in rec.get("roles") or [] if isinstance(r, str))
    if not user_ids and not role_ids:
        return

    async def lookup(kind: str, ident: str) -> tuple[str, str, dict[str, Any] | None]:
        uid = parse_uuid(ident)
        if uid is None:
            return kind, ident, None
        try:
            body = await s.client.get(build_path("v1", "core", kind, uid))
        except BackendError:
            return kind, ident, None
        return kind, ident, body if isinstance(body, dict) else None

    jobs = [lookup("users", i) for i in sorted(user_ids)[:_MAX_ENRICH_IDS]]
    jobs += [lookup("roles", i) for i in sorted(role_ids)[:_MAX_ENRICH_IDS]]
    found = {(k, i): b for k, i, b in await asyncio.gather(*jobs)}

    def user(ident: str) -> dict[str, Any]:
        body = found.get(("users", ident))
        if not body:
            return {"id": ident, "name": "Unknown User"}
        name = " ".join(
            str(p) for p in (body.get("first_name"), body.get("last_name")) if isinstance(p, str) and p
        ) or str(body.get("username") or "Unknown User")
        out = {"id": ident, "name": name}
        if body.get("email"):
            out["email"] = body["email"]
        return out

    def role(ident: str) -> dict[str, Any]:
        body = found.get(("roles", ident))
        return {"id": ident, "name": str(body.get("name") or "Unknown Role") if body else "Unknown Role"}

    for a in actions:
        cfg = a.get("action_config")
        if a.get("action_type") == "create_alert" and isinstance(cfg, dict):
            rec = cfg.get("recipients")
            if isinstance(rec, dict):
                enriched = dict(cfg)
                enriched["recipients"] = {
                    "users": [user(u) for u in rec.get("users") or [] if isinstance(u, str)],
                    "roles": [role(r) for r in rec.get("roles") or [] if isinstance(r, str)],
                }
                a["action_config"] = enriched


async def _rule_graph(s: CallScope, rule_id: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    actions_raw, edges_raw = await asyncio.gather(
        s.client.get(_rules_path(rule_id, "actions")), s.client.get(_rules_path(rule_id, "edges"))
    )
    actions = [a for a in require_sequence(actions_raw or [], "rule actions") if isinstance(a, dict)]
    edges = [e for e in require_sequence(edges_raw or [], "rule edges") if isinstance(e, dict)]
    return actions, edges


async def get_workflow_rule(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    rule_id = await s.resolver.rule_id(args.get("workflow_id"))
    rule = require_object(await s.client.get(_rules_path(rule_id)), "workflow rule")
    actions, edges = await _rule_graph(s, rule_id)
    await _enrich_alert_configs(s, actions)
    compact_rule = {k: v for k, v in rule.items() if k not in ("actions", "canvas_layout")}
    content = {
        "workflow_id": rule_id,
        "rule": compact_rule,
        "actions": [
            {
                "id": a.get("id"),
                "name": a.get("name"),
                "action_type": a.get("action_type"),
                "is_active": a.get("is_active"),
            }
            for a in actions
        ],
        "summary": flow_summary(actions, edges),
    }
    return ToolOutcome(content=content)


async def explain_workflow_node(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    if not opt_str(args, "workflow_id"):
        raise ToolInputError("workflow_id is required: provide it, or open the workflow so its id is in the context")
    rule_id = await s.resolver.rule_id(args.get("workflow_id"))
    node = req_str(args, "node_name", "the action's name, id or type")
    actions, edges = await _rule_graph(s, rule_id)
    await _enrich_alert_configs(s, actions)
    result = explain_node(actions, edges, node)
    if result is None:
        names = ", ".join(str(a.get("name")) for a in actions) or "(none)"
        raise ToolInputError(f"action {node!r} not found in this workflow; available actions: {names}")
    return ToolOutcome(content={"workflow_id": rule_id, **result})


async def list_workflow_rules(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    page, rows = page_args(args, 100)
    body = require_object(await s.client.get(_rules_path(), {"page": page, "rows": rows}), "workflow rules")
    items = [r for r in body.get("items") or [] if isinstance(r, dict)]
    results = [summarise_rule_row(r) for r in items]
    shown, note = cap_items(results, s.deps.max_result_chars, what="rules")
    content: dict[str, Any] = {"results": shown, **page_info(body, items)}
    if note:
        content["note"] = note
        content["has_more"] = True
    return ToolOutcome(content=content)


# -- alerts ----------------------------------------------------------------------------------


def _alert_page(body: Any, s: CallScope) -> dict[str, Any]:
    body = require_object(body, "alerts")
    items = [a for a in body.get("items") or [] if isinstance(a, dict)]
    summaries = [summarise_alert(a) for a in items]
    shown, note = cap_items(summaries, s.deps.max_result_chars, what="alerts")
    content: dict[str, Any] = {"results": shown, **page_info(body, items)}
    if note:
        content["note"] = note
        content["has_more"] = True
    return content


async def list_my_alerts(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    status = opt_enum(args, "status", ALERT_STATUSES)
    severity = opt_enum(args, "severity", ALERT_SEVERITIES)
    page, rows = page_args(args, 20)
    query = {"status": status or None, "severity": severity or None, "page": page, "rows": rows}
    body = await s.client.get(build_path("v1", "workflow", "alerts", "mine"), query)
    return ToolOutcome(content=_alert_page(body, s))


async def get_alert_detail(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    raw = req_str(args, "alert_id", "the alert's UUID from list_my_alerts")
    alert_id = parse_uuid(raw)
    if alert_id is None:
        raise ToolInputError(uuid_error("alert_id", raw))
    body = require_object(await s.client.get(build_path("v1", "workflow", "alerts", alert_id)), "alert")
    return ToolOutcome(content=body)


async def list_alerts_for_rule(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    rule_id = await s.resolver.rule_id(args.get("workflow_id"))
    status = opt_enum(args, "status", ALERT_STATUSES)
    page, rows = page_args(args, 20)
    query = {"sourceRuleId": rule_id, "status": status or None, "page": page, "rows": rows}
    body = await s.client.get(build_path("v1", "workflow", "alerts"), query)
    return ToolOutcome(content={"workflow_id": rule_id, **_alert_page(body, s)})


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


async def _dry_run(
    s: CallScope, workflow: dict[str, Any], description: str, workflow_id: str | None
) -> ToolOutcome:
    await _check_action_types(s, workflow)
    if workflow_id:
        raw = await s.client.put(_rules_path(workflow_id, "full"), workflow, {"dry_run": "true"})
    else:
        raw = await s.client.post(_rules_path("full"), workflow, {"dry_run": "true"})
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
        raise ToolInputError(
            f"action_config for {action_type} is missing required field(s): {', '.join(missing)}"
        )
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
                raise DraftError(
                    f"'after' references unknown action {after_name!r}; existing actions: {existing}"
                )
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
            "message": (
                f'Action "{name}" ({action_type}) added to the draft. Its output ports: {", ".join(ports)}.'
            ),
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
