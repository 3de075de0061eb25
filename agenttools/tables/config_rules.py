"""Table-config validation (Appendix B of the reference), run locally.

``preview_table_config``, the write tools and every ``apply_*`` result are judged here, so
the model learns what is wrong before the user sees anything. Issues are plain dicts
``{"field", "message", "code"}`` (warnings without ``code``); the preview event turns them
into ``"<field>: <message>"`` strings. Type mistakes (a string where a number belongs) are
reported as errors instead of crashing, like the original's strict decoding.

A column's date format is judged by the backend's own check (``backend.date_formats``, the
one module of ``backend`` the agent imports): the tool and the backend's write must not
disagree about it, as in the Go original, where both ran ``ValidateConfig`` from one package
(``business/sdk/tablebuilder``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from backend.date_formats import date_format_problem

__all__ = ["COLUMN_VISUAL_TYPES", "IDENT_RE", "ConfigReport", "validate_table_config"]

IDENT_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*(\.[a-zA-Z_][a-zA-Z0-9_]*)*$")

WIDGET_TYPES = ("table", "chart")
REFRESH_MODES = ("polling", "manual")
SOURCE_TYPES = ("query", "view", "viewcount", "rpc")
FILTER_OPERATORS = ("eq", "neq", "gt", "gte", "lt", "lte", "in", "like", "ilike", "is_null", "is_not_null")
JOIN_TYPES = ("inner", "left", "right", "full")
SORT_DIRECTIONS = ("asc", "desc")
RELATIONSHIP_DIRECTIONS = ("parent_to_child", "child_to_parent")
METRIC_FUNCTIONS = ("sum", "count", "count_distinct", "avg", "min", "max")
METRIC_OPERATORS = ("multiply", "add", "subtract", "divide")
GROUP_INTERVALS = ("day", "week", "month", "quarter", "year")
COLUMN_VISUAL_TYPES = ("string", "number", "datetime", "boolean", "uuid", "status", "computed", "lookup")
ALIGNMENTS = ("left", "center", "right")
FORMAT_TYPES = ("number", "currency", "date", "datetime", "boolean", "percent")
EDITABLE_TYPES = ("text", "number", "checkbox", "boolean", "select", "date", "textarea")
ACTION_TYPES = ("link", "modal", "export", "print", "custom")
PERMISSION_ACTIONS = ("view", "edit", "delete", "export", "create", "adjust", "approve", "reject")

_EXPR_HELPERS = {"ceil", "floor", "round", "now", "daysUntil", "daysSince", "isOverdue", "hasValue"}
_EXPR_LITERALS = {"true", "false", "null", "nil"}
_EXPR_METHODS = {"toFixed", "toString", "toUpperCase", "toLowerCase"}
_EXPR_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_EXPR_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")


@dataclass(slots=True)
class ConfigReport:
    errors: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors

    def error(self, where: str, message: str, code: str) -> None:
        self.errors.append({"field": where, "message": message, "code": code})

    def warn(self, where: str, message: str) -> None:
        self.warnings.append({"field": where, "message": message})


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _list(r: ConfigReport, value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        r.error(where, "must be an array", "INVALID_TYPE")
        return []
    return value


def _obj(r: ConfigReport, value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        r.error(where, "must be an object", "INVALID_TYPE")
        return None
    return value


def _str(r: ConfigReport, d: dict[str, Any], key: str, where: str) -> str:
    v = d.get(key)
    if v is None:
        return ""
    if not isinstance(v, str):
        r.error(f"{where}.{key}" if where else key, "must be a string", "INVALID_TYPE")
        return ""
    return v


def _nonneg(r: ConfigReport, d: dict[str, Any], key: str, where: str) -> None:
    v = d.get(key)
    path = f"{where}.{key}" if where else key
    if v is None:
        return
    if not _is_num(v):
        r.error(path, "must be a number", "INVALID_TYPE")
    elif v < 0:
        r.error(path, "must be zero or more", "INVALID_VALUE")


def _enum(r: ConfigReport, value: str, allowed: Iterable[str], where: str) -> None:
    allowed = tuple(allowed)
    if value and value not in allowed:
        r.error(where, f"{value!r} is not one of {', '.join(allowed)}", "INVALID_VALUE")


def _ident(r: ConfigReport, value: str, where: str) -> None:
    if value and not IDENT_RE.match(value):
        r.error(where, f"{value!r} is not a valid column identifier", "INVALID_FORMAT")


def _field_name(col: dict[str, Any]) -> str:
    for key in ("alias", "table_column", "name"):
        v = col.get(key)
        if isinstance(v, str) and v:
            return v
    return ""


def _check_columns(r: ConfigReport, cols: list[Any], where: str, names: list[str]) -> None:
    for i, col in enumerate(cols):
        path = f"{where}[{i}]"
        if not isinstance(col, dict):
            r.error(path, "must be an object", "INVALID_TYPE")
            continue
        name, alias, tcol = _str(r, col, "name", path), _str(r, col, "alias", path), _str(r, col, "table_column", path)
        if not name and not tcol:
            r.error(f"{path}.name", "name or table_column is required", "REQUIRED")
        _ident(r, name, f"{path}.name")
        _ident(r, alias, f"{path}.alias")
        _ident(r, tcol, f"{path}.table_column")
        if fname := _field_name(col):
            names.append(fname)


def _check_foreign(r: ConfigReport, tables: list[Any], where: str, names: list[str]) -> None:
    for i, ft in enumerate(tables):
        path = f"{where}[{i}]"
        if not isinstance(ft, dict):
            r.error(path, "must be an object", "INVALID_TYPE")
            continue
        if not _str(r, ft, "table", path):
            r.error(f"{path}.table", "table is required", "REQUIRED")
        for key in ("relationship_from", "relationship_to"):
            v = _str(r, ft, key, path)
            if not v:
                r.error(f"{path}.{key}", f"{key} is required", "REQUIRED")
            _ident(r, v, f"{path}.{key}")
        _enum(r, _str(r, ft, "join_type", path).lower(), JOIN_TYPES, f"{path}.join_type")
        _enum(r, _str(r, ft, "relationship_direction", path), RELATIONSHIP_DIRECTIONS, f"{path}.relationship_direction")
        _check_columns(r, _list(r, ft.get("columns"), f"{path}.columns"), f"{path}.columns", names)
        _check_foreign(r, _list(r, ft.get("foreign_tables"), f"{path}.foreign_tables"), f"{path}.foreign_tables", names)


def _check_expression(r: ConfigReport, expr: str, known: set[str], where: str) -> None:
    stripped = _EXPR_STRING.sub(" ", expr)
    for m in _EXPR_IDENT.finditer(stripped):
        start = m.start()
        if start > 0 and (stripped[start - 1].isdigit() or stripped[start - 1] == "."):
            continue
        ident = m.group(0)
        head = ident.split(".")[0]
        if head in _EXPR_HELPERS or head in _EXPR_LITERALS:
            continue
        parts = ident.split(".")
        while parts and parts[-1] in _EXPR_METHODS:
            parts.pop()
        ident = ".".join(parts)
        if not ident or ident in known or ident.replace(".", "_") in known:
            continue
        r.error(where, f"expression references unknown field {ident!r}", "INVALID_FIELD_REFERENCE")


def _check_data_source(r: ConfigReport, ds: Any, i: int) -> tuple[list[str], list[str], list[str]]:
    """Returns (select field names, foreign field names, computed names)."""
    path = f"data_source[{i}]"
    select_names: list[str] = []
    foreign_names: list[str] = []
    computed: list[str] = []
    if not isinstance(ds, dict):
        r.error(path, "must be an object", "INVALID_TYPE")
        return select_names, foreign_names, computed
    if not _str(r, ds, "source", path):
        r.error(f"{path}.source", "source is required", "REQUIRED")
    _enum(r, _str(r, ds, "type", path), SOURCE_TYPES, f"{path}.type")
    _nonneg(r, ds, "rows", path)
    select = _obj(r, ds.get("select"), f"{path}.select") or {}
    _check_columns(r, _list(r, select.get("columns"), f"{path}.select.columns"), f"{path}.select.columns", select_names)
    foreign = _list(r, select.get("foreign_tables"), f"{path}.select.foreign_tables")
    _check_foreign(r, foreign, f"{path}.select.foreign_tables", foreign_names)
    comp = _list(r, select.get("client_computed_columns"), f"{path}.select.client_computed_columns")
    for c in comp:
        if isinstance(c, dict) and isinstance(c.get("name"), str) and c["name"]:
            computed.append(c["name"])
    known = set(select_names) | set(foreign_names) | set(computed)
    for j, c in enumerate(comp):
        cpath = f"{path}.select.client_computed_columns[{j}]"
        if not isinstance(c, dict):
            r.error(cpath, "must be an object", "INVALID_TYPE")
            continue
        name = _str(r, c, "name", cpath)
        if not name:
            r.error(f"{cpath}.name", "name is required", "REQUIRED")
        _ident(r, name, f"{cpath}.name")
        expr = _str(r, c, "expression", cpath)
        if not expr:
            r.error(f"{cpath}.expression", "expression is required", "REQUIRED")
        else:
            _check_expression(r, expr, known, f"{cpath}.expression")
    for j, f in enumerate(_list(r, ds.get("filters"), f"{path}.filters")):
        fpath = f"{path}.filters[{j}]"
        if not isinstance(f, dict):
            r.error(fpath, "must be an object", "INVALID_TYPE")
            continue
        col = _str(r, f, "column", fpath)
        if not col:
            r.error(f"{fpath}.column", "column is required", "REQUIRED")
        _ident(r, col, f"{fpath}.column")
        op = _str(r, f, "operator", fpath)
        if not op:
            r.error(f"{fpath}.operator", "operator is required", "REQUIRED")
        _enum(r, op, FILTER_OPERATORS, f"{fpath}.operator")
    for j, s in enumerate(_list(r, ds.get("sort"), f"{path}.sort")):
        spath = f"{path}.sort[{j}]"
        if not isinstance(s, dict):
            r.error(spath, "must be an object", "INVALID_TYPE")
            continue
        col = _str(r, s, "column", spath)
        if not col:
            r.error(f"{spath}.column", "column is required", "REQUIRED")
        _ident(r, col, f"{spath}.column")
        direction = _str(r, s, "direction", spath)
        if not direction:
            r.error(f"{spath}.direction", "direction is required", "REQUIRED")
        _enum(r, direction, SORT_DIRECTIONS, f"{spath}.direction")
        _nonneg(r, s, "priority", spath)
    for j, jn in enumerate(_list(r, ds.get("joins"), f"{path}.joins")):
        jpath = f"{path}.joins[{j}]"
        if not isinstance(jn, dict):
            r.error(jpath, "must be an object", "INVALID_TYPE")
            continue
        for key in ("table", "type", "on"):
            if not _str(r, jn, key, jpath):
                r.error(f"{jpath}.{key}", f"{key} is required", "REQUIRED")
        _enum(r, _str(r, jn, "type", jpath), JOIN_TYPES, f"{jpath}.type")
    for j, m in enumerate(_list(r, ds.get("metrics"), f"{path}.metrics")):
        mpath = f"{path}.metrics[{j}]"
        if not isinstance(m, dict):
            r.error(mpath, "must be an object", "INVALID_TYPE")
            continue
        _enum(r, _str(r, m, "function", mpath), METRIC_FUNCTIONS, f"{mpath}.function")
        has_col, metric_expr = bool(m.get("column")), _obj(r, m.get("expression"), f"{mpath}.expression")
        if has_col == bool(metric_expr):
            r.error(mpath, "a metric needs exactly one of column or expression", "INVALID_VALUE")
        if metric_expr:
            _enum(r, _str(r, metric_expr, "operator", f"{mpath}.expression"), METRIC_OPERATORS,
                  f"{mpath}.expression.operator")
            cols = _list(r, metric_expr.get("columns"), f"{mpath}.expression.columns")
            if len(cols) < 2:
                r.error(f"{mpath}.expression.columns", "needs at least 2 columns", "INVALID_VALUE")
            for k, c in enumerate(cols):
                _ident(r, c if isinstance(c, str) else "", f"{mpath}.expression.columns[{k}]")
    for j, g in enumerate(_list(r, ds.get("group_by"), f"{path}.group_by")):
        gpath = f"{path}.group_by[{j}]"
        if not isinstance(g, dict):
            r.error(gpath, "must be an object", "INVALID_TYPE")
            continue
        col = _str(r, g, "column", gpath)
        if not col:
            r.error(f"{gpath}.column", "column is required", "REQUIRED")
        _enum(r, _str(r, g, "interval", gpath), GROUP_INTERVALS, f"{gpath}.interval")
        if g.get("expression") is not True:
            _ident(r, col, f"{gpath}.column")
            _ident(r, _str(r, g, "alias", gpath), f"{gpath}.alias")
    return select_names, foreign_names, computed


def _is_id_name(name: str) -> bool:
    low = name.lower()
    return low == "id" or low.endswith(".id") or low.endswith("_id")


def _check_visual_column(r: ConfigReport, key: str, col: dict[str, Any]) -> None:
    path = f"visual_settings.columns.{key}"
    header = _str(r, col, "header", path)
    if header.strip().lower() == "id" or header.strip().lower().endswith(" id"):
        r.error(
            f"{path}.header",
            f"visible column header {header!r} shows an id; hide the column or rename it",
            "VISIBLE_ID_HEADER",
        )
    ctype = _str(r, col, "type", path)
    if not ctype:
        r.error(f"{path}.type", "type is required for a visible column", "REQUIRED")
    _enum(r, ctype, COLUMN_VISUAL_TYPES, f"{path}.type")
    _enum(r, _str(r, col, "align", path), ALIGNMENTS, f"{path}.align")
    _nonneg(r, col, "width", path)
    fmt = _obj(r, col.get("format"), f"{path}.format")
    if fmt:
        ftype = _str(r, fmt, "type", f"{path}.format")
        _enum(r, ftype, FORMAT_TYPES, f"{path}.format.type")
        _nonneg(r, fmt, "precision", f"{path}.format")
        if ftype in ("date", "datetime"):
            pattern = _str(r, fmt, "format", f"{path}.format")
            problem = date_format_problem(pattern) if pattern else None
            if problem:
                r.error(f"{path}.format.format", problem, "INVALID_FORMAT")
    if ctype == "datetime" and not (fmt and fmt.get("format")):
        r.error(f"{path}.format", "a datetime column needs a date-fns format, e.g. yyyy-MM-dd", "REQUIRED")
    editable = _obj(r, col.get("editable"), f"{path}.editable")
    if editable is not None:
        etype = _str(r, editable, "type", f"{path}.editable")
        if not etype:
            r.error(f"{path}.editable.type", "type is required", "REQUIRED")
        _enum(r, etype, EDITABLE_TYPES, f"{path}.editable.type")
    if ctype == "lookup":
        lookup = _obj(r, col.get("lookup"), f"{path}.lookup") or {}
        for k in ("entity", "label_column", "value_column"):
            if not lookup.get(k):
                r.error(f"{path}.lookup.{k}", f"a lookup column needs lookup.{k}", "REQUIRED")
    link = _obj(r, col.get("link"), f"{path}.link")
    if link is not None:
        if not link.get("url"):
            r.error(f"{path}.link.url", "url is required", "REQUIRED")
        if not link.get("label") and not link.get("label_column"):
            r.error(f"{path}.link", "label or label_column is required", "REQUIRED")
        if link.get("label_column") and _is_id_name(str(col.get("name") or key)):
            r.error(f"{path}.link.label_column", "an id column cannot use label_column for its link", "INVALID_VALUE")


def _check_visual(r: ConfigReport, vs: dict[str, Any], needed: list[str]) -> None:
    cols = _obj(r, vs.get("columns"), "visual_settings.columns") or {}
    with_order: list[str] = []
    without_order: list[str] = []
    label_columns: set[str] = set()
    for col in cols.values():
        if isinstance(col, dict) and isinstance(col.get("link"), dict) and col["link"].get("label_column"):
            label_columns.add(str(col["link"]["label_column"]))
    for key in sorted(cols):
        col = cols[key]
        if not isinstance(col, dict):
            r.error(f"visual_settings.columns.{key}", "must be an object", "INVALID_TYPE")
            continue
        order = col.get("order")
        if order is not None and not _is_num(order):
            r.error(f"visual_settings.columns.{key}.order", "must be a number", "INVALID_TYPE")
            order = None
        if col.get("hidden") is True:
            if order:
                r.warn(f"visual_settings.columns.{key}.order", "a hidden column's order has no effect")
            continue
        _check_visual_column(r, key, col)
        if order:
            if not -1000 <= order <= 1000:
                r.error(f"visual_settings.columns.{key}.order", "order must be between -1000 and 1000", "INVALID_VALUE")
            with_order.append(key)
        else:
            without_order.append(key)
    if with_order and without_order:
        r.error(
            "visual_settings.columns",
            f"either every visible column has an order or none does; with order: {', '.join(sorted(with_order))}; "
            f"without: {', '.join(sorted(without_order))}",
            "STRICT_ORDER",
        )
    for name in needed:
        if name in label_columns:
            continue
        col = cols.get(name)
        if col is None:
            r.error(
                f"visual_settings.columns.{name}",
                f"selected column {name!r} has no visual settings",
                "MISSING_VISUAL_SETTINGS",
            )
        elif isinstance(col, dict) and col.get("hidden") is not True and not col.get("type"):
            pass  # already reported by _check_visual_column
    pag = _obj(r, vs.get("pagination"), "visual_settings.pagination")
    if pag:
        sizes = _list(r, pag.get("page_sizes"), "visual_settings.pagination.page_sizes")
        if any(not _is_num(s) or s <= 0 for s in sizes):
            r.error("visual_settings.pagination.page_sizes", "page sizes must be positive numbers", "INVALID_VALUE")
        default = pag.get("default_page_size")
        if default is not None and (not _is_num(default) or default < 0):
            r.error("visual_settings.pagination.default_page_size", "must be zero or more", "INVALID_VALUE")
        elif default and sizes and default not in sizes:
            r.warn("visual_settings.pagination.default_page_size", "the default page size is not one of page_sizes")
    for j, cf in enumerate(_list(r, vs.get("conditional_formatting"), "visual_settings.conditional_formatting")):
        path = f"visual_settings.conditional_formatting[{j}]"
        if not isinstance(cf, dict):
            r.error(path, "must be an object", "INVALID_TYPE")
            continue
        if not cf.get("column"):
            r.error(f"{path}.column", "column is required", "REQUIRED")
        cond = _str(r, cf, "condition", path)
        if not cond:
            r.error(f"{path}.condition", "condition is required", "REQUIRED")
        _enum(r, cond, FILTER_OPERATORS, f"{path}.condition")
        _enum(r, _str(r, cf, "condition2", path), FILTER_OPERATORS, f"{path}.condition2")
    for group in ("row_actions", "table_actions"):
        actions = _obj(r, vs.get(group), f"visual_settings.{group}") or {}
        for key in sorted(actions):
            a = actions[key]
            path = f"visual_settings.{group}.{key}"
            if not isinstance(a, dict):
                r.error(path, "must be an object", "INVALID_TYPE")
                continue
            for k in ("name", "label"):
                if not a.get(k):
                    r.error(f"{path}.{k}", f"{k} is required", "REQUIRED")
            atype = _str(r, a, "action_type", path)
            _enum(r, atype, ACTION_TYPES, f"{path}.action_type")
            if atype == "link" and not a.get("url"):
                r.error(f"{path}.url", "url is required for a link action", "REQUIRED")


def validate_table_config(config: Any) -> ConfigReport:
    r = ConfigReport()
    if not isinstance(config, dict):
        r.error("config", "config must be a JSON object", "INVALID_TYPE")
        return r
    if not _str(r, config, "title", ""):
        r.error("title", "title is required", "REQUIRED")
    widget = _str(r, config, "widget_type", "")
    _enum(r, widget, WIDGET_TYPES, "widget_type")
    _enum(r, _str(r, config, "refresh_mode", ""), REFRESH_MODES, "refresh_mode")
    for key in ("refresh_interval", "position_x", "position_y", "width", "height"):
        _nonneg(r, config, key, "")
    sources = _list(r, config.get("data_source"), "data_source")
    if not sources:
        r.error("data_source", "at least one data source is required", "REQUIRED")
    needed: list[str] = []
    for i, ds in enumerate(sources):
        select_names, foreign_names, computed = _check_data_source(r, ds, i)
        needed.extend(select_names + foreign_names + computed)
    vs = _obj(r, config.get("visual_settings"), "visual_settings")
    if widget != "chart":
        _check_visual(r, vs or {}, list(dict.fromkeys(needed)))
    perms = _obj(r, config.get("permissions"), "permissions") or {}
    for j, action in enumerate(_list(r, perms.get("actions"), "permissions.actions")):
        if action not in PERMISSION_ACTIONS:
            allowed = ", ".join(PERMISSION_ACTIONS)
            r.error(f"permissions.actions[{j}]", f"{action!r} is not one of {allowed}", "INVALID_VALUE")
    return r
