"""Alerts: the caller's inbox, the admin list and one alert's detail (§9 #9–#11).

Field names are camelCase, as the real Ichor alert API returns them.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from backend.auth import AuthUser, require_user
from backend.db import Database, request_db
from backend.params import parse_csv_enum, parse_page, path_uuid, query_uuid
from backend.responses import JSONResponse, loads_or_none, not_found, permission_denied

STATUSES = ("active", "acknowledged", "dismissed", "resolved")
SEVERITIES = ("low", "medium", "high", "critical")

_ALERT_SELECT = "SELECT a.*, r.name AS rule_name FROM alerts a LEFT JOIN rules r ON r.id = a.source_rule_id"


def _alert_json(row: sqlite3.Row) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": row["id"],
        "alertType": row["alert_type"],
        "severity": row["severity"],
        "title": row["title"],
        "message": row["message"],
    }
    optional = {
        "context": loads_or_none(row["context"]),
        "sourceEntityName": row["source_entity_name"],
        "sourceEntityId": row["source_entity_id"],
        "sourceRuleId": row["source_rule_id"],
        "sourceRuleName": row["rule_name"],
        "actionUrl": row["action_url"],
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    body["status"] = row["status"]
    if row["expires_date"] is not None:
        body["expiresDate"] = row["expires_date"]
    body["createdDate"] = row["created_date"]
    body["updatedDate"] = row["updated_date"]
    return body


async def _recipients(db: Database, alert_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    if not alert_ids:
        return {}
    marks = ",".join("?" * len(alert_ids))
    rows = await db.fetch_all(
        "SELECT ar.alert_id, ar.recipient_type, ar.recipient_id, "
        "COALESCE(u.first_name || ' ' || u.last_name, ro.name, 'Unknown') AS name, u.email "
        "FROM alert_recipients ar "
        "LEFT JOIN users u ON ar.recipient_type = 'user' AND u.id = ar.recipient_id "
        "LEFT JOIN roles ro ON ar.recipient_type = 'role' AND ro.id = ar.recipient_id "
        f"WHERE ar.alert_id IN ({marks}) ORDER BY ar.recipient_type DESC, name",
        alert_ids,
    )
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        item: dict[str, Any] = {
            "recipientType": r["recipient_type"],
            "recipientId": r["recipient_id"],
            "name": r["name"],
        }
        if r["email"] is not None:
            item["email"] = r["email"]
        out[r["alert_id"]].append(item)
    return out


async def _with_recipients(db: Database, rows: list[sqlite3.Row]) -> list[dict[str, Any]]:
    recipients = await _recipients(db, [r["id"] for r in rows])
    items = []
    for row in rows:
        alert = _alert_json(row)
        if recipients.get(row["id"]):
            alert["recipients"] = recipients[row["id"]]
        items.append(alert)
    return items


def _recipient_clause(user: AuthUser) -> tuple[str, list[Any]]:
    roles = sorted(user.role_ids)
    clause = (
        "EXISTS (SELECT 1 FROM alert_recipients ar WHERE ar.alert_id = a.id AND "
        "((ar.recipient_type = 'user' AND ar.recipient_id = ?)"
        f" OR (ar.recipient_type = 'role' AND ar.recipient_id IN ({','.join('?' * len(roles))}))))"
    )
    return clause, [user.id, *roles]


async def _paged(request: Request, where: list[str], params: list[Any]) -> JSONResponse:
    page = parse_page(request)
    statuses = parse_csv_enum(request, "status", STATUSES)
    severities = parse_csv_enum(request, "severity", SEVERITIES)
    if statuses:
        where.append(f"a.status IN ({','.join('?' * len(statuses))})")
        params += statuses
    if severities:
        where.append(f"a.severity IN ({','.join('?' * len(severities))})")
        params += severities
    sql_where = (" WHERE " + " AND ".join(where)) if where else ""
    db = request_db(request)
    total = int(await db.fetch_value(f"SELECT COUNT(*) FROM alerts a{sql_where}", params))
    rows = await db.fetch_all(
        f"{_ALERT_SELECT}{sql_where} ORDER BY a.created_date DESC, a.id LIMIT ? OFFSET ?",
        [*params, page.rows, page.offset],
    )
    return JSONResponse(page.envelope(await _with_recipients(db, rows), total))


async def list_my_alerts(request: Request) -> JSONResponse:
    """Alerts addressed to the caller directly or through one of their roles."""
    user = await require_user(request)
    clause, params = _recipient_clause(user)
    return await _paged(request, [clause], params)


async def list_all_alerts(request: Request) -> JSONResponse:
    """Every alert, optionally for one rule (``sourceRuleId``); admin only."""
    user = await require_user(request)
    if not user.is_admin:
        raise permission_denied("listing all alerts requires the admin role")
    where: list[str] = []
    params: list[Any] = []
    rule_id = query_uuid(request, "sourceRuleId")
    if rule_id is not None:
        where.append("a.source_rule_id = ?")
        params.append(rule_id)
    return await _paged(request, where, params)


async def get_alert(request: Request) -> JSONResponse:
    user = await require_user(request)
    alert_id = path_uuid(request, "alert_id", "alert")
    db = request_db(request)
    row = await db.fetch_one(f"{_ALERT_SELECT} WHERE a.id = ?", (alert_id,))
    if row is None:
        raise not_found(f"alert {alert_id} not found")
    if not user.is_admin:
        clause, params = _recipient_clause(user)
        if await db.fetch_value(f"SELECT 1 FROM alerts a WHERE a.id = ? AND {clause}", (alert_id, *params)) is None:
            raise permission_denied("you are not a recipient of this alert")
    (alert,) = await _with_recipients(db, [row])
    acks = await db.fetch_all(
        "SELECT k.*, u.first_name || ' ' || u.last_name AS user_name FROM alert_acknowledgments k "
        "JOIN users u ON u.id = k.user_id WHERE k.alert_id = ? ORDER BY k.acknowledged_date",
        (alert_id,),
    )
    alert["acknowledgments"] = [
        {
            "id": k["id"],
            "alertId": k["alert_id"],
            "userId": k["user_id"],
            "userName": k["user_name"],
            "acknowledgedDate": k["acknowledged_date"],
            "notes": k["notes"],
        }
        for k in acks
    ]
    return JSONResponse(alert)


ROUTES = [
    Route("/v1/workflow/alerts/mine", list_my_alerts, methods=["GET"]),
    Route("/v1/workflow/alerts", list_all_alerts, methods=["GET"]),
    Route("/v1/workflow/alerts/{alert_id}", get_alert, methods=["GET"]),
]
