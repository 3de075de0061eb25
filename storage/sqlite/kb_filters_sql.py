"""SQLite's reading of the engine-neutral filter tree and of a search scope.

``knowledge.filters`` validated every field and coerced every value; here the tree
becomes a parameterised ``WHERE`` fragment over ``kb_documents d`` (and the bucket's
typed table ``m``). Values are always bound; the only text interpolated is a document
column we name below or a typed field name that passed ``kb_buckets.ident``.
"""

from __future__ import annotations

from typing import Any

from storage.kb_records import (
    AllOf,
    AnyOf,
    FieldCondition,
    FilterNode,
    KBFilter,
    KBScope,
)
from storage.sqlite.kb_buckets import ident, meta_table

#: Document fields → SQL over ``kb_documents d`` (timestamps compare as dates).
DOCUMENT_COLUMNS: dict[str, str] = {
    "doc_id": "d.id",
    "title": "d.title",
    "source": "d.source",
    "url": "d.url",
    "created_at": "substr(d.created_at, 1, 10)",
    "updated_at": "substr(d.updated_at, 1, 10)",
}

_COMPARISONS = frozenset({"=", "!=", ">", ">=", "<", "<="})


def filter_sql(f: KBFilter) -> tuple[str, list[Any]]:
    """``(WHERE fragment, parameters)``; typed fields are read from ``m``."""
    params: list[Any] = []
    return _node(f.root, params), params


def _node(node: FilterNode, params: list[Any]) -> str:
    if isinstance(node, FieldCondition):
        return _condition(node, params)
    joiner = " AND " if isinstance(node, AllOf) else " OR "
    assert isinstance(node, AllOf | AnyOf)
    inner = [_node(p, params) for p in node.parts]
    if not inner:
        raise ValueError("an empty filter group")
    return inner[0] if len(inner) == 1 else "(" + joiner.join(inner) + ")"


def _condition(c: FieldCondition, params: list[Any]) -> str:
    column = DOCUMENT_COLUMNS[c.field] if c.builtin else f'm."{ident(c.field)}"'
    if c.op in ("in", "nin"):
        values = list(c.value)
        params.extend(values)
        marks = ", ".join("?" * len(values))
        return f"{column} {'IN' if c.op == 'in' else 'NOT IN'} ({marks})"
    if c.op == "like":
        params.append(c.value)
        return f"{column} LIKE ?"
    if c.op == "is_null":
        return f"{column} IS NULL"
    if c.op == "not_null":
        return f"{column} IS NOT NULL"
    if c.op not in _COMPARISONS:
        raise ValueError(f"unknown filter operator {c.op!r}")
    params.append(c.value)
    return f"{column} {c.op} ?"


def join_sql(scope: KBScope) -> tuple[str, str, list[Any]]:
    """``(joins, where, params)`` restricting documents ``d`` (and ``m`` if needed)."""
    joins = ""
    where: list[str] = []
    params: list[Any] = []
    f = scope.filter
    if f is not None and f.uses_typed and scope.bucket is not None:
        joins = f" LEFT JOIN {meta_table(scope.bucket)} m ON m.doc_id = d.id"
    if scope.bucket is not None:
        where.append("d.bucket = ?")
        params.append(scope.bucket)
    if f is not None:
        sql, fparams = filter_sql(f)
        where.append(sql)
        params.extend(fparams)
    if scope.doc_id is not None:
        where.append("d.id = ?")
        params.append(scope.doc_id)
    return joins, " AND ".join(where), params


def scope_sql(scope: KBScope) -> tuple[str, list[Any]]:
    """A ``SELECT`` of the ids of the documents in scope (``doc_ids`` ignored), and its
    parameters."""
    f = scope.filter
    if f is not None and f.uses_typed and not f.uses_builtin and scope.doc_id is None and scope.bucket:
        # Only typed fields: the bucket's own table is the whole scope, and driving
        # from it lets SQLite use the field indexes (3x faster than via documents).
        sql, params = filter_sql(f)
        return f"SELECT m.doc_id FROM {meta_table(scope.bucket)} m WHERE {sql}", params
    joins, where, params = join_sql(scope)
    return f"SELECT d.id FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params


def count_sql(scope: KBScope) -> tuple[str, list[Any]]:
    joins, where, params = join_sql(scope)
    return f"SELECT count(*) FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params
