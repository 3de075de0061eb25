"""PostgreSQL's reading of the engine-neutral filter tree and of a search scope.

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
or a typed field name that passed ``kb_buckets.ident``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage.kb_records import AllOf, AnyOf, FieldCondition, FilterNode, KBFilter, KBScope
from storage.kb_tables import ident
from storage.postgres.kb_buckets import meta_table

#: Document fields → SQL over ``kb_documents d`` (timestamps compare as dates).
DOCUMENT_COLUMNS: dict[str, str] = {
    "doc_id": "d.id",
    "title": "d.title",
    "source": "d.source",
    "url": "d.url",
    "created_at": "left(d.created_at, 10)",
    "updated_at": "left(d.updated_at, 10)",
}

_COMPARISONS = frozenset({"=", "!=", ">", ">=", "<", "<="})


Schema = Mapping[str, str]


def filter_sql(f: KBFilter, schema: Schema | None = None) -> tuple[str, list[Any]]:
    """``(WHERE fragment, parameters)``; typed fields are read from ``m``. ``schema``
    (the bucket's fields) says which typed fields are TEXT; a field it does not know is
    judged by its value."""
    params: list[Any] = []
    return _node(f.root, params, schema or {}), params


def _node(node: FilterNode, params: list[Any], schema: Schema) -> str:
    if isinstance(node, FieldCondition):
        return _condition(node, params, schema)
    joiner = " AND " if isinstance(node, AllOf) else " OR "
    assert isinstance(node, AllOf | AnyOf)
    inner = [_node(p, params, schema) for p in node.parts]
    if not inner:
        raise ValueError("an empty filter group")
    return inner[0] if len(inner) == 1 else "(" + joiner.join(inner) + ")"


def _is_text(value: Any) -> bool:
    if isinstance(value, tuple | list):
        return bool(value) and all(isinstance(v, str) for v in value)
    return isinstance(value, str)


def _condition(c: FieldCondition, params: list[Any], schema: Schema) -> str:
    column = DOCUMENT_COLUMNS[c.field] if c.builtin else f'm."{ident(c.field)}"'
    if c.op == "is_null":
        return f"{column} IS NULL"
    if c.op == "not_null":
        return f"{column} IS NOT NULL"
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
    if c.op not in _COMPARISONS:
        raise ValueError(f"unknown filter operator {c.op!r}")
    params.append(c.value)
    right = "lower(%s)" if fold else "%s"
    if isinstance(c.value, str) and c.op not in ("=", "!="):
        return f'{left} COLLATE "C" {c.op} {right}'
    return f"{left} {c.op} {right}"


def _ascii_lower(value: str) -> str:
    """What ``lower()`` does under the ``"C"`` collation: ASCII letters only."""
    return "".join(ch.lower() if ch.isascii() else ch for ch in value)


def join_sql(scope: KBScope, schema: Schema | None = None) -> tuple[str, str, list[Any]]:
    """``(joins, where, params)`` restricting documents ``d`` (and ``m`` if needed)."""
    joins = ""
    where: list[str] = []
    params: list[Any] = []
    f = scope.filter
    if f is not None and f.uses_typed and scope.bucket is not None:
        joins = f" LEFT JOIN {meta_table(scope.bucket)} m ON m.doc_id = d.id"
    if scope.bucket is not None:
        where.append("d.bucket = %s")
        params.append(scope.bucket)
    if f is not None:
        sql, fparams = filter_sql(f, schema)
        where.append(sql)
        params.extend(fparams)
    if scope.doc_id is not None:
        where.append("d.id = %s")
        params.append(scope.doc_id)
    return joins, " AND ".join(where), params


def scope_sql(scope: KBScope, schema: Schema | None = None) -> tuple[str, list[Any]]:
    """A ``SELECT`` of the ids of the documents in scope (``doc_ids`` ignored), and its
    parameters."""
    f = scope.filter
    if f is not None and f.uses_typed and not f.uses_builtin and scope.doc_id is None and scope.bucket:
        # Only typed fields: the bucket's own table is the whole scope.
        sql, params = filter_sql(f, schema)
        return f"SELECT m.doc_id FROM {meta_table(scope.bucket)} m WHERE {sql}", params
    joins, where, params = join_sql(scope, schema)
    return f"SELECT d.id FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params


def count_sql(scope: KBScope, schema: Schema | None = None) -> tuple[str, list[Any]]:
    joins, where, params = join_sql(scope, schema)
    return f"SELECT count(*) FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params
