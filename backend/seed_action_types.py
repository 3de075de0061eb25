"""The 17 workflow action types: descriptions, output ports and config JSON Schemas.

The 17 names are the ones the reference lists (§3.6). Their descriptions, categories,
port names and config schemas are this backend's own plausible rendering of an ERP
workflow engine; the port style follows the reference (``success``/``failure``,
``output-true``/``output-false``). The schemas use only the JSON Schema subset that
``backend.config_schema`` checks: type, properties, required, enum, items, minimum,
maximum, minLength, maxLength, minItems and ``format: uuid``.
"""

from __future__ import annotations

from typing import Any

_SEVERITIES = ["low", "medium", "high", "critical"]
_UUID = {"type": "string", "format": "uuid"}
_UUID_LIST = {"type": "array", "items": _UUID}


def _port(name: str, description: str, is_default: bool = False) -> dict[str, Any]:
    return {"name": name, "description": description, "is_default": is_default}


_SUCCESS_FAILURE = [
    _port("success", "The action completed.", True),
    _port("failure", "The action failed; the error is in the execution context."),
]


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _action(
    type_: str,
    name: str,
    category: str,
    description: str,
    schema: dict[str, Any],
    ports: list[dict[str, Any]],
    *,
    manual: bool = True,
    is_async: bool = False,
) -> dict[str, Any]:
    return {
        "type": type_,
        "name": name,
        "description": description,
        "category": category,
        "supports_manual_execution": manual,
        "is_async": is_async,
        "config_schema": schema,
        "output_ports": ports,
    }


