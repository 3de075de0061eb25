"""Tool-argument validation: the JSON-Schema subset the catalog uses, plus sanitising and
the checks that stop a value from breaking out of the field it is meant for.

Every tool call passes through ``validate_arguments`` before it runs (FR-002 / FR-005). A
rejected call comes back as ``{"error": "invalid_parameters", "reason", "guidance"}`` for the
model to correct and retry; it never reaches a handler.

What is checked, in one pass over the arguments:
- types (``object``, ``array``, ``string``, ``integer``, ``number``, ``boolean``, untyped),
  ``required``, ``additionalProperties: false``, ``enum``, ``minLength``/``maxLength``,
  ``minimum``/``maximum``, ``minItems``/``maxItems``, ``pattern``; defaults are filled in;
- harmless slips are repaired instead of rejected, since models make them often: numbers or
  booleans sent as text, integral floats, enum values in the wrong case, an object sent as a
  JSON string, ``null`` for an optional field (treated as absent);
- every string loses its control characters (``\\n`` and ``\\t`` stay) and invisible
  formatting characters; strings with a schema are trimmed;
- guards chosen by field name (see ``FIELD_GUARDS``): SQL fragments and path traversal in
  ids and names that end up in URLs or lookups, and a strict shape for metadata ``filters``;
- free-form objects (workflow payloads, table configs) are capped by serialized size and
  nesting depth; arrays by ``maxItems`` (or a default cap).

Free-text search queries and keywords get the type, length and control-character checks
and nothing more: a question about "the system prompt", "jailbreak risks" or "developer
mode" is an ordinary question (a phrase blacklist rejected those and stopped nothing).
Protection against injected instructions lives where untrusted text enters the model's
view: retrieved text is quoted and neutralised (``agenttools.core.untrusted``) and the system
prompt says tool results are data.

The validator is a small hand-written walker, not a dependency: it runs on every call and
only has to understand the keywords the catalog emits.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

import orjson

from agenttools.core.registry import ToolSpec

MAX_ARGUMENTS_BYTES: Final = 256 * 1024
"""Cap on the serialized size of all arguments of one call."""
MAX_NESTED_BYTES: Final = 64 * 1024
"""Cap on the serialized size of one nested object or array parameter."""
MAX_DEPTH: Final = 16
"""Cap on nesting depth inside free-form values."""
DEFAULT_MAX_ITEMS: Final = 100
"""``maxItems`` for arrays whose schema sets none."""
DEFAULT_MAX_STRING: Final = 20_000
"""``maxLength`` for strings inside free-form values and strings whose schema sets none."""
MAX_ISSUES: Final = 6
"""How many problems one error reports (enough to fix a call, short enough to read)."""

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

_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u200e\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)

_REFERENCE_BAD_CHARS: Final = frozenset("/\\?#%;'\"`<>\n\t")
_REFERENCE_BAD_SEQUENCES: Final = ("..", "--", "/*", "*/")
_SQL_WORDS = re.compile(
    r"\b(drop|delete|truncate|alter)\s+table\b|\bunion\s+(all\s+)?select\b|\binsert\s+into\b|\bselect\s+.+\s+from\b",
    re.IGNORECASE,
)
_FILTER_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_INT_TEXT = re.compile(r"^[+-]?\d{1,18}$")
_NUMBER_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")

_HINTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        REFERENCE: "Ids and names must be copied exactly from a previous tool result or the "
        "context; they cannot contain slashes, quotes, '?', '#', '%', ';', '..' or '--'.",
        FILTERS: "filters maps metadata field names to a value, a list of values (any of "
        "them), or {operator: value} with operator one of =, !=, >, >=, <, <=, in, nin, like; "
        "combine alternatives with {\"$or\": [filter, ...]}.",
    }
)


@dataclass(frozen=True, slots=True)
class ValidationResult:
    """``arguments`` is the cleaned input (defaults filled, strings sanitised) when ``ok``;
    ``error`` is the structured message for the model when not."""

    ok: bool
    arguments: dict[str, Any]
    error: dict[str, str] | None = None


class _Walk:
    """One validation pass: collects problems and the guards that were tripped."""

    __slots__ = ("hints", "issues", "tool")

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.issues: list[str] = []
        self.hints: list[str] = []

    def fail(self, path: str, message: str, hint: str | None = None) -> None:
        if len(self.issues) < MAX_ISSUES:
            self.issues.append(f"{path or 'arguments'}: {message}")
        if hint is not None and hint not in self.hints:
            self.hints.append(hint)


_MISSING: Final = object()


def validate_arguments(spec: ToolSpec, args: object) -> ValidationResult:
    """Check and clean ``args`` against ``spec``'s parameter schema.

    ``args`` may be the decoded object, ``None`` (no arguments) or its JSON text. Never raises.
    """
    walk = _Walk(spec.name)
    if args is None or args == "" or args == b"":
        args = {}
    elif isinstance(args, (str, bytes, bytearray)):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError as exc:
            walk.fail("", f"not valid JSON ({exc})")
            return _result(spec, walk, {})
    if not isinstance(args, Mapping):
        walk.fail("", f"must be a JSON object, got {_type_name(args)}")
        return _result(spec, walk, {})
    try:
        size = len(orjson.dumps(args))
    except (TypeError, orjson.JSONEncodeError) as exc:
        walk.fail("", f"not JSON-serialisable ({exc})")
        return _result(spec, walk, {})
    if size > MAX_ARGUMENTS_BYTES:
        walk.fail("", f"too large ({size} bytes; the limit is {MAX_ARGUMENTS_BYTES})")
        return _result(spec, walk, {})
    schema = spec.definition.parameters
    cleaned = _check(schema, args, "", None, walk, depth=0)
    if walk.issues or not isinstance(cleaned, dict):
        return _result(spec, walk, {})
    return ValidationResult(True, cleaned, None)


def _result(spec: ToolSpec, walk: _Walk, cleaned: dict[str, Any]) -> ValidationResult:
    guidance = [f"Correct the arguments and call {spec.name} again."]
    guidance.extend(walk.hints)
    summary = parameter_summary(spec.definition.parameters)
    if summary:
        guidance.append(f"Parameters: {summary}.")
    error = {
        "error": "invalid_parameters",
        "reason": "; ".join(walk.issues) or "invalid arguments",
        "guidance": " ".join(guidance),
    }
    return ValidationResult(False, cleaned, error)


def parameter_summary(schema: Mapping[str, Any]) -> str:
    """A one-line description of a tool's parameters for error guidance."""
    props: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    parts = []
    for name, sub in props.items():
        bits = [str(sub.get("type", "any"))]
        if name in required:
            bits.append("required")
        if "enum" in sub:
            bits.append("one of " + "|".join(map(str, sub["enum"])))
        if "minimum" in sub and "maximum" in sub:
            bits.append(f"{sub['minimum']}..{sub['maximum']}")
        if sub.get("type") == "string" and "maxLength" in sub:
            bits.append(f"max {sub['maxLength']} chars")
        if sub.get("type") == "array":
            lo, hi = sub.get("minItems"), sub.get("maxItems")
            bits.append(f"{lo or 0}..{hi} items" if hi is not None else "list")
        if "default" in sub:
            bits.append(f"default {sub['default']!r}")
        parts.append(f"{name} ({', '.join(bits)})")
    return "; ".join(parts)


