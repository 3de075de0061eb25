"""Workflow catalog, rules and the full-save/dry-run endpoints (§9 #1–#8)."""

from __future__ import annotations

import uuid
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from backend.auth import AuthUser, require_user
from backend.clock import now_iso
from backend.db import Database, Writer, request_db
from backend.params import parse_page, path_uuid, query_uuid
from backend.responses import JSONResponse, dumps_text, invalid_argument, read_json_object
from backend.workflow_rows import RULE_SELECT, load_action_types, load_actions, load_edges, load_rule, rule_json
from backend.workflow_validation import (
    ActionTypeInfo,
    FieldProblems,
    WorkflowSpec,
    check_workflow,
    parse_workflow,
)

# --- catalog ------------------------------------------------------------------------------


async def list_action_types(request: Request) -> JSONResponse:
    await require_user(request)
    return JSONResponse(await load_action_types(request_db(request)))


async def list_trigger_types(request: Request) -> JSONResponse:
    await require_user(request)
    rows = await request_db(request).fetch_all("SELECT * FROM trigger_types ORDER BY name")
    return JSONResponse(
        [
            {"id": r["id"], "name": r["name"], "description": r["description"], "is_active": bool(r["is_active"])}
            for r in rows
        ]
    )


async def list_entities(request: Request) -> JSONResponse:
    await require_user(request)
    type_id = query_uuid(request, "entity_type_id")
    sql = "SELECT * FROM entities"
    params: tuple[Any, ...] = ()
    if type_id is not None:
        sql += " WHERE entity_type_id = ?"
        params = (type_id,)
    rows = await request_db(request).fetch_all(sql + " ORDER BY schema_name, name", params)
    return JSONResponse(
        [
            {
                "id": r["id"],
                "name": r["name"],
                "entity_type_id": r["entity_type_id"],
                "schema_name": r["schema_name"],
                "is_active": bool(r["is_active"]),
            }
            for r in rows
        ]
    )


# --- rules ---------------------------------------------------------------------------------


async def list_rules(request: Request) -> JSONResponse:
    await require_user(request)
    page = parse_page(request)
    db = request_db(request)
    total = int(await db.fetch_value("SELECT COUNT(*) FROM rules"))
    rows = await db.fetch_all(f"{RULE_SELECT} ORDER BY r.name, r.id LIMIT ? OFFSET ?", (page.rows, page.offset))
    return JSONResponse(page.envelope([rule_json(r) for r in rows], total))


async def get_rule(request: Request) -> JSONResponse:
    await require_user(request)
    rule_id = path_uuid(request, "rule_id", "workflow rule")
    db = request_db(request)
    rule = await load_rule(db, rule_id)
    rule["actions"] = await load_actions(db, rule_id)
    return JSONResponse(rule)


async def get_rule_actions(request: Request) -> JSONResponse:
    await require_user(request)
    rule_id = path_uuid(request, "rule_id", "workflow rule")
    db = request_db(request)
    await load_rule(db, rule_id)
    return JSONResponse(await load_actions(db, rule_id))


async def get_rule_edges(request: Request) -> JSONResponse:
    await require_user(request)
    rule_id = path_uuid(request, "rule_id", "workflow rule")
    db = request_db(request)
    await load_rule(db, rule_id)
    return JSONResponse(await load_edges(db, rule_id))


# --- full save / dry run ---------------------------------------------------------------------


def _dry_run_flag(request: Request) -> bool:
    raw = request.query_params.get("dry_run", "").strip().lower()
    if raw in ("", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise invalid_argument(f"dry_run: must be true or false, got {raw!r}")


async def _struct_check(
    request: Request, db: Database, existing_rule_id: str | None
) -> tuple[WorkflowSpec, dict[str, ActionTypeInfo]]:
    """Parse the body and run every 400-level check, including existence of referenced ids."""
    body = await read_json_object(request)
    types = {
        t["type"]: ActionTypeInfo(tuple(p["name"] for p in t["output_ports"]), t["config_schema"])
        for t in await load_action_types(db)
    }
    spec, problems = parse_workflow(body, list(types))
    if spec.entity_id and await db.fetch_value("SELECT 1 FROM entities WHERE id = ?", (spec.entity_id,)) is None:
        problems.add("entity_id", f"entity {spec.entity_id} does not exist")
    if spec.trigger_type_id and (
        await db.fetch_value("SELECT 1 FROM trigger_types WHERE id = ?", (spec.trigger_type_id,)) is None
    ):
        problems.add("trigger_type_id", f"trigger type {spec.trigger_type_id} does not exist")
    await _check_action_ids(db, spec, existing_rule_id, problems)
    if problems.items:
        raise invalid_argument(problems.message(), fields=problems.as_fields())
    return spec, types


async def _check_action_ids(
    db: Database, spec: WorkflowSpec, existing_rule_id: str | None, problems: FieldProblems
) -> None:
    owned: set[str] = set()
    if existing_rule_id is not None:
        rows = await db.fetch_all("SELECT id FROM rule_actions WHERE rule_id = ?", (existing_rule_id,))
        owned = {r["id"] for r in rows}
    seen: set[str] = set()
    for i, action in enumerate(spec.actions):
        if action.id is None:
            continue
        if action.id in seen:
            problems.add(f"actions[{i}].id", f"{action.id} is used by more than one action")
        seen.add(action.id)
        if existing_rule_id is None:
            problems.add(
                f"actions[{i}].id", "must be empty when creating a rule (reference new actions as temp:<index>)"
            )
        elif action.id not in owned:
            problems.add(f"actions[{i}].id", f"{action.id} is not an action of rule {existing_rule_id}")


def _validation_result(spec: WorkflowSpec, errors: list[str]) -> dict[str, Any]:
    return {
        "valid": not errors,
        "errors": errors,
        "action_count": len(spec.actions),
        "edge_count": len(spec.edges),
    }


async def _write_graph(w: Writer, rule_id: str, spec: WorkflowSpec, stamp: str) -> None:
    ids = [a.id or str(uuid.uuid4()) for a in spec.actions]

    def ref(value: str) -> str:
        if value.startswith("temp:"):
            return ids[int(value[5:])]
        return str(uuid.UUID(value))

    await w.execute("DELETE FROM rule_edges WHERE rule_id = ?", (rule_id,))
    kept = [a.id for a in spec.actions if a.id is not None]
    await w.execute(
        f"DELETE FROM rule_actions WHERE rule_id = ? AND id NOT IN ({','.join('?' * len(kept))})",
        (rule_id, *kept),
    )
    for pos, (action_id, a) in enumerate(zip(ids, spec.actions, strict=True)):
        await w.execute(
            "INSERT INTO rule_actions(id, rule_id, position, name, description, action_type, action_config, is_active) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET position = excluded.position, "
            "name = excluded.name, description = excluded.description, action_type = excluded.action_type, "
            "action_config = excluded.action_config, is_active = excluded.is_active",
            (
                action_id,
                rule_id,
                pos,
                a.name,
                a.description,
                a.action_type,
                dumps_text(a.action_config),
                int(a.is_active),
            ),
        )
    await w.execute_many(
        "INSERT INTO rule_edges(id, rule_id, source_action_id, target_action_id, edge_type, source_output, edge_order, "
        "created_date) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                str(uuid.uuid4()),
                rule_id,
                None if e.source_action_id is None else ref(e.source_action_id),
                ref(e.target_action_id),
                e.edge_type,
                e.source_output,
                e.edge_order,
                stamp,
            )
            for e in spec.edges
        ],
    )


