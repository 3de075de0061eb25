"""The local ``apply_*`` edits of a table config (§3.5.3 of the reference).

These never call the backend: they take the config the model got from
``get_table_config`` (or the previous ``apply_*``), change one aspect of its first data
source, validate the result and hand it back. Working on dicts, unknown keys survive the
round trip (the original re-encoded through typed structs and dropped them).
"""

from __future__ import annotations

import copy
from typing import Any

from agenttools.tables.config_rules import validate_table_config

__all__ = [
    "PG_TYPES_BY_VISUAL",
    "OperationError",
    "apply_column_change",
    "apply_filter_change",
    "apply_join_change",
    "apply_sort_change",
    "map_pg_type",
]


class OperationError(Exception):
    """The requested operation cannot be applied; the message is for the model."""


PG_TYPES_BY_VISUAL: dict[str, tuple[str, ...]] = {
    "string": ("character varying", "varchar", "character", "char", "text", "citext", "json", "jsonb"),
    "number": (
        "integer", "bigint", "smallint", "numeric", "decimal", "real", "double precision",
        "serial", "bigserial", "smallserial", "money",
    ),
    "datetime": (
        "timestamp", "timestamp without time zone", "timestamp with time zone", "date", "time",
        "time without time zone", "time with time zone", "interval",
    ),
    "boolean": ("boolean",),
    "uuid": ("uuid",),
}
_PG_TO_VISUAL = {pg: visual for visual, pgs in PG_TYPES_BY_VISUAL.items() for pg in pgs}


def map_pg_type(pg_type: str) -> str:
    """PostgreSQL type → column visual type (``string`` when unknown or an array)."""
    low = pg_type.strip().lower()
    if "array" in low or low.endswith("[]"):
        return "string"
    if low in _PG_TO_VISUAL:
        return _PG_TO_VISUAL[low]
    base = low.split("(", 1)[0].strip()
    return _PG_TO_VISUAL.get(base, "string")


