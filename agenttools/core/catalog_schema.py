"""Small builders for the JSON-Schema fragments the catalog uses.

The catalog writes dozens of parameter schemas; these helpers keep each one short and make
sure every schema has the same shape: ``type: object``, ``properties``, ``required`` and
``additionalProperties: false`` at the top, string limits everywhere, and a ``maxItems`` on
every array. Only keywords that Gemini's ``Schema`` and the validator in
``agenttools.core.validation`` both understand are emitted (no ``anyOf``, no ``$ref``, no
``format``), because the same dict is sent to the model and drives validation.

The helpers return fresh dicts on every call, so nothing here is shared mutable state.
"""

from __future__ import annotations

from typing import Any

UUID_PATTERN = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
"""A strict hyphenated UUID (36 characters), the only form ids are accepted in."""

SQL_IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"
"""A PostgreSQL schema or table name, unquoted (no dots, slashes or spaces)."""

COLUMN_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"
"""A column reference as the table-config model accepts it: ``name`` or ``table.name``."""

ENTITY_PATTERN = (
    r"^([A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*"
    r"|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$"
)
"""``schema.table`` or a UUID."""

NAME_OR_UUID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.:()&,+-]{0,254}$"
"""A human name (rule, trigger type) or a UUID: letters, digits and common punctuation."""

DOC_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,199}$"
"""Knowledge-base document / result / query ids: no slashes, spaces, quotes or ``?#``."""

PG_TYPE_PATTERN = r"^[A-Za-z][A-Za-z0-9 _(),\[\]]{0,63}$"
"""A PostgreSQL type name such as ``character varying`` or ``numeric(12,2)``."""

ACTION_TYPES: tuple[str, ...] = (
    "allocate_inventory",
    "check_inventory",
    "check_reorder_point",
    "commit_allocation",
    "create_alert",
    "create_entity",
    "delay",
    "evaluate_condition",
    "log_audit_entry",
    "lookup_entity",
    "release_reservation",
    "reserve_inventory",
    "seek_approval",
    "send_email",
    "send_notification",
    "transition_status",
    "update_field",
)
ALERT_STATUSES: tuple[str, ...] = ("active", "acknowledged", "dismissed", "resolved")
ALERT_SEVERITIES: tuple[str, ...] = ("low", "medium", "high", "critical")
FILTER_OPERATORS: tuple[str, ...] = (
    "eq",
    "neq",
    "gt",
    "gte",
    "lt",
    "lte",
    "in",
    "like",
    "ilike",
    "is_null",
    "is_not_null",
)
JOIN_TYPES: tuple[str, ...] = ("inner", "left", "right", "full")
SORT_DIRECTIONS: tuple[str, ...] = ("asc", "desc")


def obj(properties: dict[str, dict[str, Any]], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A closed object schema: unknown keys are rejected by the validator."""
    missing = [r for r in required if r not in properties]
    if missing:
        raise ValueError(f"required fields without a schema: {missing}")
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


def free_object(description: str) -> dict[str, Any]:
    """A nested, free-form object (workflow payload, table config, filters).

    Kept as a plain ``type: object`` with its shape explained in prose: Ollama's client
    drops nested ``properties`` anyway, and the backend validates the content. The
    validator caps its serialized size and nesting depth.
    """
    return {"type": "object", "description": description}


def string(
    description: str,
    *,
    max_length: int = 200,
    min_length: int | None = None,
    pattern: str | None = None,
    enum: tuple[str, ...] | None = None,
    default: str | None = None,
) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string", "description": description}
    if enum is not None:
        s["enum"] = list(enum)
    else:
        s["maxLength"] = max_length
        if min_length is not None:
            s["minLength"] = min_length
        if pattern is not None:
            s["pattern"] = pattern
    if default is not None:
        s["default"] = default
    return s


def integer(
    description: str, *, minimum: int, maximum: int, default: int | None = None
) -> dict[str, Any]:
    """The range and default are repeated in the prose: Ollama's client drops the keywords."""
    bounds = f"{minimum} to {maximum}" + (f", default {default}" if default is not None else "")
    description = f"{description.rstrip('.')} ({bounds})."
    s: dict[str, Any] = {"type": "integer", "description": description, "minimum": minimum, "maximum": maximum}
    if default is not None:
        s["default"] = default
    return s


def number(description: str, *, minimum: float, maximum: float) -> dict[str, Any]:
    return {"type": "number", "description": description, "minimum": minimum, "maximum": maximum}


def boolean(description: str, *, default: bool | None = None) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "boolean", "description": description}
    if default is not None:
        s["default"] = default
    return s


def array(
    description: str, items: dict[str, Any], *, max_items: int, min_items: int | None = None
) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "array", "description": description, "items": items, "maxItems": max_items}
    if min_items is not None:
        s["minItems"] = min_items
    return s


def item_object(
    properties: dict[str, dict[str, Any]], required: tuple[str, ...], description: str | None = None
) -> dict[str, Any]:
    """An object inside an array or a small nested parameter (a filter, a join).

    Its ``properties`` drive validation and reach Gemini; Ollama's client keeps only the
    ``description`` of a nested object parameter, so a parameter (not an array item) must
    describe its fields in prose.
    """
    s = obj(properties, required)
    if description is not None:
        s["description"] = description
    return s


def any_value(description: str) -> dict[str, Any]:
    """A value of any JSON type (a filter's comparison value). Sent to the model as a string
    schema would be wrong, so the type is left out; the validator caps its size."""
    return {"description": description}
