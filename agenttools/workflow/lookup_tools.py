"""The workflow tools that only read: ``discover`` (what the backend offers), the rules
(``get_workflow_rule``, ``explain_workflow_node``, ``list_workflow_rules``) and the alerts
(``list_my_alerts``, ``get_alert_detail``, ``list_alerts_for_rule``).

Apart from the building tools because nothing here changes anything: each handler is one
or two backend reads summarised for the model.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agenttools.core.backend_client import BackendError, build_path, require_object, require_sequence
from agenttools.core.ids import parse_uuid, uuid_error
from agenttools.core.registry import ToolOutcome
from agenttools.core.tool_support import (
    CallScope,
    ToolInputError,
    cap_items,
    opt_enum,
    opt_str,
    page_args,
    req_str,
)
from agenttools.workflow.summaries import (
    explain_node,
    flow_summary,
    page_info,
    summarise_action_types,
    summarise_alert,
    summarise_rule_row,
)

ALERT_STATUSES = ("active", "acknowledged", "dismissed", "resolved")
ALERT_SEVERITIES = ("low", "medium", "high", "critical")
_MAX_ENRICH_IDS = 25


def rules_path(*rest: str) -> str:
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
        raise ToolInputError(f"unknown discover category {category!r}: use action_types, trigger_types or entities")
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
        s.client.get(rules_path(rule_id, "actions")), s.client.get(rules_path(rule_id, "edges"))
    )
    actions = [a for a in require_sequence(actions_raw or [], "rule actions") if isinstance(a, dict)]
    edges = [e for e in require_sequence(edges_raw or [], "rule edges") if isinstance(e, dict)]
    return actions, edges


async def get_workflow_rule(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    rule_id = await s.resolver.rule_id(args.get("workflow_id"))
    rule = require_object(await s.client.get(rules_path(rule_id)), "workflow rule")
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
    body = require_object(await s.client.get(rules_path(), {"page": page, "rows": rows}), "workflow rules")
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