def _operation(op: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(op, str) or op.strip().lower() not in allowed:
        quoted = [f"'{a}'" for a in allowed]
        choices = " or ".join(quoted) if len(quoted) == 2 else ", ".join(quoted[:-1]) + f", or {quoted[-1]}"
        raise OperationError(f"operation must be {choices}")
    return op.strip().lower()


def _prepare(config: Any, *, ensure_visual: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Deep copy of ``config`` and its first data source."""
    if config is None:
        raise OperationError("config is required: pass the config from get_table_config or the last apply_* result")
    if not isinstance(config, dict):
        raise OperationError("config must be a JSON object (the config from get_table_config)")
    cfg = copy.deepcopy(config)
    sources = cfg.get("data_source")
    if not isinstance(sources, list) or not sources or not isinstance(sources[0], dict):
        raise OperationError("config has no data_source")
    ds = sources[0]
    if ensure_visual:
        vs = cfg.get("visual_settings")
        if not isinstance(vs, dict):
            vs = cfg["visual_settings"] = {}
        if not isinstance(vs.get("columns"), dict):
            vs["columns"] = {}
    return cfg, ds


def _select(ds: dict[str, Any]) -> dict[str, Any]:
    select = ds.get("select")
    if not isinstance(select, dict):
        select = ds["select"] = {}
    if not isinstance(select.get("columns"), list):
        select["columns"] = []
    return select


def _visual_columns(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["visual_settings"]["columns"]  # type: ignore[no-any-return]


def _result(cfg: dict[str, Any], applied: list[str]) -> dict[str, Any]:
    report = validate_table_config(cfg)
    if report.valid:
        return {"valid": True, "warnings": report.warnings, "applied": applied, "config": cfg}
    return {
        "valid": False,
        "warnings": report.warnings,
        "applied": applied,
        "errors": report.errors,
        "config": None,
        "message": "The change leaves the config invalid; nothing was kept. Fix the errors and try again.",
    }


def _str(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return v.strip() if isinstance(v, str) else ""


def _matches(col: Any, *names: str) -> bool:
    if not isinstance(col, dict):
        return False
    own = {_str(col, "name"), _str(col, "alias")} - {""}
    return bool(own & {n for n in names if n})


def _next_order(visual: dict[str, Any]) -> int | float | None:
    """When visible columns are ordered, a new visible column goes last (order is all or nothing)."""
    orders = [
        v["order"]
        for v in visual.values()
        if isinstance(v, dict)
        and v.get("hidden") is not True
        and isinstance(v.get("order"), (int, float))
        and v["order"]
    ]
    return max(orders) + 10 if orders else None


def apply_column_change(config: Any, operation: Any, columns: Any) -> dict[str, Any]:
    op = _operation(operation, ("add", "remove"))
    cfg, ds = _prepare(config)
    if not isinstance(columns, list) or not columns:
        raise OperationError("columns must not be empty")
    for c in columns:
        if not isinstance(c, dict) or not _str(c, "name"):
            raise OperationError("each column must have a name")
    select = _select(ds)
    visual = _visual_columns(cfg)
    applied: list[str] = []
    for c in columns:
        name, alias = _str(c, "name"), _str(c, "alias")
        field = alias or name
        if op == "add":
            if any(_matches(sc, name, alias) for sc in select["columns"]):
                applied.append(f"{field} already exists, skipped")
                continue
            entry: dict[str, Any] = {"name": name}
            if alias:
                entry["alias"] = alias
            select["columns"].append(entry)
            pg_type = _str(c, "pg_type")
            vtype = map_pg_type(pg_type) if pg_type else "string"
            hidden = c.get("hidden") is True
            vcol: dict[str, Any] = {"name": field, "header": field}
            if hidden:
                vcol["hidden"] = True
            else:
                vcol["type"] = vtype
            if vtype == "datetime":
                vcol["format"] = {"type": "date" if pg_type.lower() == "date" else "datetime", "format": "yyyy-MM-dd"}
            if not hidden and (order := _next_order(visual)) is not None:
                vcol["order"] = order
            visual[field] = vcol
            applied.append(f"{field} added to select.columns and visual_settings.columns")
        else:
            before = len(select["columns"])
            select["columns"] = [sc for sc in select["columns"] if not _matches(sc, name, alias)]
            if len(select["columns"]) == before:
                applied.append(f"{field} not found in select.columns")
                continue
            visual.pop(field, None)
            if alias:
                visual.pop(name, None)
            applied.append(f"{field} removed from select.columns and visual_settings.columns")
    return _result(cfg, applied)


def apply_filter_change(config: Any, operation: Any, filter_: Any) -> dict[str, Any]:
    op = _operation(operation, ("add", "remove"))
    cfg, ds = _prepare(config)
    if not isinstance(filter_, dict) or not _str(filter_, "column"):
        raise OperationError("filter.column is required")
    column = _str(filter_, "column")
    filters = ds.get("filters")
    if not isinstance(filters, list):
        filters = ds["filters"] = []
    applied: list[str] = []
    if op == "add":
        operator = _str(filter_, "operator")
        if not operator:
            raise OperationError("filter.operator is required for 'add' operation")
        select = _select(ds)
        visual = _visual_columns(cfg)
        if not any(_matches(sc, column) for sc in select["columns"]) and column not in visual:
            select["columns"].append({"name": column})
            visual[column] = {"name": column, "header": column, "hidden": True}
            applied.append(f"auto-added {column} as hidden column for filter")
        entry: dict[str, Any] = {"column": column, "operator": operator, "value": filter_.get("value")}
        for key in ("label", "control_type"):
            if _str(filter_, key):
                entry[key] = _str(filter_, key)
        filters.append(entry)
        applied.append(f"filter on {column} ({operator}) added")
    else:
        index = next((i for i, f in enumerate(filters) if isinstance(f, dict) and f.get("column") == column), None)
        if index is None:
            applied.append(f"no filter on {column} found")
        else:
            filters.pop(index)
            applied.append(f"filter on {column} removed")
    return _result(cfg, applied)


def _foreign_field_names(ft: dict[str, Any]) -> list[str]:
    names: list[str] = []
    for c in ft.get("columns") or []:
        if isinstance(c, dict):
            field = _str(c, "alias") or _str(c, "table_column") or _str(c, "name")
            if field:
                names.append(field)
    for nested in ft.get("foreign_tables") or []:
        if isinstance(nested, dict):
            names.extend(_foreign_field_names(nested))
    return names


def apply_join_change(config: Any, operation: Any, join: Any) -> dict[str, Any]:
    op = _operation(operation, ("add", "remove"))
    cfg, ds = _prepare(config)
    if not isinstance(join, dict) or not _str(join, "table"):
        raise OperationError("join.table is required")
    table, schema = _str(join, "table"), _str(join, "schema")
    select = _select(ds)
    foreign = select.get("foreign_tables")
    if not isinstance(foreign, list):
        foreign = select["foreign_tables"] = []
    visual = _visual_columns(cfg)
    label = f"{schema}.{table}" if schema else table
    applied: list[str] = []
    if op == "add":
        rel_from, rel_to = _str(join, "relationship_from"), _str(join, "relationship_to")
        if not rel_from:
            raise OperationError("join.relationship_from is required")
        if not rel_to:
            raise OperationError("join.relationship_to is required")
        join_type = (_str(join, "join_type") or "left").lower()
        same = sum(
            1
            for ft in foreign
            if isinstance(ft, dict)
            and _str(ft, "table").lower() == table.lower()
            and _str(ft, "schema").lower() == schema.lower()
        )
        cols = [c.strip() for c in join.get("columns_to_add") or [] if isinstance(c, str) and c.strip()]
        entry: dict[str, Any] = {
            "table": table,
            "relationship_from": rel_from,
            "relationship_to": rel_to,
            "join_type": join_type,
            "columns": [{"name": c} for c in cols],
        }
        if schema:
            entry["schema"] = schema
        if same:
            entry["alias"] = f"{table}_{same + 1}"
            applied.append(f"disambiguation alias assigned: {entry['alias']}")
        foreign.append(entry)
        for c in cols:
            if c not in visual:
                # Unlike the original, joined columns also join an existing column order.
                vcol: dict[str, Any] = {"name": c, "header": c, "type": "string"}
                if (order := _next_order(visual)) is not None:
                    vcol["order"] = order
                visual[c] = vcol
        applied.append(f"joined {label} ({join_type}) with {len(cols)} columns")
    else:
        index = next(
            (
                i
                for i, ft in enumerate(foreign)
                if isinstance(ft, dict)
                and _str(ft, "table").lower() == table.lower()
                and (not schema or _str(ft, "schema").lower() == schema.lower())
            ),
            None,
        )
        if index is None:
            applied.append(f"no join to {label} found")
        else:
            removed = foreign.pop(index)
            names = _foreign_field_names(removed)
            for n in names:
                visual.pop(n, None)
            applied.append(f"removed join to {label} and {len(names)} associated columns")
    return _result(cfg, applied)


def apply_sort_change(config: Any, operation: Any, sort: Any) -> dict[str, Any]:
    op = _operation(operation, ("add", "remove", "set"))
    cfg, ds = _prepare(config, ensure_visual=False)
    if sort is None:
        sort = []
    if not isinstance(sort, list):
        raise OperationError("sort must be an array of {column, direction, priority}")
    items: list[dict[str, Any]] = []
    for s in sort:
        if not isinstance(s, dict) or not _str(s, "column"):
            raise OperationError("each sort item must have a column")
        direction = (_str(s, "direction") or "asc").lower()
        if direction not in ("asc", "desc"):
            raise OperationError(f"sort direction must be asc or desc, got {direction!r}")
        item: dict[str, Any] = {"column": _str(s, "column"), "direction": direction}
        if s.get("priority") is not None:
            item["priority"] = s["priority"]
        items.append(item)
    current = ds.get("sort")
    if not isinstance(current, list):
        current = []
    applied: list[str] = []
    if op == "set":
        ds["sort"] = items
        applied.append(f"sort replaced with {len(items)} entries")
    elif op == "add":
        ds["sort"] = current + items
        applied.extend(f"sort by {i['column']} {i['direction']} added" for i in items)
    else:
        drop = {i["column"] for i in items}
        ds["sort"] = [s for s in current if not (isinstance(s, dict) and s.get("column") in drop)]
        applied.extend(
            f"sort by {c} removed"
            for c in dict.fromkeys(s.get("column") for s in current if isinstance(s, dict) and s.get("column") in drop)
        )
    return _result(cfg, applied)
