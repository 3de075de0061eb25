"""Table configurations (§9 #18–#22): read, validate, create, update.

Every write runs the Appendix B rules first. Names are unique; a duplicate is a
409 ``already_exists`` (the status Ichor gives unique-constraint violations).
System configs (``is_system``) can only be changed by an admin.
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from backend.auth import require_user
from backend.clock import now_iso
from backend.db import Database, request_db
from backend.params import path_uuid
from backend.responses import (
    ApiError,
    JSONResponse,
    dumps_text,
    invalid_argument,
    not_found,
    permission_denied,
    read_json_object,
)
from backend.table_rules import validate_table_config

NAME_MIN, NAME_MAX, DESCRIPTION_MAX = 3, 100, 500


def _config_json(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "config": orjson.loads(row["config"]),
        "created_by": row["created_by"],
        "updated_by": row["updated_by"],
        "created_date": row["created_date"],
        "updated_date": row["updated_date"],
        "is_system": bool(row["is_system"]),
    }


def _check_fields(name: Any, description: Any, config: Any, *, partial: bool) -> None:
    """400 with every field problem and every config rule broken, or nothing."""
    problems: list[str] = []
    if name is None:
        if not partial:
            problems.append("name: is required")
    elif not isinstance(name, str) or not NAME_MIN <= len(name.strip()) <= NAME_MAX:
        problems.append(f"name: must be a string of {NAME_MIN}-{NAME_MAX} characters")
    if description is not None and (not isinstance(description, str) or len(description) > DESCRIPTION_MAX):
        problems.append(f"description: must be a string of at most {DESCRIPTION_MAX} characters")
    errors: list[dict[str, str]] = []
    warnings: list[dict[str, str]] = []
    if config is None:
        if not partial:
            problems.append("config: is required")
    else:
        report = validate_table_config(config)
        errors = [e.as_dict() for e in report.errors]
        warnings = [w.as_dict() for w in report.warnings]
        problems += [f"config.{e['field']}: {e['message']} ({e['code']})" for e in errors]
    if problems:
        raise invalid_argument("validation failed: " + "; ".join(problems), errors=errors, warnings=warnings)


async def _get_row(db: Database, config_id: str) -> sqlite3.Row:
    row = await db.fetch_one("SELECT * FROM table_configs WHERE id = ?", (config_id,))
    if row is None:
        raise not_found(f"table config {config_id} not found")
    return row


async def _name_taken(db: Database, name: str, except_id: str | None) -> None:
    row = await db.fetch_one("SELECT id FROM table_configs WHERE name = ?", (name,))
    if row is not None and row["id"] != except_id:
        raise ApiError(409, "already_exists", f"a table config named {name!r} already exists")


async def get_by_id(request: Request) -> JSONResponse:
    await require_user(request)
    return JSONResponse(
        _config_json(await _get_row(request_db(request), path_uuid(request, "config_id", "table config")))
    )


async def get_by_name(request: Request) -> JSONResponse:
    await require_user(request)
    name = str(request.path_params["name"])
    row = await request_db(request).fetch_one("SELECT * FROM table_configs WHERE name = ?", (name,))
    if row is None:
        raise not_found(f"table config named {name!r} not found")
    return JSONResponse(_config_json(row))


async def list_all(request: Request) -> JSONResponse:
    await require_user(request)
    rows = await request_db(request).fetch_all("SELECT * FROM table_configs ORDER BY name")
    return JSONResponse([_config_json(r) for r in rows])


async def validate(request: Request) -> Response:
    """204 when ``{name, description?, config}`` would be accepted by create, else 400."""
    await require_user(request)
    body = await read_json_object(request)
    _check_fields(body.get("name"), body.get("description"), body.get("config"), partial=False)
    return Response(status_code=204)


async def create(request: Request) -> JSONResponse:
    user = await require_user(request)
    body = await read_json_object(request)
    name, description, config = body.get("name"), body.get("description"), body.get("config")
    _check_fields(name, description, config, partial=False)
    assert isinstance(name, str)
    db = request_db(request)
    config_id = str(uuid.uuid4())
    stamp = now_iso()
    async with db.write() as w:
        await _name_taken(db, name.strip(), None)
        await w.execute(
            "INSERT INTO table_configs(id, name, description, config, created_by, updated_by, created_date, "
            "updated_date, is_system) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0)",
            (config_id, name.strip(), description or "", dumps_text(config), user.id, user.id, stamp, stamp),
        )
    return JSONResponse(_config_json(await _get_row(db, config_id)), status_code=201)


async def update(request: Request) -> JSONResponse:
    """Partial update: any of ``name``, ``description``, ``config``; at least one."""
    user = await require_user(request)
    config_id = path_uuid(request, "config_id", "table config")
    body = await read_json_object(request)
    name, description, config = body.get("name"), body.get("description"), body.get("config")
    if name is None and description is None and config is None:
        raise invalid_argument("nothing to update: send at least one of name, description, config")
    _check_fields(name, description, config, partial=True)
    db = request_db(request)
    async with db.write() as w:
        row = await _get_row(db, config_id)
        if row["is_system"] and not user.is_admin:
            raise permission_denied("system table configs can only be changed by an admin")
        if isinstance(name, str):
            await _name_taken(db, name.strip(), config_id)
        await w.execute(
            "UPDATE table_configs SET name = ?, description = ?, config = ?, updated_by = ?, updated_date = ? "
            "WHERE id = ?",
            (
                name.strip() if isinstance(name, str) else row["name"],
                description if isinstance(description, str) else row["description"],
                row["config"] if config is None else dumps_text(config),
                user.id,
                now_iso(),
                config_id,
            ),
        )
    return JSONResponse(_config_json(await _get_row(db, config_id)))


ROUTES = [
    Route("/v1/data/id/{config_id}", get_by_id, methods=["GET"]),
    Route("/v1/data/name/{name}", get_by_name, methods=["GET"]),
    Route("/v1/data/configs/all", list_all, methods=["GET"]),
    Route("/v1/data/validate", validate, methods=["POST"]),
    Route("/v1/data", create, methods=["POST"]),
    Route("/v1/data/{config_id}", update, methods=["PUT"]),
]
