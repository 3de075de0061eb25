"""The schema walker: the JSON-Schema subset the catalog emits (types, required,
additionalProperties, enum, lengths, ranges, items, pattern, defaults), the slips it
repairs (numbers as text, integral floats, enum case, objects as JSON text, ``null`` for
optional fields), and the caps on free-form values.

Its own module because it is the one recursive part of the validator; the field guards
and the result shape stay readable beside it.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Mapping
from typing import Any

import orjson

from agenttools.core.field_guards import (
    FIELD_GUARDS,
    FILTERS,
    HINTS,
    REFERENCE,
    TOOL_FIELD_GUARDS,
    check_filters,
    passes_guard,
)
from agenttools.core.validation_pass import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_STRING,
    INVISIBLE,
    MAX_DEPTH,
    MAX_NESTED_BYTES,
    MISSING,
    Walk,
    preview,
    sanitize_text,
    type_name,
)

_INT_TEXT = re.compile(r"^[+-]?\d{1,18}$")
_NUMBER_TEXT = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def check_value(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: Walk, depth: int) -> Any:
    if depth > MAX_DEPTH:
        walk.fail(path, f"nested deeper than {MAX_DEPTH} levels")
        return MISSING
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


def _check_object(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: Walk, depth: int) -> Any:
    if isinstance(value, str) and value.lstrip().startswith("{"):
        with contextlib.suppress(orjson.JSONDecodeError):  # a model that sent the object as JSON text
            value = orjson.loads(value)
    if not isinstance(value, Mapping):
        walk.fail(path, f"must be an object, got {type_name(value)}")
        return MISSING
    props: Mapping[str, Any] | None = schema.get("properties")
    if props is None:
        cleaned = _check_free(value, path, walk, depth)
        if cleaned is MISSING:
            return MISSING
        if not _within_size(cleaned, path, walk):
            return MISSING
        if guard == FILTERS:
            check_filters(cleaned, path, walk)
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
                if cleaned is not MISSING:
                    out[key] = cleaned
            continue
        if raw is None:  # null for a field means "not given"
            continue
        if key not in required and isinstance(raw, str) and not sanitize_text(raw):
            continue  # so does an empty optional string; its default applies
        child_guard = TOOL_FIELD_GUARDS.get((walk.tool, key)) if depth == 0 else None
        child_guard = child_guard or FIELD_GUARDS.get(key)
        cleaned = check_value(sub, raw, child, child_guard, walk, depth + 1)
        if cleaned is not MISSING:
            out[key] = cleaned
    for key in required:
        if value.get(key) is None:  # present-but-invalid values were reported above
            walk.fail(f"{path}.{key}" if path else key, "is required")
    for key, sub in props.items():
        if key not in out and "default" in sub and value.get(key) is None:
            out[key] = sub["default"]
    if depth > 0 and not _within_size(out, path, walk):
        return MISSING
    return out


def _check_array(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: Walk, depth: int) -> Any:
    if isinstance(value, tuple):
        value = list(value)
    if not isinstance(value, list):
        walk.fail(path, f"must be a list, got {type_name(value)}")
        return MISSING
    max_items = schema.get("maxItems", DEFAULT_MAX_ITEMS)
    min_items = schema.get("minItems", 0)
    if len(value) > max_items:
        walk.fail(path, f"has {len(value)} items; at most {max_items} allowed")
        return MISSING
    if len(value) < min_items:
        walk.fail(path, f"has {len(value)} items; at least {min_items} required")
        return MISSING
    items = schema.get("items") or {}
    out = []
    ok = True
    for i, item in enumerate(value):
        cleaned = check_value(items, item, f"{path}[{i}]", guard, walk, depth + 1)
        if cleaned is MISSING:
            ok = False
        else:
            out.append(cleaned)
    if not ok:
        return MISSING
    if not _within_size(out, path, walk):
        return MISSING
    return out


def _check_string(schema: Mapping[str, Any], value: Any, path: str, guard: str | None, walk: Walk) -> Any:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        walk.fail(path, f"must be a string, got {type_name(value)}")
        return MISSING
    if not isinstance(value, str):
        if isinstance(value, float) and not math.isfinite(value):
            walk.fail(path, "must be a string")
            return MISSING
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
        walk.fail(path, f"must be one of {', '.join(map(str, enum))}; got {preview(text)}")
        return MISSING
    min_length = schema.get("minLength", 0)
    max_length = schema.get("maxLength", DEFAULT_MAX_STRING)
    if len(text) > max_length:
        walk.fail(path, f"is {len(text)} characters; at most {max_length} allowed")
        return MISSING
    if len(text) < min_length:
        walk.fail(path, "must not be empty" if min_length == 1 else f"needs at least {min_length} characters")
        return MISSING
    if guard is not None and not passes_guard(guard, text, path, walk):
        return MISSING
    pattern = schema.get("pattern")
    if pattern is not None and re.search(pattern, text) is None:
        walk.fail(path, f"has an invalid format ({preview(text)})", HINTS[REFERENCE] if guard == REFERENCE else None)
        return MISSING
    return text


def _check_integer(schema: Mapping[str, Any], value: Any, path: str, walk: Walk) -> Any:
    if isinstance(value, bool):
        walk.fail(path, "must be an integer, got a boolean")
        return MISSING
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and _INT_TEXT.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        walk.fail(path, f"must be an integer, got {type_name(value)}")
        return MISSING
    return _check_range(schema, value, path, walk)


def _check_number(schema: Mapping[str, Any], value: Any, path: str, walk: Walk) -> Any:
    if isinstance(value, bool):
        walk.fail(path, "must be a number, got a boolean")
        return MISSING
    if isinstance(value, str) and _NUMBER_TEXT.match(value.strip()):
        value = float(value.strip())
    if not isinstance(value, (int, float)) or (isinstance(value, float) and not math.isfinite(value)):
        walk.fail(path, f"must be a finite number, got {type_name(value)}")
        return MISSING
    return _check_range(schema, value, path, walk)


def _check_range(schema: Mapping[str, Any], value: int | float, path: str, walk: Walk) -> Any:
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and value < lo:
        walk.fail(path, f"must be at least {lo}; got {value}")
        return MISSING
    if hi is not None and value > hi:
        walk.fail(path, f"must be at most {hi}; got {value}")
        return MISSING
    return value


def _check_boolean(value: Any, path: str, walk: Walk) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().casefold() in ("true", "false"):
        return value.strip().casefold() == "true"
    walk.fail(path, f"must be true or false, got {type_name(value)}")
    return MISSING


def _check_free(value: Any, path: str, walk: Walk, depth: int) -> Any:
    """Any JSON value without a schema: sanitise strings, check types and depth."""
    if depth > MAX_DEPTH:
        walk.fail(path, f"nested deeper than {MAX_DEPTH} levels")
        return MISSING
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            walk.fail(path, "numbers must be finite")
            return MISSING
        return value
    if isinstance(value, str):
        text = INVISIBLE.sub("", value)
        if len(text) > DEFAULT_MAX_STRING:
            walk.fail(path, f"text of {len(text)} characters; at most {DEFAULT_MAX_STRING} allowed")
            return MISSING
        return text
    if isinstance(value, (list, tuple)):
        if len(value) > 10 * DEFAULT_MAX_ITEMS:
            walk.fail(path, f"has {len(value)} items; at most {10 * DEFAULT_MAX_ITEMS} allowed")
            return MISSING
        out_list = []
        for i, item in enumerate(value):
            cleaned = _check_free(item, f"{path}[{i}]", walk, depth + 1)
            if cleaned is MISSING:
                return MISSING
            out_list.append(cleaned)
        return out_list
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                walk.fail(path, "object keys must be strings")
                return MISSING
            cleaned = _check_free(item, f"{path}.{key}", walk, depth + 1)
            if cleaned is MISSING:
                return MISSING
            out[INVISIBLE.sub("", key)] = cleaned
        return out
    walk.fail(path, f"unsupported value of type {type_name(value)}")
    return MISSING


def _within_size(value: Any, path: str, walk: Walk) -> bool:
    size = len(orjson.dumps(value))
    if size > MAX_NESTED_BYTES:
        walk.fail(path, f"is {size} bytes when serialised; at most {MAX_NESTED_BYTES} allowed")
        return False
    return True
