"""A workflow rule, its actions, its edges and the action types as the API returns them:
the rows read from the reference backend's tables and shaped into its JSON (optional
fields left out when unset, JSON columns decoded). Apart from the routes
(``backend/routes_workflow.py``), which decide what is read and written, so the shapes
are one place both the reads and the saves' answers use.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import orjson

from backend.db import Database
from backend.responses import loads_or_none, not_found

RULE_SELECT = (
    "SELECT r.*, e.name AS entity_name, e.schema_name AS entity_schema_name, e.entity_type_id, "
    "et.name AS entity_type_name, t.name AS trigger_type_name "
    "FROM rules r JOIN entities e ON e.id = r.entity_id "
    "JOIN entity_types et ON et.id = e.entity_type_id "
    "JOIN trigger_types t ON t.id = r.trigger_type_id"
)


def rule_json(row: sqlite3.Row) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "entity_id": row["entity_id"],
        "entity_name": row["entity_name"],
        "entity_schema_name": row["entity_schema_name"],
        "entity_type_id": row["entity_type_id"],
        "entity_type_name": row["entity_type_name"],
        "trigger_type_id": row["trigger_type_id"],
        "trigger_type_name": row["trigger_type_name"],
        "trigger_conditions": loads_or_none(row["trigger_conditions"]),
        "is_active": bool(row["is_active"]),
        "is_default": bool(row["is_default"]),
        "created_by": row["created_by"],
        "updated_by": row["updated_by"],
        "created_date": row["created_date"],
        "updated_date": row["updated_date"],
    }
    if row["canvas_layout"] is not None:
        body["canvas_layout"] = orjson.loads(row["canvas_layout"])
    return body


def action_json(row: sqlite3.Row) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": row["id"],
        "rule_id": row["rule_id"],
        "name": row["name"],
        "description": row["description"],
        "action_type": row["action_type"],
        "action_config": orjson.loads(row["action_config"]),
        "is_active": bool(row["is_active"]),
    }
    if row["template_id"] is not None:
        body["template_id"] = row["template_id"]
    return body


def edge_json(row: sqlite3.Row) -> dict[str, Any]:
    body: dict[str, Any] = {"id": row["id"], "rule_id": row["rule_id"]}
    if row["source_action_id"] is not None:
        body["source_action_id"] = row["source_action_id"]
    body["target_action_id"] = row["target_action_id"]
    body["edge_type"] = row["edge_type"]
    if row["source_output"] is not None:
        body["source_output"] = row["source_output"]
    body["edge_order"] = row["edge_order"]
    body["created_date"] = row["created_date"]
    return body


async def load_rule(db: Database, rule_id: str) -> dict[str, Any]:
    row = await db.fetch_one(f"{RULE_SELECT} WHERE r.id = ?", (rule_id,))
    if row is None:
        raise not_found(f"workflow rule {rule_id} not found")
    return rule_json(row)


async def load_actions(db: Database, rule_id: str) -> list[dict[str, Any]]:
    rows = await db.fetch_all("SELECT * FROM rule_actions WHERE rule_id = ? ORDER BY position, id", (rule_id,))
    return [action_json(r) for r in rows]


async def load_edges(db: Database, rule_id: str) -> list[dict[str, Any]]:
    rows = await db.fetch_all("SELECT * FROM rule_edges WHERE rule_id = ? ORDER BY edge_order, id", (rule_id,))
    return [edge_json(r) for r in rows]


async def load_action_types(db: Database) -> list[dict[str, Any]]:
    rows = await db.fetch_all("SELECT * FROM action_types ORDER BY sort_order")
    return [
        {
            "type": r["type"],
            "name": r["name"],
            "description": r["description"],
            "category": r["category"],
            "supports_manual_execution": bool(r["supports_manual_execution"]),
            "is_async": bool(r["is_async"]),
            "config_schema": orjson.loads(r["config_schema"]),
            "output_ports": orjson.loads(r["output_ports"]),
        }
        for r in rows
    ]


__all__ = [
    "RULE_SELECT",
    "action_json",
    "edge_json",
    "load_action_types",
    "load_actions",
    "load_edges",
    "load_rule",
    "rule_json",
]