ACTION_TYPES: tuple[dict[str, Any], ...] = (
    _action(
        "allocate_inventory",
        "Allocate Inventory",
        "inventory",
        "Allocates on-hand stock to an order or line item. Picks locations by the chosen strategy and records "
        "the allocation for a later commit.",
        _schema(
            {
                "source_from_line_item": {"type": "boolean"},
                "product_id": _UUID,
                "quantity": {"type": "integer", "minimum": 1},
                "allocation_mode": {"type": "string", "enum": ["all_or_nothing", "partial"]},
                "allocation_strategy": {"type": "string", "enum": ["fifo", "lifo", "nearest_expiry", "lowest_cost"]},
                "priority": {"type": "string", "enum": _SEVERITIES},
            },
            ["allocation_mode", "allocation_strategy"],
        ),
        [
            _port("success", "Everything requested was allocated.", True),
            _port("partial", "Only part of the quantity could be allocated."),
            _port("failure", "Nothing could be allocated."),
        ],
        is_async=True,
    ),
    _action(
        "check_inventory",
        "Check Inventory",
        "inventory",
        "Checks whether available stock meets a threshold. Routes to sufficient or insufficient.",
        _schema(
            {
                "product_id": _UUID,
                "source_from_line_item": {"type": "boolean"},
                "warehouse_id": _UUID,
                "threshold": {"type": "integer", "minimum": 0},
            },
            ["threshold"],
        ),
        [
            _port("sufficient", "Available quantity is at or above the threshold.", True),
            _port("insufficient", "Available quantity is below the threshold."),
        ],
    ),
    _action(
        "check_reorder_point",
        "Check Reorder Point",
        "inventory",
        "Compares stock with the product's reorder point. "
        "Routes to needs_reorder when stock has fallen to or below it.",
        _schema(
            {
                "product_id": _UUID,
                "source_from_line_item": {"type": "boolean"},
                "include_reserved": {"type": "boolean"},
            },
            [],
        ),
        [
            _port("ok", "Stock is above the reorder point.", True),
            _port("needs_reorder", "Stock is at or below the reorder point."),
        ],
    ),
    _action(
        "commit_allocation",
        "Commit Allocation",
        "inventory",
        "Turns a pending allocation into a committed stock movement. Usually follows allocate_inventory.",
        _schema(
            {
                "allocation_id": {"type": "string"},
                "source_from_previous": {"type": "boolean"},
            },
            [],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "create_alert",
        "Create Alert",
        "communication",
        "Creates an in-app alert for users and roles. Recipients see it in their alert inbox.",
        _schema(
            {
                "alert_type": {"type": "string", "minLength": 1},
                "severity": {"type": "string", "enum": _SEVERITIES},
                "title": {"type": "string", "minLength": 1, "maxLength": 255},
                "message": {"type": "string", "minLength": 1},
                "recipients": {
                    "type": "object",
                    "properties": {"users": _UUID_LIST, "roles": _UUID_LIST},
                    "required": [],
                },
                "context": {"type": "object"},
                "resolve_prior": {"type": "boolean"},
            },
            ["alert_type", "severity", "title", "message", "recipients"],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "create_entity",
        "Create Entity",
        "data",
        "Creates a record in another table from template values. "
        "Fields may reference the triggering record with {{field}} templates.",
        _schema(
            {
                "target_entity": {"type": "string", "minLength": 3},
                "fields": {"type": "object"},
            },
            ["target_entity", "fields"],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "delay",
        "Delay",
        "control",
        "Pauses the workflow for a fixed duration before continuing.",
        _schema(
            {
                "duration": {"type": "integer", "minimum": 1},
                "unit": {"type": "string", "enum": ["seconds", "minutes", "hours", "days"]},
            },
            ["duration", "unit"],
        ),
        [_port("success", "The delay elapsed.", True)],
        manual=False,
        is_async=True,
    ),
    _action(
        "evaluate_condition",
        "Evaluate Condition",
        "control",
        "Evaluates conditions on the triggering record. Routes to output-true or output-false.",
        _schema(
            {
                "conditions": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "properties": {
                            "field_name": {"type": "string", "minLength": 1},
                            "operator": {
                                "type": "string",
                                "enum": [
                                    "equals",
                                    "not_equals",
                                    "greater_than",
                                    "less_than",
                                    "contains",
                                    "in",
                                    "is_null",
                                    "is_not_null",
                                    "changed_from",
                                    "changed_to",
                                ],
                            },
                            "value": {},
                        },
                        "required": ["field_name", "operator"],
                    },
                },
                "logic_type": {"type": "string", "enum": ["and", "or"]},
            },
            ["conditions"],
        ),
        [
            _port("output-true", "The conditions hold.", True),
            _port("output-false", "The conditions do not hold."),
        ],
    ),
    _action(
        "log_audit_entry",
        "Log Audit Entry",
        "data",
        "Writes an entry to the audit log. Useful to record that a branch of the workflow ran.",
        _schema(
            {
                "message": {"type": "string", "minLength": 1},
                "level": {"type": "string", "enum": ["info", "warning", "error"]},
                "metadata": {"type": "object"},
            },
            ["message"],
        ),
        [_port("success", "The entry was written.", True)],
    ),
    _action(
        "lookup_entity",
        "Lookup Entity",
        "data",
        "Finds a record in another table and adds its fields to the execution context.",
        _schema(
            {
                "entity": {"type": "string", "minLength": 3},
                "filter": {"type": "object"},
                "fields": {"type": "array", "items": {"type": "string"}},
            },
            ["entity", "filter"],
        ),
        [
            _port("found", "A matching record was found.", True),
            _port("not_found", "No record matched the filter."),
        ],
    ),
    _action(
        "release_reservation",
        "Release Reservation",
        "inventory",
        "Releases reserved stock back to available inventory. Used when an order is cancelled.",
        _schema(
            {
                "reservation_id": {"type": "string"},
                "source_from_previous": {"type": "boolean"},
            },
            [],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "reserve_inventory",
        "Reserve Inventory",
        "inventory",
        "Reserves stock for a limited time so it cannot be allocated elsewhere.",
        _schema(
            {
                "product_id": _UUID,
                "quantity": {"type": "integer", "minimum": 1},
                "source_from_line_item": {"type": "boolean"},
                "expires_in_minutes": {"type": "integer", "minimum": 1},
            },
            [],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "seek_approval",
        "Seek Approval",
        "approval",
        "Asks one or more approvers to approve or reject. The workflow waits for the decision.",
        _schema(
            {
                "approvers": {"type": "array", "minItems": 1, "items": _UUID},
                "approval_type": {"type": "string", "enum": ["any", "all", "majority"]},
                "timeout_hours": {"type": "integer", "minimum": 1},
                "message": {"type": "string"},
            },
            ["approvers", "approval_type"],
        ),
        [
            _port("approved", "The request was approved.", True),
            _port("rejected", "The request was rejected."),
            _port("timed_out", "No decision before the timeout."),
        ],
        manual=False,
        is_async=True,
    ),
    _action(
        "send_email",
        "Send Email",
        "communication",
        "Sends an email. Subject and body may use {{field}} templates from the triggering record.",
        _schema(
            {
                "recipients": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 3}},
                "subject": {"type": "string", "minLength": 1, "maxLength": 255},
                "body": {"type": "string", "minLength": 1},
            },
            ["recipients", "subject", "body"],
        ),
        list(_SUCCESS_FAILURE),
        is_async=True,
    ),
    _action(
        "send_notification",
        "Send Notification",
        "communication",
        "Sends an in-app, email or SMS notification to users.",
        _schema(
            {
                "recipients": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}},
                "message": {"type": "string", "minLength": 1},
                "channels": {"type": "array", "items": {"type": "string", "enum": ["in_app", "email", "sms"]}},
                "priority": {"type": "string", "enum": _SEVERITIES},
            },
            ["recipients", "message"],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "transition_status",
        "Transition Status",
        "data",
        "Moves the triggering record to a new status. Fails if the current status does not allow the transition.",
        _schema(
            {
                "field_name": {"type": "string", "minLength": 1},
                "from_status": {"type": "string"},
                "target_status": {"type": "string", "minLength": 1},
            },
            ["field_name", "target_status"],
        ),
        list(_SUCCESS_FAILURE),
    ),
    _action(
        "update_field",
        "Update Field",
        "data",
        "Sets a field on the triggering record or a related one. The value may be a {{field}} template.",
        _schema(
            {
                "target_entity": {"type": "string", "minLength": 3},
                "target_field": {"type": "string", "minLength": 1},
                "new_value": {},
                "field_type": {"type": "string", "enum": ["string", "number", "boolean", "date", "uuid"]},
            },
            ["target_entity", "target_field", "new_value"],
        ),
        list(_SUCCESS_FAILURE),
    ),
)

ACTION_TYPE_NAMES: tuple[str, ...] = tuple(a["type"] for a in ACTION_TYPES)
