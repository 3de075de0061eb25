"""Handlers of the 12 table-configuration tools (§3.3, §3.5 of the reference).

Reads go to the backend with the caller's credentials; edits are local (``apply_*``);
and nothing is ever written without the user's approval — ``create_table_config`` and
``update_table_config`` validate and return a ``table_config_preview`` exactly like
``preview_table_config`` (the original wrote straight through, with a wrong body shape).
"""

from __future__ import annotations

import re
from typing import Any

from agenttools.core.backend_client import BackendError, build_path, require_object, require_sequence
from agenttools.core.ids import parse_uuid, uuid_error
from agenttools.core.previews import table_config_preview_outcome, table_config_validation_outcome
from agenttools.core.registry import ToolOutcome, ToolRegistry
from agenttools.core.tool_support import (
    CallScope,
    ToolInputError,
    WorkflowToolDeps,
    cap_items,
    guarded,
    object_arg,
    opt_str,
    req_str,
)
from agenttools.tables.config_rules import COLUMN_TYPES
from agenttools.tables.config_rules import validate_table_config as check_table_config
from agenttools.tables.ops import (
    PG_TYPES_BY_VISUAL,
    OperationError,
    apply_column_change,
    apply_filter_change,
    apply_join_change,
    apply_sort_change,
)

__all__ = ["TABLE_REFERENCE", "TABLE_TOOL_NAMES", "register_table_tools"]

_SQL_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")

TABLE_REFERENCE: dict[str, Any] = {
    "column_types": {
        "string": {"description": "Plain text", "pg_types": list(PG_TYPES_BY_VISUAL["string"])},
        "number": {"description": "Numeric value", "pg_types": list(PG_TYPES_BY_VISUAL["number"])},
        "datetime": {
            "description": "Date and/or time; needs a date-fns format",
            "pg_types": list(PG_TYPES_BY_VISUAL["datetime"]),
            "requires_format": True,
            "default_format": "yyyy-MM-dd",
        },
        "boolean": {"description": "True/false", "pg_types": ["boolean"]},
        "uuid": {"description": "Identifier (usually hidden)", "pg_types": ["uuid"]},
        "status": {"description": "Status badge"},
        "computed": {"description": "Value computed on the client from other columns"},
        "lookup": {"description": "Value looked up from another entity; needs a lookup config"},
    },
    "format_types": ["boolean", "currency", "date", "datetime", "number", "percent"],
    "editable_types": ["boolean", "checkbox", "date", "number", "select", "text", "textarea"],
    "filter_operators": {
        "eq": "equals",
        "gt": "greater than",
        "gte": "greater than or equal",
        "ilike": "matches pattern, case-insensitive",
        "in": "is one of a list",
        "is_not_null": "has a value",
        "is_null": "is empty",
        "like": "matches pattern",
        "lt": "less than",
        "lte": "less than or equal",
        "neq": "not equal",
    },
    "join_types": ["full", "inner", "left", "right"],
    "sort_directions": ["asc", "desc"],
    "alignments": ["center", "left", "right"],
    "date_format_examples": {
        "date": "yyyy-MM-dd",
        "datetime": "yyyy-MM-dd HH:mm:ss",
        "eu_date": "dd.MM.yyyy",
        "us_date": "MM/dd/yyyy",
        "us_datetime": "MM/dd/yyyy hh:mm a",
    },
    "validation_rules": [
        "Every visible column needs a type (" + ", ".join(COLUMN_TYPES) + ").",
        "datetime columns need a date-fns format such as yyyy-MM-dd (not Go layouts like 2006-01-02); "
        "literal letters go in single quotes: yyyy-MM-dd'T'HH:mm, dd.MM.yyyy 'at' HH:mm.",
        "Column order is all or nothing: either every visible column has an order or none does.",
        "Hidden columns are exempt from the type and order rules.",
        "Filter operators must suit the column's type.",
    ],
}


