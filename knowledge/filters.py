"""The metadata filter language shared by every search tool, validated into a tree.

Grammar (JSON)::

    filter   := { clause, ... }                    # clauses are ANDed
    clause   := field: value                       # equality (a list means "in")
              | field: { op: value, ... }          # several ops on one field are ANDed
              | field: { "operator": op, "value": v }   # the schema planner's shape
              | "$and": [filter, ...] | "$or": [filter, ...]
    op       := = != > >= < <= in nin like  (also $eq $ne $gt $gte $lt $lte $in $nin $like,
                                              eq ne gt gte lt lte, == <> "not in")

Every field is checked against the bucket schema plus the built-in document fields;
every value is coerced to the field's type. The result is the engine-neutral tree of
``storage.kb_records`` (``KBFilter``): each storage engine turns it into its own query
language and binds every value as a parameter; field names reach it only when they are
in the schema, and schema names were validated against ``^[a-z][a-z0-9_]{0,40}$`` when
the bucket was created. Depth, clause count, ``in`` list length and string sizes are
bounded so an absurd filter is rejected, not executed.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from storage.kb_records import (
    KB_DOCUMENT_FIELDS,
    AllOf,
    AnyOf,
    FieldCondition,
    FilterNode,
    KBFilter,
)

MAX_DEPTH = 4
MAX_CONDITIONS = 32
MAX_IN_VALUES = 100
MAX_STRING = 500
MAX_LIKE = 200

#: Fields every document has, whatever its bucket: name → type.
BUILTIN_FIELDS: Mapping[str, str] = KB_DOCUMENT_FIELDS

_OPS: dict[str, str] = {}
for _canon, _spellings in {
    "=": ("=", "==", "eq", "$eq"),
    "!=": ("!=", "<>", "ne", "$ne", "neq"),
    ">": (">", "gt", "$gt"),
    ">=": (">=", "gte", "$gte"),
    "<": ("<", "lt", "$lt"),
    "<=": ("<=", "lte", "$lte"),
    "in": ("in", "$in"),
    "nin": ("nin", "$nin", "not in", "not_in"),
    "like": ("like", "$like"),
}.items():
    for _s in _spellings:
        _OPS[_s] = _canon

_LOGIC = {"$and": "AND", "$or": "OR", "and": "AND", "or": "OR"}

#: What ``compile_filters`` returns: the validated tree (``storage.kb_records.KBFilter``).
CompiledFilter = KBFilter


class FilterError(ValueError):
    """A filter that cannot be applied; the message is written for the model to fix it."""


def describe_fields(fields: Mapping[str, str] | None) -> str:
    parts = [f"{name} ({ftype})" for name, ftype in BUILTIN_FIELDS.items()]
    parts += [f"{name} ({ftype})" for name, ftype in (fields or {}).items()]
    return ", ".join(parts)


def parse_filters(filters: Any) -> dict[str, Any] | None:
    """Accept a mapping, a JSON string of one, or nothing; anything else is an error."""
    if filters is None:
        return None
    if isinstance(filters, (str, bytes)):
        if not filters.strip():
            return None
        try:
            filters = orjson.loads(filters)
        except orjson.JSONDecodeError as exc:
            raise FilterError(f"filters must be a JSON object: {exc}") from None
    if not isinstance(filters, Mapping):
        raise FilterError("filters must be an object like {\"field\": value} or {\"field\": {\">\": value}}")
    return dict(filters) if filters else None


def _group(kind: type[AllOf | AnyOf], parts: list[FilterNode]) -> FilterNode:
    return parts[0] if len(parts) == 1 else kind(tuple(parts))


class _Compiler:
    def __init__(self, fields: Mapping[str, str] | None, bucket: str | None) -> None:
        self.fields = dict(fields or {})
        self.bucket = bucket
        self.conditions = 0
        self.uses_typed = False
        self.uses_builtin = False

    # -- structure -------------------------------------------------------------
    def node(self, obj: Any, depth: int) -> FilterNode:
        if depth > MAX_DEPTH:
            raise FilterError(f"filters are nested too deeply (at most {MAX_DEPTH} levels)")
        if not isinstance(obj, Mapping) or not obj:
            raise FilterError("each filter must be a non-empty object")
        parts: list[FilterNode] = []
        for key, value in obj.items():
            if not isinstance(key, str):
                raise FilterError("filter keys must be strings")
            logic = _LOGIC.get(key.lower())
            if logic is not None:
                parts.append(self.logic(logic, value, depth))
            else:
                parts.append(self.field_clause(key, value))
        return _group(AllOf, parts)

    def logic(self, joiner: str, value: Any, depth: int) -> FilterNode:
        if not isinstance(value, Sequence) or isinstance(value, (str, bytes)) or not value:
            raise FilterError(f"${joiner.lower()} needs a non-empty list of filter objects")
        if len(value) > MAX_CONDITIONS:
            raise FilterError(f"${joiner.lower()} has too many branches (at most {MAX_CONDITIONS})")
        inner = [self.node(v, depth + 1) for v in value]
        return _group(AllOf if joiner == "AND" else AnyOf, inner)

    # -- one field ---------------------------------------------------------------
    def resolve(self, name: str) -> tuple[str, bool]:
        """``(type, builtin)`` of a field the filter may use."""
        if name in BUILTIN_FIELDS:
            self.uses_builtin = True
            return BUILTIN_FIELDS[name], True
        if name in self.fields:
            self.uses_typed = True
            return self.fields[name], False
        where = f"bucket {self.bucket!r}" if self.bucket else "searches without a bucket"
        shown = name if len(name) <= 60 else name[:60] + "…"
        raise FilterError(f"unknown filter field {shown!r}; allowed fields for {where}: {describe_fields(self.fields)}")

    def field_clause(self, name: str, value: Any) -> FilterNode:
        ftype, builtin = self.resolve(name)
        if isinstance(value, Mapping):
            if not value:
                raise FilterError(f"filter on {name!r} is empty")
            if "operator" in value or "op" in value:
                op = value.get("operator", value.get("op"))
                if "value" not in value or set(value) - {"operator", "op", "value"}:
                    raise FilterError(f"filter on {name!r}: use {{\"operator\": op, \"value\": v}}")
                return self.condition(name, ftype, builtin, op, value["value"])
            conds: list[FilterNode] = [self.condition(name, ftype, builtin, op, v) for op, v in value.items()]
            return _group(AllOf, conds)
        if isinstance(value, (list, tuple)):
            return self.condition(name, ftype, builtin, "in", value)
        return self.condition(name, ftype, builtin, "=", value)

    def condition(self, name: str, ftype: str, builtin: bool, op_raw: Any, value: Any) -> FieldCondition:
        self.conditions += 1
        if self.conditions > MAX_CONDITIONS:
            raise FilterError(f"too many filter conditions (at most {MAX_CONDITIONS})")
        op = _OPS.get(op_raw.strip().lower()) if isinstance(op_raw, str) else None
        if op is None:
            raise FilterError(
                f"unknown operator {str(op_raw)[:20]!r} on {name!r}; use one of = != > >= < <= in nin like"
            )
        if op in ("in", "nin"):
            if not isinstance(value, (list, tuple)) or not value:
                raise FilterError(f"{op!r} on {name!r} needs a non-empty list")
            if len(value) > MAX_IN_VALUES:
                raise FilterError(f"{op!r} on {name!r} has too many values (at most {MAX_IN_VALUES})")
            coerced = [coerce_value(name, ftype, v) for v in value]
            if any(v is None for v in coerced):
                raise FilterError(f"{op!r} on {name!r} cannot contain null")
            return FieldCondition(name, builtin, "in" if op == "in" else "nin", tuple(coerced))
        if op == "like":
            if ftype not in ("TEXT", "DATE"):
                raise FilterError(f"'like' only works on TEXT or DATE fields; {name!r} is {ftype}")
            if not isinstance(value, str) or not value or len(value) > MAX_LIKE:
                raise FilterError(f"'like' on {name!r} needs a pattern of 1..{MAX_LIKE} characters")
            if "%" not in value and "_" not in value:
                value = f"%{value}%"
            return FieldCondition(name, builtin, "like", value)
        coerced_value = coerce_value(name, ftype, value)
        if coerced_value is None:
            if op == "=":
                return FieldCondition(name, builtin, "is_null")
            if op == "!=":
                return FieldCondition(name, builtin, "not_null")
            raise FilterError(f"{op!r} on {name!r} needs a value, not null")
        return FieldCondition(name, builtin, op, coerced_value)  # type: ignore[arg-type]


def coerce_value(name: str, ftype: str, value: Any) -> Any:
    """Convert a filter value to the field's storage form or raise ``FilterError``."""
    if value is None:
        return None
    coerced = coerce_typed(ftype, value)
    if coerced is _BAD:
        raise FilterError(f"bad value {_show(value)} for {name!r}: expected {_expected(ftype)}")
    return coerced