def _json_or_null(value: Any) -> str | None:
    return None if value is None else dumps_text(value)


async def _saved_rule(db: Database, rule_id: str) -> dict[str, Any]:
    rule = await load_rule(db, rule_id)
    rule["actions"] = await load_actions(db, rule_id)
    rule["edges"] = await load_edges(db, rule_id)
    return rule


def _reject_invalid(spec: WorkflowSpec, errors: list[str]) -> None:
    if errors:
        raise invalid_argument("workflow is not valid: " + "; ".join(errors), **_validation_result(spec, errors))


async def create_rule_full(request: Request) -> JSONResponse:
    """Validate (``?dry_run=true``) or create a rule with its actions and edges."""
    user = await require_user(request)
    dry_run = _dry_run_flag(request)
    db = request_db(request)
    spec, types = await _struct_check(request, db, None)
    errors = check_workflow(spec, types)
    if dry_run:
        return JSONResponse(_validation_result(spec, errors))
    _reject_invalid(spec, errors)
    rule_id = str(uuid.uuid4())
    stamp = now_iso()
    async with db.write() as w:
        await w.execute(
            "INSERT INTO rules(id, name, description, entity_id, trigger_type_id, trigger_conditions, canvas_layout, "
            "is_active, is_default, created_by, updated_by, created_date, updated_date) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?)",
            (
                rule_id,
                spec.name,
                spec.description,
                spec.entity_id,
                spec.trigger_type_id,
                _json_or_null(spec.trigger_conditions),
                _json_or_null(spec.canvas_layout),
                int(spec.is_active),
                user.id,
                user.id,
                stamp,
                stamp,
            ),
        )
        await _write_graph(w, rule_id, spec, stamp)
    return JSONResponse(await _saved_rule(db, rule_id), status_code=201)


async def update_rule_full(request: Request) -> JSONResponse:
    """Validate (``?dry_run=true``) or replace a rule's fields, actions and edges."""
    user: AuthUser = await require_user(request)
    dry_run = _dry_run_flag(request)
    rule_id = path_uuid(request, "rule_id", "workflow rule")
    db = request_db(request)
    await load_rule(db, rule_id)
    spec, types = await _struct_check(request, db, rule_id)
    errors = check_workflow(spec, types)
    if dry_run:
        return JSONResponse(_validation_result(spec, errors))
    _reject_invalid(spec, errors)
    stamp = now_iso()
    async with db.write() as w:
        await w.execute(
            "UPDATE rules SET name = ?, description = ?, entity_id = ?, trigger_type_id = ?, trigger_conditions = ?, "
            "canvas_layout = ?, is_active = ?, updated_by = ?, updated_date = ? WHERE id = ?",
            (
                spec.name,
                spec.description,
                spec.entity_id,
                spec.trigger_type_id,
                _json_or_null(spec.trigger_conditions),
                _json_or_null(spec.canvas_layout),
                int(spec.is_active),
                user.id,
                stamp,
                rule_id,
            ),
        )
        await _write_graph(w, rule_id, spec, stamp)
    return JSONResponse(await _saved_rule(db, rule_id))


ROUTES = [
    Route("/v1/workflow/action-types", list_action_types, methods=["GET"]),
    Route("/v1/workflow/trigger-types", list_trigger_types, methods=["GET"]),
    Route("/v1/workflow/entities", list_entities, methods=["GET"]),
    Route("/v1/workflow/rules", list_rules, methods=["GET"]),
    Route("/v1/workflow/rules/full", create_rule_full, methods=["POST"]),
    Route("/v1/workflow/rules/{rule_id}", get_rule, methods=["GET"]),
    Route("/v1/workflow/rules/{rule_id}/actions", get_rule_actions, methods=["GET"]),
    Route("/v1/workflow/rules/{rule_id}/edges", get_rule_edges, methods=["GET"]),
    Route("/v1/workflow/rules/{rule_id}/full", update_rule_full, methods=["PUT"]),
]