# --- the walker ------------------------------------------------------------------------


def _check(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: _Walk, depth: int) -> Any:
    if depth > MAX_DEPTH:
        walk.fail(path, f"nested deeper than {MAX_DEPTH} levels")
        return _MISSING
    kind = schema.get("type")
    if kind == "object":
        return _check_object(schema, value, path, guard, walk, depth)
    if kind == "array":
        return _check_array(schema, value, path, guard, walk, depth)
    if kind == "string":
        return _check_string(schema, value, path, guard, walk)
    if kind == "integer":
        return _check_integer(schema, value, path, walk)
    if kind == "number":
        return _check_number(schema, value, path, walk)
    if kind == "boolean":
        return _check_boolean(value, path, walk)
    # untyped: any JSON value, sanitised and capped
    return _check_free(value, path, walk, depth)


def _check_object(
    schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: _Walk, depth: int
) -> Any:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):  # a model that sent the object as JSON text
            value = orjson.loads(value)
    if not isinstance(value, Mapping):
        walk.fail(path, f"must be an object, got {_type_name(value)}")
        return _MISSING
    props: Mapping[str, Any] | None = schema.get("properties")
    if props is None:
        cleaned = _check_free(value, path, walk, depth)
        if cleaned is _MISSING:
            return _MISSING
        if not _within_size(cleaned, path, walk):
            return _MISSING
        if guard == FILTERS:
            _check_filters(cleaned, path, walk)
        return cleaned

    out: dict[str, Any] = {}
    required = schema.get("required") or ()
    closed = schema.get("additionalProperties") is False
    for key, raw in value.items():
        sub = props.get(key)
        child = f"{path}.{key}" if path else key
        if sub is None:
            if closed:
                allowed = ", ".join(props) or "none"
                walk.fail(child, f"unknown parameter (allowed: {allowed})")
            else:
                cleaned = _check_free(raw, child, walk, depth + 1)
                if cleaned is not _MISSING:
                    out[key] = cleaned
            continue
        if raw is None:  # null for a field means "not given"
            continue
        if key not in required and isinstance(raw, str) and not sanitize_text(raw):
            continue  # so does an empty optional string; its default applies
        child_guard = TOOL_FIELD_GUARDS.get((walk.tool, key)) if depth == 0 else None
        child_guard = child_guard or FIELD_GUARDS.get(key)
        cleaned = _check(sub, raw, child, child_guard, walk, depth + 1)
        if cleaned is not _MISSING:
            out[key] = cleaned
    for key in required:
        if value.get(key) is None:  # present-but-invalid values were reported above
            walk.fail(f"{path}.{key}" if path else key, "is required")
    for key, sub in props.items():
        if key not in out and "default" in sub and value.get(key) is None:
            out[key] = sub["default"]
    if depth > 0 and not _within_size(out, path, walk):
        return _MISSING
    return out


