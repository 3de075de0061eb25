"""The engine-neutral filter tree and search scope as SQL, written once.

``knowledge.filters`` validated every field and coerced every value; here the tree
becomes a parameterised ``WHERE`` fragment over ``kb_documents d`` (and the bucket's
typed table ``m``). Groups, scopes and joins are the same on both engines; a single
condition is the engine's (``FilterSql.condition``: SQLite's ``storage.sqlite``,
PostgreSQL's ``storage.postgres`` ``kb_filters_sql``), as is the placeholder (the
fragments are embedded in each engine's own SQL). Values are always bound; the only
text interpolated is a document column named below or a typed field name that passed
``kb_tables.ident``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage.kb_records import AllOf, AnyOf, FieldCondition, FilterNode, KBFilter, KBScope
from storage.kb_tables import ident, meta_table

#: Document fields → SQL over ``kb_documents d`` (timestamps compare as dates).
DOCUMENT_COLUMNS: dict[str, str] = {
    "doc_id": "d.id",
    "title": "d.title",
    "source": "d.source",
    "url": "d.url",
    "created_at": "substr(d.created_at, 1, 10)",
    "updated_at": "substr(d.updated_at, 1, 10)",
}

COMPARISONS = frozenset({"=", "!=", ">", ">=", "<", "<="})

#: A bucket's typed fields (name -> type), where the engine's conditions need them.
Schema = Mapping[str, str]


class FilterSql:
    #: The engine's parameter placeholder.
    mark = "?"

    def condition(self, c: FieldCondition, column: str, params: list[Any], schema: Schema) -> str:
        """One condition on ``column`` (``is_null``/``not_null`` are handled already)."""
        raise NotImplementedError

    def filter_sql(self, f: KBFilter, schema: Schema | None = None) -> tuple[str, list[Any]]:
        """``(WHERE fragment, parameters)``; typed fields are read from ``m``. ``schema``
        (the bucket's fields) is for engines whose conditions depend on a field's type."""
        params: list[Any] = []
        return self._node(f.root, params, schema or {}), params

    def _node(self, node: FilterNode, params: list[Any], schema: Schema) -> str:
        if isinstance(node, FieldCondition):
            column = DOCUMENT_COLUMNS[node.field] if node.builtin else f'm."{ident(node.field)}"'
            if node.op == "is_null":
                return f"{column} IS NULL"
            if node.op == "not_null":
                return f"{column} IS NOT NULL"
            if node.op not in ("in", "nin", "like") and node.op not in COMPARISONS:
                raise ValueError(f"unknown filter operator {node.op!r}")
            return self.condition(node, column, params, schema)
        joiner = " AND " if isinstance(node, AllOf) else " OR "
        assert isinstance(node, AllOf | AnyOf)
        inner = [self._node(p, params, schema) for p in node.parts]
        if not inner:
            raise ValueError("an empty filter group")
        return inner[0] if len(inner) == 1 else "(" + joiner.join(inner) + ")"

    def join_sql(self, scope: KBScope, schema: Schema | None = None) -> tuple[str, str, list[Any]]:
        """``(joins, where, params)`` restricting documents ``d`` (and ``m`` if needed)."""
        joins = ""
        where: list[str] = []
        params: list[Any] = []
        f = scope.filter
        if f is not None and f.uses_typed and scope.bucket is not None:
            joins = f" LEFT JOIN {meta_table(scope.bucket)} m ON m.doc_id = d.id"
        if scope.bucket is not None:
            where.append(f"d.bucket = {self.mark}")
            params.append(scope.bucket)
        elif scope.hidden_prefix:
            # In the statement, not from a list of buckets read before it: a bucket of
            # that prefix made in between is left out all the same.
            where.append(f"substr(d.bucket, 1, {len(scope.hidden_prefix)}) <> {self.mark}")
            params.append(scope.hidden_prefix)
        if f is not None:
            sql, fparams = self.filter_sql(f, schema)
            where.append(sql)
            params.extend(fparams)
        if scope.doc_id is not None:
            where.append(f"d.id = {self.mark}")
            params.append(scope.doc_id)
        return joins, " AND ".join(where), params

    def scope_sql(self, scope: KBScope, schema: Schema | None = None) -> tuple[str, list[Any]]:
        """A ``SELECT`` of the ids of the documents in scope (``doc_ids`` ignored), and its
        parameters."""
        f = scope.filter
        if f is not None and f.uses_typed and not f.uses_builtin and scope.doc_id is None and scope.bucket:
            # Only typed fields: the bucket's own table is the whole scope, and driving
            # from it lets SQLite use the field indexes (3x faster than via documents).
            sql, params = self.filter_sql(f, schema)
            return f"SELECT m.doc_id FROM {meta_table(scope.bucket)} m WHERE {sql}", params
        joins, where, params = self.join_sql(scope, schema)
        return f"SELECT d.id FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params

    def count_sql(self, scope: KBScope, schema: Schema | None = None) -> tuple[str, list[Any]]:
        joins, where, params = self.join_sql(scope, schema)
        return f"SELECT count(*) FROM kb_documents d{joins}" + (f" WHERE {where}" if where else ""), params


__all__ = ["COMPARISONS", "DOCUMENT_COLUMNS", "FilterSql", "Schema"]
