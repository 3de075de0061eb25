"""SQLite's conditions of the filter tree (the rest is ``storage.kb_filters_sql``):
TEXT fields are ``COLLATE NOCASE`` columns and ``LIKE`` is case-insensitive already,
so a condition is the plain comparison."""

from __future__ import annotations

from typing import Any

from storage.kb_filters_sql import FilterSql, Schema
from storage.kb_records import FieldCondition


class SqliteFilterSql(FilterSql):
    def condition(self, c: FieldCondition, column: str, params: list[Any], schema: Schema) -> str:
        if c.op in ("in", "nin"):
            values = list(c.value)
            params.extend(values)
            return f"{column} {'IN' if c.op == 'in' else 'NOT IN'} ({', '.join('?' * len(values))})"
        params.append(c.value)
        return f"{column} LIKE ?" if c.op == "like" else f"{column} {c.op} ?"


SQLITE_FILTERS = SqliteFilterSql()
filter_sql = SQLITE_FILTERS.filter_sql
scope_sql = SQLITE_FILTERS.scope_sql
count_sql = SQLITE_FILTERS.count_sql

__all__ = ["SQLITE_FILTERS", "count_sql", "filter_sql", "scope_sql"]
