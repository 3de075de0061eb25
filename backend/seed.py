"""Seed data and its fixed ids, importable by tests and demos.

Every id is a UUIDv5 of a readable key under ``SEED_NAMESPACE``, so it never changes
between runs and machines. The constants below are read-only views.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from backend.seed_action_types import ACTION_TYPE_NAMES, ACTION_TYPES
from backend.seed_schemas import FOREIGN_KEYS, SCHEMAS
from backend.seed_tables import TABLE_CONFIGS

SEED_NAMESPACE = uuid.UUID("7d1f4c0e-3b8a-4c55-9a41-2f6e8d3c9b10")
SEED_TIME = "2025-01-06T09:00:00Z"


def seed_id(kind: str, key: str) -> str:
    """The fixed UUID of seeded object ``kind``/``key`` (e.g. ``seed_id("user", "alice")``)."""
    return str(uuid.uuid5(SEED_NAMESPACE, f"{kind}:{key}"))


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


# --- roles and users ---------------------------------------------------------------

ROLES: Mapping[str, str] = _frozen(
    {
        name: seed_id("role", name)
        for name in ("admin", "inventory_manager", "warehouse_staff", "sales_manager", "sales_rep")
    }
)
ROLE_DESCRIPTIONS: Mapping[str, str] = _frozen(
    {
        "admin": "Full administrative access",
        "inventory_manager": "Manages stock levels, reorders and warehouses",
        "warehouse_staff": "Picks, packs and counts stock",
        "sales_manager": "Approves large orders and manages the sales team",
        "sales_rep": "Creates and follows up sales orders",
    }
)


@dataclass(frozen=True, slots=True)
class SeedUser:
    id: str
    username: str
    first_name: str
    last_name: str
    email: str
    roles: tuple[str, ...]


USERS: Mapping[str, SeedUser] = _frozen(
    {
        "admin": SeedUser(seed_id("user", "admin"), "admin", "Ada", "Admin", "admin@ichor.example", ("admin",)),
        "alice": SeedUser(
            seed_id("user", "alice"),
            "alice",
            "Alice",
            "Nguyen",
            "alice.nguyen@ichor.example",
            ("inventory_manager", "warehouse_staff"),
        ),
        "bob": SeedUser(
            seed_id("user", "bob"),
            "bob",
            "Bob",
            "Martinez",
            "bob.martinez@ichor.example",
            ("sales_manager", "sales_rep"),
        ),
    }
)
ADMIN_ID = USERS["admin"].id
ALICE_ID = USERS["alice"].id
BOB_ID = USERS["bob"].id

TOKENS: Mapping[str, str] = _frozen({"demo-admin": ADMIN_ID, "demo-alice": ALICE_ID, "demo-bob": BOB_ID})
"""Demo bearer tokens → user id. Send as ``Authorization: Bearer demo-alice``."""

# --- entities and trigger types -------------------------------------------------------

ENTITY_TYPES: Mapping[str, str] = _frozen(
    {"table": seed_id("entity_type", "table"), "view": seed_id("entity_type", "view")}
)

_ENTITY_NAMES = (
    "core.users",
    "hr.employees",
    "hr.timesheets",
    "inventory.inventory_items",
    "inventory.inventory_transactions",
    "inventory.products",
    "inventory.warehouses",
    "sales.customers",
    "sales.invoices",
    "sales.order_line_items",
    "sales.orders",
)
ENTITIES: Mapping[str, str] = _frozen({name: seed_id("entity", name) for name in _ENTITY_NAMES})
"""``"schema.table"`` → entity id."""
INACTIVE_ENTITIES = frozenset({"hr.timesheets"})

TRIGGER_TYPE_DESCRIPTIONS: Mapping[str, str] = _frozen(
    {
        "on_create": "Runs when a record is created",
        "on_update": "Runs when a record is updated",
        "on_delete": "Runs when a record is deleted",
        "scheduled": "Runs on a schedule (cron expression in trigger_conditions)",
        "manual": "Runs only when started by a user",
    }
)
TRIGGER_TYPES: Mapping[str, str] = _frozen({name: seed_id("trigger_type", name) for name in TRIGGER_TYPE_DESCRIPTIONS})

# --- workflow rules -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeedAction:
    key: str
    name: str
    action_type: str
    config: Mapping[str, Any]
    description: str = ""
    is_active: bool = True


@dataclass(frozen=True, slots=True)
class SeedEdge:
    source: str | None  # action key; None for the start edge
    target: str
    edge_type: str
    source_output: str | None = None


@dataclass(frozen=True, slots=True)
class SeedRule:
    key: str
    name: str
    description: str
    entity: str
    trigger_type: str
    actions: tuple[SeedAction, ...]
    edges: tuple[SeedEdge, ...]
    trigger_conditions: Mapping[str, Any] | None = None
    is_active: bool = True
    created_by: str = "admin"

    @property
    def id(self) -> str:
        return seed_id("rule", self.key)

    def action_id(self, action_key: str) -> str:
        return seed_id("action", f"{self.key}/{action_key}")


def _start(target: str) -> SeedEdge:
    return SeedEdge(None, target, "start")


def _seq(source: str, target: str, port: str | None = None) -> SeedEdge:
    return SeedEdge(source, target, "sequence", port)


_INVENTORY_MANAGER = ROLES["inventory_manager"]

RULES: tuple[SeedRule, ...] = (
    SeedRule(
        "low_stock",
        "Low Stock Alert",
        "Alert inventory managers when an item falls to its reorder point",
        "inventory.inventory_items",
        "on_update",
        (
            SeedAction("check", "Check Reorder Point", "check_reorder_point", {"source_from_line_item": False}),
            SeedAction(
                "alert",
                "Alert Inventory Team",
                "create_alert",
                {
                    "alert_type": "low_stock",
                    "severity": "high",
                    "title": "Low stock: {{product_name}}",
                    "message": "{{product_name}} is at {{quantity}} units, at or below its reorder point.",
                    "recipients": {"users": [ALICE_ID], "roles": [_INVENTORY_MANAGER]},
                    "resolve_prior": True,
                },
            ),
            SeedAction("audit", "Log Stock OK", "log_audit_entry", {"message": "Stock level OK", "level": "info"}),
        ),
        (_start("check"), _seq("check", "alert", "needs_reorder"), _seq("check", "audit", "ok")),
        trigger_conditions={"field_conditions": [{"field_name": "quantity", "operator": "changed"}]},
    ),
    SeedRule(
        "order_allocation",
        "New Order Allocation",
        "Check stock for every new order and allocate it, or alert sales when stock is short",
        "sales.orders",
        "on_create",
        (
            SeedAction("check", "Check Stock", "check_inventory", {"source_from_line_item": True, "threshold": 1}),
            SeedAction(
                "allocate",
                "Allocate Stock",
                "allocate_inventory",
                {"source_from_line_item": True, "allocation_mode": "all_or_nothing", "allocation_strategy": "fifo"},
            ),
            SeedAction("commit", "Commit Allocation", "commit_allocation", {"source_from_previous": True}),
            SeedAction(
                "notify",
                "Notify Sales Rep",
                "send_notification",
                {
                    "recipients": ["{{created_by}}"],
                    "message": "Order {{order_number}} is allocated",
                    "channels": ["in_app"],
                },
            ),
            SeedAction(
                "short",
                "Alert Stock Shortage",
                "create_alert",
                {
                    "alert_type": "stock_shortage",
                    "severity": "critical",
                    "title": "Cannot fulfil order {{order_number}}",
                    "message": "Not enough stock to fulfil order {{order_number}}.",
                    "recipients": {"users": [BOB_ID], "roles": []},
                },
            ),
        ),
        (
            _start("check"),
            _seq("check", "allocate", "sufficient"),
            _seq("allocate", "commit", "success"),
            _seq("commit", "notify", "success"),
            _seq("check", "short", "insufficient"),
        ),
    ),
    SeedRule(
        "large_order",
        "Large Order Approval",
        "Orders over 10,000 need a sales manager's approval",
        "sales.orders",
        "on_create",
        (
            SeedAction(
                "cond",
                "Is Large Order",
                "evaluate_condition",
                {
                    "conditions": [{"field_name": "total_amount", "operator": "greater_than", "value": 10000}],
                    "logic_type": "and",
                },
            ),
            SeedAction(
                "approve",
                "Manager Approval",
                "seek_approval",
                {
                    "approvers": [BOB_ID],
                    "approval_type": "any",
                    "timeout_hours": 48,
                    "message": "Approve order {{order_number}}?",
                },
            ),
            SeedAction(
                "approved", "Mark Approved", "transition_status", {"field_name": "status", "target_status": "approved"}
            ),
            SeedAction(
                "rejected", "Mark Rejected", "transition_status", {"field_name": "status", "target_status": "rejected"}
            ),
            SeedAction(
                "email",
                "Email Customer",
                "send_email",
                {
                    "recipients": ["{{customer_email}}"],
                    "subject": "Your order {{order_number}}",
                    "body": "We could not accept order {{order_number}}. A sales representative will contact you.",
                },
            ),
            SeedAction(
                "confirm", "Auto Confirm", "transition_status", {"field_name": "status", "target_status": "confirmed"}
            ),
        ),
        (
            _start("cond"),
            _seq("cond", "approve", "output-true"),
            _seq("approve", "approved", "approved"),
            _seq("approve", "rejected", "rejected"),
            _seq("rejected", "email", "success"),
            _seq("cond", "confirm", "output-false"),
        ),
        created_by="bob",
    ),
    SeedRule(
        "order_cancelled",
        "Release Stock On Cancel",
        "Release reserved stock when an order is cancelled",
        "sales.orders",
        "on_update",
        (
            SeedAction(
                "cond",
                "Was Cancelled",
                "evaluate_condition",
                {"conditions": [{"field_name": "status", "operator": "changed_to", "value": "cancelled"}]},
            ),
            SeedAction("release", "Release Reservation", "release_reservation", {"source_from_previous": False}),
            SeedAction("audit", "Audit Release", "log_audit_entry", {"message": "Released stock for {{order_number}}"}),
        ),
        (_start("cond"), _seq("cond", "release", "output-true"), SeedEdge("release", "audit", "always")),
    ),
    SeedRule(
        "welcome_customer",
        "Welcome New Customer",
        "Send a welcome email to every new customer",
        "sales.customers",
        "on_create",
        (
            SeedAction(
                "email",
                "Welcome Email",
                "send_email",
                {
                    "recipients": ["{{email}}"],
                    "subject": "Welcome to Ichor Supply",
                    "body": "Hello {{name}}, welcome aboard!",
                },
            ),
        ),
        (_start("email"),),
        created_by="bob",
    ),
    SeedRule(
        "invoice_overdue",
        "Invoice Overdue Reminder",
        "Every morning, remind customers of overdue invoices and escalate after three days",
        "sales.invoices",
        "scheduled",
        (
            SeedAction(
                "lookup",
                "Find Customer",
                "lookup_entity",
                {"entity": "sales.customers", "filter": {"id": "{{customer_id}}"}, "fields": ["name", "email"]},
            ),
            SeedAction(
                "email",
                "Reminder Email",
                "send_email",
                {
                    "recipients": ["{{email}}"],
                    "subject": "Invoice {{invoice_number}} is overdue",
                    "body": "Invoice {{invoice_number}} was due on {{due_date}}.",
                },
            ),
            SeedAction("wait", "Wait Three Days", "delay", {"duration": 3, "unit": "days"}),
            SeedAction(
                "escalate",
                "Escalate To Sales",
                "create_alert",
                {
                    "alert_type": "invoice_overdue",
                    "severity": "medium",
                    "title": "Invoice {{invoice_number}} still unpaid",
                    "message": "Invoice {{invoice_number}} is still unpaid three days after the reminder.",
                    "recipients": {"users": [BOB_ID], "roles": [ROLES["sales_manager"]]},
                },
            ),
        ),
        (
            _start("lookup"),
            _seq("lookup", "email", "found"),
            SeedEdge("email", "wait", "always"),
            _seq("wait", "escalate"),
        ),
        trigger_conditions={
            "schedule": "0 8 * * *",
            "field_conditions": [{"field_name": "status", "operator": "equals", "value": "overdue"}],
        },
    ),
    SeedRule(
        "employee_onboarding",
        "Employee Onboarding",
        "Create a user account for new employees and tell HR",
        "hr.employees",
        "on_create",
        (
            SeedAction(
                "user",
                "Create User Account",
                "create_entity",
                {"target_entity": "core.users", "fields": {"username": "{{employee_number}}", "email": "{{email}}"}},
            ),
            SeedAction(
                "notify",
                "Notify HR",
                "send_notification",
                {"recipients": ["role:admin"], "message": "Account created for {{employee_number}}", "priority": "low"},
            ),
            SeedAction("audit", "Audit Onboarding", "log_audit_entry", {"message": "Onboarded {{employee_number}}"}),
        ),
        (_start("user"), _seq("user", "notify", "success"), _seq("notify", "audit", "success")),
    ),
    SeedRule(
        "product_deleted",
        "Product Deletion Audit",
        "Record every product deletion in the audit log",
        "inventory.products",
        "on_delete",
        (
            SeedAction(
                "audit",
                "Audit Deletion",
                "log_audit_entry",
                {"message": "Product {{sku}} deleted", "level": "warning", "metadata": {"source": "workflow"}},
            ),
            SeedAction(
                "field",
                "Flag Inventory",
                "update_field",
                {
                    "target_entity": "inventory.inventory_items",
                    "target_field": "quantity",
                    "new_value": 0,
                    "field_type": "number",
                },
                is_active=False,
            ),
        ),
        (_start("audit"), _seq("audit", "field", "success")),
        is_active=False,
    ),
)
RULE_IDS: Mapping[str, str] = _frozen({rule.name: rule.id for rule in RULES})
"""Rule name → rule id."""

# --- alerts ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SeedAlert:
    key: str
    alert_type: str
    severity: str
    status: str
    title: str
    message: str
    created: str
    users: tuple[str, ...] = ()
    roles: tuple[str, ...] = ()
    rule_key: str | None = None
    entity: str | None = None
    acknowledged_by: tuple[str, ...] = ()
    context: Mapping[str, Any] | None = None

    @property
    def id(self) -> str:
        return seed_id("alert", self.key)


ALERTS: tuple[SeedAlert, ...] = (
    SeedAlert(
        "low_stock_widget",
        "low_stock",
        "high",
        "active",
        "Low stock: Widget A",
        "Widget A is at 4 units, at or below its reorder point of 10.",
        "2025-01-10T08:15:00Z",
        users=(ALICE_ID,),
        roles=(_INVENTORY_MANAGER,),
        rule_key="low_stock",
        entity="inventory.inventory_items",
        context={"product_name": "Widget A", "quantity": 4, "reorder_point": 10},
    ),
    SeedAlert(
        "low_stock_gadget",
        "low_stock",
        "medium",
        "acknowledged",
        "Low stock: Gadget Pro",
        "Gadget Pro is at 12 units, at or below its reorder point of 15.",
        "2025-01-09T14:02:00Z",
        roles=(_INVENTORY_MANAGER,),
        rule_key="low_stock",
        entity="inventory.inventory_items",
        acknowledged_by=(ALICE_ID,),
    ),
    SeedAlert(
        "low_stock_bolts",
        "low_stock",
        "low",
        "active",
        "Low stock: M6 Bolts",
        "M6 Bolts are at 480 units, at or below their reorder point of 500.",
        "2025-01-08T07:30:00Z",
        users=(ALICE_ID,),
        rule_key="low_stock",
        entity="inventory.inventory_items",
    ),
    SeedAlert(
        "shortage_so1042",
        "stock_shortage",
        "critical",
        "active",
        "Cannot fulfil order SO-1042",
        "Not enough stock to fulfil order SO-1042.",
        "2025-01-10T10:45:00Z",
        users=(BOB_ID,),
        rule_key="order_allocation",
        entity="sales.orders",
    ),
    SeedAlert(
        "approval_so1043",
        "approval_required",
        "high",
        "active",
        "Order SO-1043 needs approval",
        "Order SO-1043 for 18,250.00 is waiting for a sales manager's approval.",
        "2025-01-10T11:05:00Z",
        users=(BOB_ID,),
        roles=(ROLES["sales_manager"],),
        rule_key="large_order",
        entity="sales.orders",
    ),
    SeedAlert(
        "invoice_inv2001",
        "invoice_overdue",
        "medium",
        "resolved",
        "Invoice INV-2001 still unpaid",
        "Invoice INV-2001 is still unpaid three days after the reminder.",
        "2025-01-07T08:00:00Z",
        users=(BOB_ID,),
        rule_key="invoice_overdue",
        entity="sales.invoices",
    ),
    SeedAlert(
        "invoice_inv2002",
        "invoice_overdue",
        "low",
        "dismissed",
        "Invoice INV-2002 still unpaid",
        "Invoice INV-2002 is still unpaid three days after the reminder.",
        "2025-01-06T08:00:00Z",
        users=(ALICE_ID,),
        rule_key="invoice_overdue",
        entity="sales.invoices",
    ),
    SeedAlert(
        "system_backup",
        "system",
        "critical",
        "active",
        "Nightly backup failed",
        "The nightly database backup did not complete.",
        "2025-01-10T03:00:00Z",
        users=(ADMIN_ID,),
    ),
)
ALERT_IDS: Mapping[str, str] = _frozen({alert.key: alert.id for alert in ALERTS})
"""Alert key → alert id (keys: low_stock_widget, shortage_so1042, system_backup, …)."""

TABLE_CONFIG_IDS: Mapping[str, str] = _frozen(
    {cfg["name"]: seed_id("table_config", cfg["name"]) for cfg in TABLE_CONFIGS}
)
"""Table config name → id."""

__all__ = [
    "ACTION_TYPES",
    "ACTION_TYPE_NAMES",
    "ADMIN_ID",
    "ALERTS",
    "ALERT_IDS",
    "ALICE_ID",
    "BOB_ID",
    "ENTITIES",
    "ENTITY_TYPES",
    "FOREIGN_KEYS",
    "ROLES",
    "RULES",
    "RULE_IDS",
    "SCHEMAS",
    "TABLE_CONFIGS",
    "TABLE_CONFIG_IDS",
    "TOKENS",
    "TRIGGER_TYPES",
    "USERS",
    "seed_id",
]
