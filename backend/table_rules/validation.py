"""The rules of Ichor's ``ValidateConfig()`` (reference Appendix B), for the backend and the tools.

``validate_table_config(config)`` returns every error (``field``, ``message``, ``code``) and
warning (``field``, ``message``) at once. Field paths look like
``data_source[0].filters[1].column`` or ``visual_settings.columns.total.format``.

The original decoded the config into typed structs first, so a string where a number
belongs failed the whole decode; here such a value is reported as an ``INVALID_TYPE``
error on that field and the rest of the config is still checked.
"""

from __future__ import annotations

import re
from typing import Any

from backend.table_rules.date_formats import date_format_problem
from backend.table_rules.reader import ConfigReader, TableConfigReport

WIDGET_TYPES = ("table", "chart")
REFRESH_MODES = ("polling", "manual")
SOURCE_TYPES = ("query", "view", "viewcount", "rpc")
FILTER_OPERATORS = ("eq", "neq", "gt", "gte", "lt", "lte", "in", "like", "ilike", "is_null", "is_not_null")
SORT_DIRECTIONS = ("asc", "desc")
JOIN_TYPES = ("inner", "left", "right", "full")
RELATIONSHIP_DIRECTIONS = ("parent_to_child", "child_to_parent")
METRIC_FUNCTIONS = ("sum", "count", "count_distinct", "avg", "min", "max")
EXPRESSION_OPERATORS = ("multiply", "add", "subtract", "divide")
GROUP_INTERVALS = ("day", "week", "month", "quarter", "year")
COLUMN_TYPES = ("string", "number", "datetime", "boolean", "uuid", "status", "computed", "lookup")
ALIGNMENTS = ("left", "center", "right")
FORMAT_TYPES = ("number", "currency", "date", "datetime", "boolean", "percent")
EDITABLE_TYPES = ("text", "number", "checkbox", "boolean", "select", "date", "textarea")
ACTION_TYPES = ("link", "modal", "export", "print", "custom")
PERMISSION_ACTIONS = ("view", "edit", "delete", "export", "create", "adjust", "approve", "reject")
_EXPRESSION_HELPERS = frozenset({"ceil", "floor", "round", "now", "daysUntil", "daysSince", "isOverdue", "hasValue"})
_EXPRESSION_LITERALS = frozenset({"true", "false", "null", "nil"})
_EXPRESSION_METHODS = frozenset({"toFixed", "toString", "toUpperCase", "toLowerCase"})
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`")
_IDENT_IN_EXPR = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def validate_table_config(config: Any) -> TableConfigReport:
    """Check a table/chart configuration against the Appendix B rules."""
    checker = _Checker()
    checker.config(config)
    return checker.report


class _Checker(ConfigReader):
    """Walks one config, collecting errors and warnings into ``report``."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[str] = []  # data fields that need visual settings
        self.known: set[str] = set()  # names usable in computed expressions
        self.pending_expressions: list[tuple[str, str]] = []

    # -- root ---------------------------------------------------------------------------------

    def config(self, config: Any) -> None:
        if not isinstance(config, dict):
            self.error("config", "config must be a JSON object", "INVALID_TYPE")
            return
        self.required(config, "title", "title")
        widget_type = self.text(config, "widget_type", "widget_type")
        self.one_of(widget_type, WIDGET_TYPES, "widget_type", "widget_type")
        self.one_of(self.text(config, "refresh_mode", "refresh_mode"), REFRESH_MODES, "refresh_mode", "refresh_mode")
        for key in ("refresh_interval", "position_x", "position_y", "width", "height"):
            self.non_negative(config, key, key)
        sources = self.arr(config, "data_source", "data_source")
        if not sources and not isinstance(config.get("data_source"), (dict, str, int, float, bool)):
            self.error("data_source", "at least one data source is required", "REQUIRED")
        for path, source in self.items(sources, "data_source"):
            self.data_source(source, path)
        for where, expression in self.pending_expressions:
            self.expression_references(expression, where)
        settings = self.obj(config, "visual_settings", "visual_settings")
        if widget_type != "chart":
            self.visual_settings(settings or {})
        permissions = self.obj(config, "permissions", "permissions")
        if permissions is not None:
            for i, action in enumerate(self.arr(permissions, "actions", "permissions.actions")):
                if action not in PERMISSION_ACTIONS:
                    self.error(
                        f"permissions.actions[{i}]",
                        f"invalid permission action {action!r}; must be one of {', '.join(PERMISSION_ACTIONS)}",
                        "INVALID_VALUE",
                    )

    # -- data sources ------------------------------------------------------------------------

    def data_source(self, source: dict[str, Any], where: str) -> None:
        self.required(source, "source", f"{where}.source")
        self.one_of(self.text(source, "type", f"{where}.type"), SOURCE_TYPES, f"{where}.type", "data source type")
        self.non_negative(source, "rows", f"{where}.rows")
        select = self.obj(source, "select", f"{where}.select") or {}
        for path, column in self.items(
            self.arr(select, "columns", f"{where}.select.columns"), f"{where}.select.columns"
        ):
            self.select_column(column, path)
        for path, foreign in self.items(
            self.arr(select, "foreign_tables", f"{where}.select.foreign_tables"), f"{where}.select.foreign_tables"
        ):
            self.foreign_table(foreign, path)
        for path, computed in self.items(
            self.arr(select, "client_computed_columns", f"{where}.select.client_computed_columns"),
            f"{where}.select.client_computed_columns",
        ):
            name = self.required(computed, "name", f"{path}.name")
            self.identifier(name, f"{path}.name")
            expression = self.required(computed, "expression", f"{path}.expression")
            if name:
                self.add_field(name)
            if expression:
                self.pending_expressions.append((f"{path}.expression", expression))
        for path, join in self.items(self.arr(source, "joins", f"{where}.joins"), f"{where}.joins"):
            self.required(join, "table", f"{path}.table")
            join_type = self.required(join, "type", f"{path}.type")
            self.one_of(join_type, JOIN_TYPES, f"{path}.type", "join type")
            self.required(join, "on", f"{path}.on")
        for path, flt in self.items(self.arr(source, "filters", f"{where}.filters"), f"{where}.filters"):
            self.identifier(self.required(flt, "column", f"{path}.column"), f"{path}.column")
            operator = self.required(flt, "operator", f"{path}.operator")
            self.one_of(operator, FILTER_OPERATORS, f"{path}.operator", "filter operator")
        for path, sort in self.items(self.arr(source, "sort", f"{where}.sort"), f"{where}.sort"):
            self.identifier(self.required(sort, "column", f"{path}.column"), f"{path}.column")
            direction = self.required(sort, "direction", f"{path}.direction")
            self.one_of(direction, SORT_DIRECTIONS, f"{path}.direction", "sort direction")
            self.non_negative(sort, "priority", f"{path}.priority")
        self.chart_parts(source, where)

    def add_field(self, name: str) -> None:
        self.fields.append(name)
        self.known.add(name)
        self.known.add(name.replace(".", "_"))

    def select_column(self, column: dict[str, Any], where: str) -> None:
        name = self.text(column, "name", f"{where}.name")
        alias = self.text(column, "alias", f"{where}.alias")
        table_column = self.text(column, "table_column", f"{where}.table_column")
        if not name and not table_column:
            self.error(f"{where}.name", "name or table_column is required", "REQUIRED")
        self.identifier(name, f"{where}.name")
        self.identifier(alias, f"{where}.alias")
        self.identifier(table_column, f"{where}.table_column")
        field_name = alias or table_column or name
        if field_name:
            self.add_field(field_name)

    def foreign_table(self, foreign: dict[str, Any], where: str) -> None:
        self.required(foreign, "table", f"{where}.table")
        for key in ("relationship_from", "relationship_to"):
            self.identifier(self.required(foreign, key, f"{where}.{key}"), f"{where}.{key}")
        self.one_of(
            self.text(foreign, "join_type", f"{where}.join_type"), JOIN_TYPES, f"{where}.join_type", "join type"
        )
        self.one_of(
            self.text(foreign, "relationship_direction", f"{where}.relationship_direction"),
            RELATIONSHIP_DIRECTIONS,
            f"{where}.relationship_direction",
            "relationship_direction",
        )
        for path, column in self.items(self.arr(foreign, "columns", f"{where}.columns"), f"{where}.columns"):
            self.select_column(column, path)
        for path, nested in self.items(
            self.arr(foreign, "foreign_tables", f"{where}.foreign_tables"), f"{where}.foreign_tables"
        ):
            self.foreign_table(nested, path)

    def expression_references(self, expression: str, where: str) -> None:
        stripped = _QUOTED.sub(" ", expression)
        for match in _IDENT_IN_EXPR.finditer(stripped):
            ident = match.group(0)
            parts = ident.split(".")
            if len(parts) > 1 and parts[-1] in _EXPRESSION_METHODS:
                parts = parts[:-1]
                ident = ".".join(parts)
            if len(parts) == 1 and (ident in _EXPRESSION_HELPERS or ident in _EXPRESSION_LITERALS):
                continue
            if ident in self.known or ident.replace(".", "_") in self.known:
                continue
            known = ", ".join(sorted(self.known)) or "(none)"
            message = f"expression references unknown field {ident!r}; known fields: {known}"
            self.error(where, message, "INVALID_FIELD_REFERENCE")

    def chart_parts(self, source: dict[str, Any], where: str) -> None:
        for path, metric in self.items(self.arr(source, "metrics", f"{where}.metrics"), f"{where}.metrics"):
            self.required(metric, "name", f"{path}.name")
            function = self.required(metric, "function", f"{path}.function")
            self.one_of(function, METRIC_FUNCTIONS, f"{path}.function", "metric function")
            column = self.text(metric, "column", f"{path}.column")
            expression = self.obj(metric, "expression", f"{path}.expression")
            if bool(column) == (expression is not None):
                self.error(path, "a metric needs exactly one of column or expression", "INVALID_VALUE")
            self.identifier(column, f"{path}.column")
            if expression is not None:
                operator = self.required(expression, "operator", f"{path}.expression.operator")
                self.one_of(operator, EXPRESSION_OPERATORS, f"{path}.expression.operator", "expression operator")
                columns = self.arr(expression, "columns", f"{path}.expression.columns")
                if len(columns) < 2:
                    self.error(f"{path}.expression.columns", "an expression needs at least 2 columns", "INVALID_VALUE")
                for i, col in enumerate(columns):
                    if not isinstance(col, str):
                        self.error(f"{path}.expression.columns[{i}]", "must be a string", "INVALID_TYPE")
                    else:
                        self.identifier(col, f"{path}.expression.columns[{i}]")
        for path, group in self.items(self.arr(source, "group_by", f"{where}.group_by"), f"{where}.group_by"):
            column = self.required(group, "column", f"{path}.column")
            self.one_of(
                self.text(group, "interval", f"{path}.interval"), GROUP_INTERVALS, f"{path}.interval", "interval"
            )
            if not self.flag(group, "expression", f"{path}.expression"):
                self.identifier(column, f"{path}.column")
                self.identifier(self.text(group, "alias", f"{path}.alias"), f"{path}.alias")

    # -- visual settings -----------------------------------------------------------------------

    def visual_settings(self, settings: dict[str, Any]) -> None:
        columns = self.obj(settings, "columns", "visual_settings.columns") or {}
        label_columns: set[str] = set()
        with_order: list[str] = []
        without_order: list[str] = []
        for key in sorted(columns):
            where = f"visual_settings.columns.{key}"
            column = columns[key]
            if not isinstance(column, dict):
                self.error(where, "must be an object", "INVALID_TYPE")
                continue
            link = self.obj(column, "link", f"{where}.link")
            if link is not None and isinstance(link.get("label_column"), str) and link["label_column"]:
                label_columns.add(link["label_column"])
            order = self.number(column, "order", f"{where}.order")
            if self.flag(column, "hidden", f"{where}.hidden"):
                if order:
                    self.warn(f"{where}.order", "hidden column has an order; it is ignored")
                continue
            self.visible_column(key, column, link, where)
            if order:
                if not -1000 <= order <= 1000:
                    self.error(f"{where}.order", f"order {order} is outside [-1000, 1000]", "INVALID_VALUE")
                with_order.append(key)
            else:
                without_order.append(key)
        if with_order and without_order:
            self.error(
                "visual_settings.columns",
                "column order must be set on every visible column or on none: with order: "
                f"{', '.join(sorted(with_order))}; without order: {', '.join(sorted(without_order))}",
                "STRICT_ORDER",
            )
        self.pagination(settings)
        self.conditional_formatting(settings)
        for key in ("row_actions", "table_actions"):
            actions = self.obj(settings, key, f"visual_settings.{key}") or {}
            for name in sorted(actions):
                self.table_action(actions[name], f"visual_settings.{key}.{name}")
        for name in dict.fromkeys(self.fields):
            if name in label_columns:
                continue
            if name not in columns:
                self.error(
                    f"visual_settings.columns.{name}",
                    f"column {name!r} has no visual settings; add an entry with a type (or hidden: true)",
                    "MISSING_VISUAL_SETTINGS",
                )

    def visible_column(self, key: str, column: dict[str, Any], link: dict[str, Any] | None, where: str) -> None:
        header = self.text(column, "header", f"{where}.header").strip()
        if header.upper() == "ID" or header.upper().endswith(" ID"):
            self.error(
                f"{where}.header",
                f"visible column header {header!r} exposes an ID; hide the column",
                "VISIBLE_ID_HEADER",
            )
        col_type = self.required(column, "type", f"{where}.type")
        self.one_of(col_type, COLUMN_TYPES, f"{where}.type", "column type")
        self.one_of(self.text(column, "align", f"{where}.align"), ALIGNMENTS, f"{where}.align", "alignment")
        self.non_negative(column, "width", f"{where}.width")
        fmt = self.obj(column, "format", f"{where}.format")
        if fmt is not None:
            fmt_type = self.text(fmt, "type", f"{where}.format.type")
            self.one_of(fmt_type, FORMAT_TYPES, f"{where}.format.type", "format type")
            self.non_negative(fmt, "precision", f"{where}.format.precision")
            pattern = self.text(fmt, "format", f"{where}.format.format")
            if fmt_type in ("date", "datetime") and pattern:
                problem = date_format_problem(pattern)
                if problem:
                    self.error(f"{where}.format.format", problem, "INVALID_FORMAT")
        if col_type == "datetime" and not (fmt and isinstance(fmt.get("format"), str) and fmt["format"]):
            self.error(f"{where}.format", "a datetime column needs a format such as yyyy-MM-dd", "REQUIRED")
        editable = self.obj(column, "editable", f"{where}.editable")
        if editable is not None:
            self.one_of(
                self.required(editable, "type", f"{where}.editable.type"),
                EDITABLE_TYPES,
                f"{where}.editable.type",
                "editable type",
            )
        if col_type == "lookup":
            lookup = self.obj(column, "lookup", f"{where}.lookup")
            if lookup is None:
                self.error(f"{where}.lookup", "a lookup column needs a lookup config", "REQUIRED")
            else:
                for key_ in ("entity", "label_column", "value_column"):
                    self.required(lookup, key_, f"{where}.lookup.{key_}")
        if link is not None:
            self.required(link, "url", f"{where}.link.url")
            label = self.text(link, "label", f"{where}.link.label")
            label_column = self.text(link, "label_column", f"{where}.link.label_column")
            if not label and not label_column:
                self.error(f"{where}.link", "a link needs a label or a label_column", "REQUIRED")
            if label_column and (key == "id" or key.endswith(".id") or key.endswith("_id")):
                self.error(
                    f"{where}.link.label_column",
                    f"ID column {key!r} must not use a label_column link; link a readable column instead",
                    "INVALID_VALUE",
                )

    def pagination(self, settings: dict[str, Any]) -> None:
        pagination = self.obj(settings, "pagination", "visual_settings.pagination")
        if pagination is None:
            return
        sizes = self.arr(pagination, "page_sizes", "visual_settings.pagination.page_sizes")
        for i, size in enumerate(sizes):
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                self.error(
                    f"visual_settings.pagination.page_sizes[{i}]", "page sizes must be integers > 0", "INVALID_VALUE"
                )
        default = self.number(pagination, "default_page_size", "visual_settings.pagination.default_page_size")
        if default is not None and default < 0:
            self.error(
                "visual_settings.pagination.default_page_size", "default_page_size must be >= 0", "INVALID_VALUE"
            )
        elif default and sizes and default not in sizes:
            self.warn(
                "visual_settings.pagination.default_page_size", f"default page size {default} is not among page_sizes"
            )

    def conditional_formatting(self, settings: dict[str, Any]) -> None:
        where = "visual_settings.conditional_formatting"
        for path, rule in self.items(self.arr(settings, "conditional_formatting", where), where):
            self.required(rule, "column", f"{path}.column")
            condition = self.required(rule, "condition", f"{path}.condition")
            self.one_of(condition, FILTER_OPERATORS, f"{path}.condition", "condition")
            self.one_of(
                self.text(rule, "condition2", f"{path}.condition2"), FILTER_OPERATORS, f"{path}.condition2", "condition"
            )

    def table_action(self, action: Any, where: str) -> None:
        if not isinstance(action, dict):
            self.error(where, "must be an object", "INVALID_TYPE")
            return
        self.required(action, "name", f"{where}.name")
        self.required(action, "label", f"{where}.label")
        action_type = self.required(action, "action_type", f"{where}.action_type")
        self.one_of(action_type, ACTION_TYPES, f"{where}.action_type", "action type")
        if action_type == "link":
            self.required(action, "url", f"{where}.url")
