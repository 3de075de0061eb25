"""Guards chosen by field name: ids and names that end up in URLs, SQL or lookups
(``reference``) and the strict shape of metadata ``filters``.

Apart from the schema walker because these checks are about what a value *means* where it
goes, not about the schema's types; the list of guarded fields is the policy to review.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from agenttools.core.validation_pass import DEFAULT_MAX_ITEMS, Walk

MAX_FILTER_KEYS: Final = 20
MAX_FILTER_DEPTH: Final = 4
SEARCH_FILTER_OPERATORS: Final = frozenset(
    {
        *("=", "==", "eq", "$eq", "!=", "<>", "ne", "neq", "$ne"),
        *(">", "gt", "$gt", ">=", "gte", "$gte", "<", "lt", "$lt", "<=", "lte", "$lte"),
        *("in", "$in", "nin", "$nin", "not in", "not_in", "like", "$like"),
    }
)
"""Operator spellings allowed in ``{field: {op: value}}`` metadata filters: the ones the
knowledge base's filter compiler (``knowledge.filters``) understands."""
_FILTER_LOGIC: Final = frozenset({"$and", "$or", "and", "or"})

REFERENCE = "reference"
FILTERS = "filters"

FIELD_GUARDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # ids and names that end up in URL paths, SQL or name lookups
        "id": REFERENCE,
        "alert_id": REFERENCE,
        "draft_id": REFERENCE,
        "workflow_id": REFERENCE,
        "query_id": REFERENCE,
        "perplexity_result_id": REFERENCE,
        "doc_id": REFERENCE,
        "kb_id": REFERENCE,
        "schema": REFERENCE,
        "table": REFERENCE,
        "bucket": REFERENCE,
        "entity": REFERENCE,
        "trigger_type": REFERENCE,
        "source_schema": REFERENCE,
        "source_table": REFERENCE,
        # metadata filters become WHERE clauses
        "filters": FILTERS,
    }
)
"""Which extra check applies to a property, by its name, at any depth of a declared schema."""

TOOL_FIELD_GUARDS: Final[Mapping[tuple[str, str], str]] = MappingProxyType(
    {("get_table_config", "name"): REFERENCE}  # the name goes into /v1/data/name/{name}
)
"""Guards for a field of one tool only, where the name alone is too common to guard."""

_REFERENCE_BAD_CHARS: Final = frozenset("/\\?#%;'\"`<>\n\t")
_REFERENCE_BAD_SEQUENCES: Final = ("..", "--", "/*", "*/")
_SQL_WORDS = re.compile(
    r"\b(drop|delete|truncate|alter)\s+table\b|\bunion\s+(all\s+)?select\b|\binsert\s+into\b|\bselect\s+.+\s+from\b",
    re.IGNORECASE,
)
_FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

HINTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        REFERENCE: "Ids and names must be copied exactly from a previous tool result or the "
        "context; they cannot contain slashes, quotes, '?', '#', '%', ';', '..' or '--'.",
        FILTERS: "filters maps metadata field names to a value, a list of values (any of "
        "them), or {operator: value} with operator one of =, !=, >, >=, <, <=, in, nin, like; "
        'combine alternatives with {"$or": [filter, ...]}.',
    }
)


def passes_guard(guard: str, text: str, path: str, walk: Walk) -> bool:
    if guard == REFERENCE:
        problem = reference_problem(text)
        if problem is not None:
            walk.fail(path, problem, HINTS[REFERENCE])
            return False
    return True


def reference_problem(text: str) -> str | None:
    """Why an id or name is unsafe to put in a path, query string or SQL lookup, or None."""
    bad = sorted({c for c in text if c in _REFERENCE_BAD_CHARS})
    for seq in _REFERENCE_BAD_SEQUENCES:
        if seq in text:
            return f"contains {seq!r}, which is not allowed in ids or names"
    if bad:
        shown = " ".join(repr(c) for c in bad)
        return f"contains characters not allowed in ids or names: {shown}"
    if _SQL_WORDS.search(text):
        return "looks like an SQL statement"
    return None


def check_filters(filters: dict[str, Any], path: str, walk: Walk, depth: int = 0) -> None:
    """Structure only: the knowledge base compiles filters against the bucket's schema and
    reports unknown fields itself; here, field names must be identifiers and operands plain
    values, so nothing but data can travel in a filter."""
    if depth > MAX_FILTER_DEPTH:
        walk.fail(path, f"filters nested deeper than {MAX_FILTER_DEPTH} levels", HINTS[FILTERS])
        return
    if len(filters) > MAX_FILTER_KEYS:
        walk.fail(path, f"has {len(filters)} fields; at most {MAX_FILTER_KEYS} allowed", HINTS[FILTERS])
        return
    for key, value in filters.items():
        child = f"{path}.{key}"
        if key in _FILTER_LOGIC:
            if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
                walk.fail(child, f"{key} takes a list of filter objects", HINTS[FILTERS])
                continue
            for i, sub in enumerate(value):
                check_filters(sub, f"{child}[{i}]", walk, depth + 1)
            continue
        if not _FILTER_KEY.match(key):
            walk.fail(child, "filter field names must be plain identifiers", HINTS[FILTERS])
            continue
        if isinstance(value, dict):
            if not value:
                walk.fail(child, "an operator object needs at least one operator", HINTS[FILTERS])
            for op, operand in value.items():
                if op.strip().lower() not in SEARCH_FILTER_OPERATORS and op not in ("operator", "value"):
                    walk.fail(f"{child}.{op}", "unknown filter operator", HINTS[FILTERS])
                elif not _is_scalar(operand) and not _is_scalar_list(operand):
                    walk.fail(f"{child}.{op}", "operands must be plain values", HINTS[FILTERS])
        elif not _is_scalar(value) and not _is_scalar_list(value):
            walk.fail(child, "filter values must be plain values or lists of them", HINTS[FILTERS])


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _is_scalar_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= DEFAULT_MAX_ITEMS and all(_is_scalar(x) for x in v)