def _check_array(
    schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: _Walk, depth: int
) -> Any:
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        walk.fail(path, f"must be a list, got {_type_name(value)}")
        return _MISSING
    max_items = schema.get("maxItems", DEFAULT_MAX_ITEMS)
    min_items = schema.get("minItems", 0)
    if len(value) > max_items:
        walk.fail(path, f"has {len(value)} items; at most {max_items} allowed")
        return _MISSING
    if len(value) < min_items:
        walk.fail(path, f"has {len(value)} items; at least {min_items} required")
        return _MISSING
    items = schema.get("items") or {}
    out = []
    ok = True
    for i, item in enumerate(value):
        cleaned = _check(items, item, f"{path}[{i}]", guard, walk, depth + 1)
        if cleaned is _MISSING:
            ok = False
        else:
            out.append(cleaned)
    if not ok:
        return _MISSING
    if not _within_size(out, path, walk):
        return _MISSING
    return out


def _check_string(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: _Walk) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        walk.fail(path, f"must be a string, got {_type_name(value)}")
        return _MISSING
    if not isinstance(value, str):
        if isinstance(value, float) and not math.isfinite(value):
            walk.fail(path, "must be a string")
            return _MISSING
        value = str(value)
    text = sanitize_text(value)
    enum = schema.get("enum")
    if enum is not None:
        if text in enum:
            return text
        folded = text.casefold()
        for option in enum:
            if isinstance(option, str) and option.casefold() == folded:
                return option
        walk.fail(path, f"must be one of {', '.join(map(str, enum))}; got {_preview(text)}")
        return _MISSING
    min_length = schema.get("minLength", 0)
    max_length = schema.get("maxLength", DEFAULT_MAX_STRING)
    if len(text) > max_length:
        walk.fail(path, f"is {len(text)} characters; at most {max_length} allowed")
        return _MISSING
    if len(text) < min_length:
        walk.fail(path, "must not be empty" if min_length == 1 else f"needs at least {min_length} characters")
        return _MISSING
    if guard is not None and not _passes_guard(guard, text, path, walk):
        return _MISSING
    pattern = schema.get("pattern")
    if pattern is not None and re.search(pattern, text) is None:
        walk.fail(path, f"has an invalid format ({_preview(text)})", _HINTS[REFERENCE] if guard == REFERENCE else None)
        return _MISSING
    return text


def _check_integer(schema: Mapping[str, Any], value: Any, path: str, walk: _Walk) -> Any:
    if isinstance(value, bool):
        walk.fail(path, "must be an integer, got a boolean")
        return _MISSING
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT_TEXT.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        walk.fail(path, f"must be an integer, got {_type_name(value)}")
        return _MISSING
    return _check_range(schema, value, path, walk)


def _check_number(schema: Mapping[str, Any], value: Any, path: str, walk: _Walk) -> Any:
    if isinstance(value, bool):
        walk.fail(path, "must be a number, got a boolean")
        return _MISSING
    if isinstance(value, str) and _NUMBER_TEXT.match(value.strip()):
        value = float(value.strip())
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        walk.fail(path, f"must be a finite number, got {_type_name(value)}")
        return _MISSING
    return _check_range(schema, value, path, walk)


def _check_range(schema: Mapping[str, Any], value: int | float, path: str, walk: _Walk) -> Any:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and value < lo:
        walk.fail(path, f"must be at least {lo}; got {value}")
        return _MISSING
    if hi is not None and value > hi:
        walk.fail(path, f"must be at most {hi}; got {value}")
        return _MISSING
    return value