_BAD: Any = object()


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def _expected(ftype: str) -> str:
    return {
        "TEXT": "a string",
        "INTEGER": "an integer",
        "REAL": "a number",
        "DATE": "a date as YYYY-MM-DD",
        "BOOLEAN": "true or false",
    }[ftype]


def coerce_typed(ftype: str, value: Any) -> Any:
    """Shared by filters and ingestion: the storage value, or ``_BAD`` when it does not fit.

    Lenient where JSON commonly is (numbers sent as strings, whole floats as integers),
    strict where a wrong guess would silently change meaning (dates, booleans).
    """
    if ftype == "TEXT":
        if isinstance(value, str):
            return value if len(value) <= MAX_STRING * 20 else _BAD
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        return _BAD
    if ftype == "INTEGER":
        if isinstance(value, bool):
            return _BAD
        if isinstance(value, int):
            return value if abs(value) < 2**63 else _BAD
        if isinstance(value, float):
            return int(value) if value.is_integer() and abs(value) < 2**63 else _BAD
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                return _BAD
        return _BAD
    if ftype == "REAL":
        if isinstance(value, bool):
            return _BAD
        if isinstance(value, (int, float)):
            f = float(value)
        elif isinstance(value, str):
            try:
                f = float(value.strip().replace(",", "")) if len(value) < 40 else math.nan
            except ValueError:
                return _BAD
        else:
            return _BAD
        return f if math.isfinite(f) else _BAD
    if ftype == "DATE":
        if not isinstance(value, str) or len(value) > 40:
            return _BAD
        text = value.strip()
        try:
            if len(text) == 10:
                return _dt.date.fromisoformat(text).isoformat()
            return _dt.datetime.fromisoformat(text.replace("Z", "+00:00")).date().isoformat()
        except ValueError:
            return _BAD
    if ftype == "BOOLEAN":
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, int) and value in (0, 1):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return int(value.strip().lower() == "true")
        return _BAD
    raise ValueError(f"unknown field type {ftype!r}")


