"""PostgreSQL's conditions of the filter tree (groups and scopes: ``storage.kb_filters_sql``).

``knowledge.filters`` validated every field and coerced every value; here the tree
becomes a parameterised ``WHERE`` fragment over ``kb_documents d`` (and the bucket's
typed table ``m``), meaning what the SQLite engine's fragment means:

* typed TEXT fields compare case-insensitively (``lower()`` on both sides, as SQLite's
  ``NOCASE``); document fields compare exactly;
* ``like`` is case-insensitive (SQLite's ``LIKE``) with no escape character
  (``ESCAPE ''``: in SQLite a backslash is an ordinary character);
* order comparisons on text are byte-wise (``COLLATE "C"``), as in SQLite, whatever
  the database's locale;
* ``in``/``nin`` bind one array (``= ANY``/``<> ALL``), so any number of values is one
  parameter.

Values are always bound; the only text interpolated is a document column named below
or a typed field name that passed ``kb_tables.ident``.
"""

from __future__ import annotations

from typing import Any

from storage.kb_filters_sql import FilterSql, Schema
from storage.kb_records import FieldCondition


def _is_text(value: Any) -> bool:
    if isinstance(value, tuple | list):
        return bool(value) and all(isinstance(v, str) for v in value)
    return isinstance(value, str)


class PostgresFilterSql(FilterSql):
    mark = "%s"

    def condition(self, c: FieldCondition, column: str, params: list[Any], schema: Schema) -> str:
        if c.op == "like":
            params.append(c.value)
            return f"{column} ILIKE %s ESCAPE ''"
        # Typed TEXT fields fold case (a typed DATE also holds text, but digits only).
        fold = not c.builtin and (schema[c.field] == "TEXT" if c.field in schema else _is_text(c.value))
        left = f"lower({column})" if fold else column
        if c.op in ("in", "nin"):
            values = list(c.value)
            params.append([_ascii_lower(v) for v in values] if fold else values)
            return f"{left} = ANY(%s)" if c.op == "in" else f"{left} <> ALL(%s)"
        params.append(c.value)
        right = "lower(%s)" if fold else "%s"
        if isinstance(c.value, str) and c.op not in ("=", "!="):
            return f'{left} COLLATE "C" {c.op} {right}'
        return f"{left} {c.op} {right}"


def _ascii_lower(value: str) -> str:
    """What ``lower()`` does under the ``"C"`` collation: ASCII letters only."""
    return "".join(ch.lower() if ch.isascii() else ch for ch in value)


POSTGRES_FILTERS = PostgresFilterSql()
filter_sql = POSTGRES_FILTERS.filter_sql
scope_sql = POSTGRES_FILTERS.scope_sql
count_sql = POSTGRES_FILTERS.count_sql

__all__ = ["POSTGRES_FILTERS", "count_sql", "filter_sql", "scope_sql"]