def _check_boolean(value: Any, path: str, walk: _Walk) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in ("true", "false"):
        return value.strip().casefold() == "true"
    walk.fail(path, f"must be true or false, got {_type_name(value)}")
    return _MISSING


def _check_free(value: Any, path: str, walk: _Walk, depth: int) -> Any:
    """Any JSON value without a schema: sanitise strings, check types and depth."""
    if depth > MAX_DEPTH:
        walk.fail(path, f"nested deeper than {MAX_DEPTH} levels")
        return _MISSING
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            walk.fail(path, "numbers must be finite")
            return _MISSING
        return value
    if isinstance(value, str):
        text = _INVISIBLE.sub("", value)
        if len(text) > DEFAULT_MAX_STRING:
            walk.fail(path, f"text of {len(text)} characters; at most {DEFAULT_MAX_STRING} allowed")
            return _MISSING
        return text
    if isinstance(value, (list, tuple)):
        if len(value) > 10 * DEFAULT_MAX_ITEMS:
            walk.fail(path, f"has {len(value)} items; at most {10 * DEFAULT_MAX_ITEMS} allowed")
            return _MISSING
        out_list = []
        for i, item in enumerate(value):
            cleaned = _check_free(item, f"{path}[{i}]", walk, depth + 1)
            if cleaned is _MISSING:
                return _MISSING
            out_list.append(cleaned)
        return out_list
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                walk.fail(path, "object keys must be strings")
                return _MISSING
            cleaned = _check_free(item, f"{path}.{key}", walk, depth + 1)
            if cleaned is _MISSING:
                return _MISSING
            out[_INVISIBLE.sub("", key)] = cleaned
        return out
    walk.fail(path, f"unsupported value of type {_type_name(value)}")
    return _MISSING


def _within_size(value: Any, path: str, walk: _Walk) -> bool:
    size = len(orjson.dumps(value))
    if size > MAX_NESTED_BYTES:
        walk.fail(path, f"is {size} bytes when serialised; at most {MAX_NESTED_BYTES} allowed")
        return False
    return True


# --- guards --------------------------------------------------------------------------


def _passes_guard(guard: str, text: str, path: str, walk: _Walk) -> bool:
    if guard == REFERENCE:
        problem = reference_problem(text)
        if problem is not None:
            walk.fail(path, problem, _HINTS[REFERENCE])
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


def _check_filters(filters: dict[str, Any], path: str, walk: _Walk, depth: int = 0) -> None:
    """Structure only: the knowledge base compiles filters against the bucket's schema and
    reports unknown fields itself; here, field names must be identifiers and operands plain
    values, so nothing but data can travel in a filter."""
    if depth > MAX_FILTER_DEPTH:
        walk.fail(path, f"filters nested deeper than {MAX_FILTER_DEPTH} levels", _HINTS[FILTERS])
        return
    if len(filters) > MAX_FILTER_KEYS:
        walk.fail(path, f"has {len(filters)} fields; at most {MAX_FILTER_KEYS} allowed", _HINTS[FILTERS])
        return
    for key, value in filters.items():
        child = f"{path}.{key}"
        if key in _FILTER_LOGIC:
            if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
                walk.fail(child, f"{key} takes a list of filter objects", _HINTS[FILTERS])
                continue
            for i, sub in enumerate(value):
                _check_filters(sub, f"{child}[{i}]", walk, depth + 1)
            continue
        if not _FILTER_KEY.match(key):
            walk.fail(child, "filter field names must be plain identifiers", _HINTS[FILTERS])
            continue
        if isinstance(value, dict):
            if not value:
                walk.fail(child, "an operator object needs at least one operator", _HINTS[FILTERS])
            for op, operand in value.items():
                if op.strip().lower() not in SEARCH_FILTER_OPERATORS and op not in ("operator", "value"):
                    walk.fail(f"{child}.{op}", "unknown filter operator", _HINTS[FILTERS])
                elif not _is_scalar(operand) and not _is_scalar_list(operand):
                    walk.fail(f"{child}.{op}", "operands must be plain values", _HINTS[FILTERS])
        elif not _is_scalar(value) and not _is_scalar_list(value):
            walk.fail(child, "filter values must be plain values or lists of them", _HINTS[FILTERS])


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _is_scalar_list(v: Any) -> bool:
    return isinstance(v, list) and len(v) <= DEFAULT_MAX_ITEMS and all(_is_scalar(x) for x in v)


# --- small helpers -----------------------------------------------------------------------


def sanitize_text(text: str) -> str:
    """Strip control and invisible formatting characters (keeping ``\\n`` and ``\\t``) and
    surrounding whitespace."""
    return _INVISIBLE.sub("", text).strip()


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _preview(text: str, limit: int = 40) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