def is_bad(value: Any) -> bool:
    return value is _BAD


def compile_filters(
    filters: Any, fields: Mapping[str, str] | None, *, bucket: str | None = None
) -> KBFilter | None:
    """Validate ``filters`` against ``fields`` (the bucket schema) into the filter tree.

    Returns ``None`` for no filters. Raises ``FilterError`` naming the allowed fields on
    an unknown field, and saying what was expected on a bad value or operator.
    """
    parsed = parse_filters(filters)
    if parsed is None:
        return None
    compiler = _Compiler(fields, bucket)
    root = compiler.node(parsed, 1)
    return KBFilter(root=root, uses_typed=compiler.uses_typed, uses_builtin=compiler.uses_builtin)


def split_constraints(filters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The top-level ANDed constraints of a filter, each as a standalone filter.

    ``{"a": 1, "b": {">": 2, "<": 9}, "$and": [x, y], "$or": [...]}`` gives
    ``[{"a": 1}, {"b": {">": 2}}, {"b": {"<": 9}}, x, y, {"$or": [...]}]``. Used to relax
    a filter by dropping one constraint.
    """
    out: list[dict[str, Any]] = []
    for key, value in filters.items():
        if key in ("$and", "and") and isinstance(value, list):
            for item in value:
                if isinstance(item, Mapping):
                    out.extend(split_constraints(item))
        elif (
            isinstance(value, Mapping)
            and key not in _LOGIC
            and "operator" not in value
            and "op" not in value
            and len(value) > 1
        ):
            out.extend({key: {op: v}} for op, v in value.items())
        else:
            out.append({key: value})
    return out


def join_constraints(constraints: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    if not constraints:
        return None
    if len(constraints) == 1:
        return dict(constraints[0])
    return {"$and": [dict(c) for c in constraints]}


def constraint_label(constraint: Mapping[str, Any]) -> str:
    return orjson.dumps(constraint, default=str).decode()
