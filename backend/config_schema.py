"""A small JSON Schema checker for action configs.

It covers exactly the keywords the seeded action types use — ``type``, ``properties``,
``required``, ``enum``, ``items``, ``minimum``, ``maximum``, ``minLength``, ``maxLength``,
``minItems`` and ``format: uuid`` — and reports every problem with a JSON path, so the
model gets one message listing all of them instead of fixing them one round-trip at a time.
"""

from __future__ import annotations

import uuid
from typing import Any

_TYPE_CHECKS = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "null": lambda v: v is None,
}


def _type_name(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPE_CHECKS[name](value):
            return name
    return type(value).__name__


def _is_uuid(value: str) -> bool:
    if len(value) != 36:
        return False
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def check_against_schema(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Every way ``value`` breaks ``schema``, as ``"<path>: <problem>"`` strings."""
    where = path or "(root)"
    problems: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        allowed = expected if isinstance(expected, list) else [expected]
        if not any(_TYPE_CHECKS[t](value) for t in allowed if t in _TYPE_CHECKS):
            return [f"{where}: expected {' or '.join(allowed)}, got {_type_name(value)}"]
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        problems.append(f"{where}: {value!r} is not one of {', '.join(map(str, enum))}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{where}: must be at least {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: must be at most {schema['maxLength']} characters")
        if schema.get("format") == "uuid" and not _is_uuid(value):
            problems.append(f"{where}: must be a 36-character UUID, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: must be <= {schema['maximum']}, got {value}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{where}: needs at least {schema['minItems']} item(s)")
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                problems += check_against_schema(item, items, f"{path}[{i}]")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value or value[key] is None:
                problems.append(f"{_join(path, key)}: is required")
        for key, sub in schema.get("properties", {}).items():
            if key in value and value[key] is not None:
                problems += check_against_schema(value[key], sub, _join(path, key))
    return problems


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