async def discover_table_reference(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    return ToolOutcome(content=TABLE_REFERENCE)


def _identifier(args: dict[str, Any], key: str) -> str:
    value = opt_str(args, key)
    if value and not _SQL_IDENT.match(value):
        raise ToolInputError(
            f"{key} must be a plain SQL identifier (letters, digits, underscores), got {value!r}"
        )
    return value


async def search_database_schema(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    schema, table = _identifier(args, "schema"), _identifier(args, "table")
    if not schema:
        rows = require_sequence(await s.client.get(build_path("v1", "introspection", "schemas")), "schemas")
        content: dict[str, Any] = {"schemas": rows}
        if table:
            content["note"] = "a table needs its schema too; pick a schema from this list and call again with both"
        return ToolOutcome(content=content)
    if not table:
        rows = require_sequence(
            await s.client.get(build_path("v1", "introspection", "schemas", schema, "tables")), "tables"
        )
        shown, note = cap_items(list(rows), s.deps.max_result_chars, what="tables")
        content = {"schema": schema, "tables": shown}
        if note:
            content["note"] = note
        return ToolOutcome(content=content)
    columns = require_sequence(
        await s.client.get(build_path("v1", "introspection", "tables", schema, table, "columns")), "columns"
    )
    content = {"schema": schema, "table": table, "columns": columns}
    try:
        content["relationships"] = require_sequence(
            await s.client.get(build_path("v1", "introspection", "tables", schema, table, "relationships")),
            "relationships",
        )
    except BackendError as exc:
        content["relationships_error"] = str(exc)
    return ToolOutcome(content=content)


def _config_id(args: dict[str, Any], *, required: bool) -> str | None:
    raw = opt_str(args, "id")
    if not raw:
        if required:
            raise ToolInputError("id is required: the UUID of the saved table configuration (or open it in the editor)")
        return None
    parsed = parse_uuid(raw)
    if parsed is None:
        raise ToolInputError(uuid_error("id", raw))
    return parsed


async def get_table_config(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    config_id = _config_id(args, required=False)
    if config_id:
        body = await s.client.get(build_path("v1", "data", "id", config_id))
    else:
        name = opt_str(args, "name")
        if not name:
            raise ToolInputError(
                "give the configuration's id or name (list_table_configs lists them), or open it in the editor"
            )
        body = await s.client.get(build_path("v1", "data", "name", name))
    return ToolOutcome(content=require_object(body, "table configuration"))


async def list_table_configs(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    rows = require_sequence(await s.client.get(build_path("v1", "data", "configs", "all")), "table configurations")
    items = sorted(
        (
            {
                "id": r.get("id"),
                "name": r.get("name"),
                "description": r.get("description") or "",
                "is_system": r.get("is_system", False),
                "updated_date": r.get("updated_date"),
            }
            for r in rows
            if isinstance(r, dict)
        ),
        key=lambda r: str(r["name"] or "").casefold(),
    )
    shown, note = cap_items(items, s.deps.max_result_chars, what="configurations")
    content: dict[str, Any] = {"total": len(items), "configs": shown}
    if note:
        content["note"] = note
    return ToolOutcome(content=content)


def _validation_name(args: dict[str, Any], config: dict[str, Any]) -> str:
    name = opt_str(args, "name") or (config.get("title") if isinstance(config.get("title"), str) else "") or ""
    name = name.strip()[:100]
    return name if len(name) >= 3 else (name + " config").strip()[:100]


async def validate_table_config(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    config = object_arg(args, "config", s.deps)
    body: dict[str, Any] = {"name": _validation_name(args, config), "config": config}
    if desc := opt_str(args, "description"):
        body["description"] = desc[:500]
    local = check_table_config(config)
    try:
        await s.client.post(build_path("v1", "data", "validate"), body)
        backend_errors: list[str] = []
    except BackendError as exc:
        if exc.status not in (400, 422):
            raise
        backend_errors = [str(exc)]
    valid = local.valid and not backend_errors
    content: dict[str, Any] = {
        "valid": valid,
        "errors": local.errors,
        "warnings": local.warnings,
    }
    if backend_errors:
        content["backend_errors"] = backend_errors
    return ToolOutcome(content=content)


def _preview_or_errors(
    config: dict[str, Any], *, description_of_changes: str, config_id: str | None, name: str | None
) -> ToolOutcome:
    report = check_table_config(config)
    if not report.valid:
        return table_config_validation_outcome(errors=report.errors, warnings=report.warnings)
    return table_config_preview_outcome(
        config=config,
        description_of_changes=description_of_changes,
        config_id=config_id,
        name=name,
        warnings=report.warnings,
    )


async def preview_table_config(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    config = object_arg(args, "config", s.deps)
    changes = req_str(args, "description_of_changes", "one or two sentences telling the user what changed")
    return _preview_or_errors(
        config,
        description_of_changes=changes,
        config_id=_config_id(args, required=False),
        name=opt_str(args, "name") or None,
    )


def _checked_name(args: dict[str, Any], *, required: bool) -> str:
    name = opt_str(args, "name")
    if not name:
        if required:
            raise ToolInputError("name is required (3 to 100 characters)")
        return ""
    if not 3 <= len(name) <= 100:
        raise ToolInputError(f"name must be 3 to 100 characters, got {len(name)}")
    return name


async def create_table_config(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    """Gated write: validates and previews a new config; the user's approval creates it."""
    name = _checked_name(args, required=True)
    config = object_arg(args, "config", s.deps)
    changes = (
        opt_str(args, "description_of_changes") or opt_str(args, "description") or f'New table configuration "{name}".'
    )
    return _preview_or_errors(config, description_of_changes=changes, config_id=None, name=name)


async def update_table_config(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    """Gated write: validates and previews the replacement; the user's approval stores it."""
    config_id = _config_id(args, required=True)
    name = _checked_name(args, required=False)
    config = object_arg(args, "config", s.deps)
    changes = opt_str(args, "description_of_changes") or "Updated table configuration."
    return _preview_or_errors(config, description_of_changes=changes, config_id=config_id, name=name or None)


def _op_outcome(fn: Any, *op_args: Any) -> ToolOutcome:
    try:
        return ToolOutcome(content=fn(*op_args))
    except OperationError as exc:
        return ToolOutcome.error(str(exc))


async def apply_column_change_tool(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    config = object_arg(args, "config", s.deps)
    return _op_outcome(apply_column_change, config, args.get("operation"), args.get("columns"))


async def apply_filter_change_tool(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    config = object_arg(args, "config", s.deps)
    return _op_outcome(apply_filter_change, config, args.get("operation"), args.get("filter"))


async def apply_join_change_tool(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    return _op_outcome(apply_join_change, object_arg(args, "config", s.deps), args.get("operation"), args.get("join"))


async def apply_sort_change_tool(args: dict[str, Any], s: CallScope) -> ToolOutcome:
    return _op_outcome(apply_sort_change, object_arg(args, "config", s.deps), args.get("operation"), args.get("sort"))


_HANDLERS = {
    "discover_table_reference": discover_table_reference,
    "search_database_schema": search_database_schema,
    "get_table_config": get_table_config,
    "list_table_configs": list_table_configs,
    "validate_table_config": validate_table_config,
    "preview_table_config": preview_table_config,
    "create_table_config": create_table_config,
    "update_table_config": update_table_config,
    "apply_column_change": apply_column_change_tool,
    "apply_filter_change": apply_filter_change_tool,
    "apply_join_change": apply_join_change_tool,
    "apply_sort_change": apply_sort_change_tool,
}

TABLE_TOOL_NAMES: tuple[str, ...] = tuple(_HANDLERS)


def register_table_tools(registry: ToolRegistry, deps: WorkflowToolDeps) -> None:
    """Attach a handler to each table tool the registry (catalog) declares."""
    for name, fn in _HANDLERS.items():
        if name in registry:
            registry.set_handler(name, guarded(name, deps, fn))

