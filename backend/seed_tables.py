"""Six table configurations that pass ``validate_table_config`` (Appendix B rules)."""

from __future__ import annotations

from typing import Any


def _col(name: str, header: str, type_: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "header": header, "type": type_, **extra}


def _hidden(name: str) -> dict[str, Any]:
    return {"name": name, "header": name, "hidden": True}


_PAGINATION = {"enabled": True, "page_sizes": [10, 25, 50], "default_page_size": 25}
_DATE = {"type": "date", "format": "yyyy-MM-dd"}
_DATETIME = {"type": "datetime", "format": "yyyy-MM-dd HH:mm"}


def _table(
    title: str,
    source: str,
    schema: str,
    columns: list[dict[str, Any]],
    visual: list[dict[str, Any]],
    *,
    foreign_tables: list[dict[str, Any]] | None = None,
    computed: list[dict[str, Any]] | None = None,
    filters: list[dict[str, Any]] | None = None,
    sort: list[dict[str, Any]] | None = None,
    row_actions: dict[str, Any] | None = None,
    permissions: list[str] | None = None,
) -> dict[str, Any]:
    select: dict[str, Any] = {"columns": columns}
    if foreign_tables:
        select["foreign_tables"] = foreign_tables
    if computed:
        select["client_computed_columns"] = computed
    data_source: dict[str, Any] = {"type": "query", "source": source, "schema": schema, "select": select, "rows": 25}
    if filters:
        data_source["filters"] = filters
    if sort:
        data_source["sort"] = sort
    settings: dict[str, Any] = {"columns": {c["name"]: c for c in visual}, "pagination": _PAGINATION}
    if row_actions:
        settings["row_actions"] = row_actions
    return {
        "title": title,
        "widget_type": "table",
        "visualization": "table",
        "position_x": 0,
        "position_y": 0,
        "width": 12,
        "height": 8,
        "data_source": [data_source],
        "refresh_interval": 300,
        "refresh_mode": "polling",
        "visual_settings": settings,
        "permissions": {"roles": [], "actions": permissions or ["view", "export"]},
    }


TABLE_CONFIGS: tuple[dict[str, Any], ...] = (
    {
        "name": "inventory_items_overview",
        "description": "Stock on hand per product and warehouse",
        "is_system": False,
        "created_by": "alice",
        "config": _table(
            "Inventory Items",
            "inventory_items",
            "inventory",
            [{"name": "id"}, {"name": "quantity"}, {"name": "reserved_quantity"}, {"name": "updated_date"}],
            [
                _hidden("id"),
                _col("quantity", "On Hand", "number", align="right", format={"type": "number", "precision": 0}),
                _col("reserved_quantity", "Reserved", "number", align="right"),
                _col("updated_date", "Last Update", "datetime", format=_DATETIME),
                _col("product_name", "Product", "string"),
                _col("sku", "SKU", "string"),
                _col("warehouse_name", "Warehouse", "string"),
                _col("available", "Available", "computed"),
            ],
            foreign_tables=[
                {
                    "table": "products",
                    "schema": "inventory",
                    "relationship_from": "inventory_items.product_id",
                    "relationship_to": "products.id",
                    "join_type": "inner",
                    "relationship_direction": "child_to_parent",
                    "columns": [{"name": "name", "alias": "product_name"}, {"name": "sku"}],
                },
                {
                    "table": "warehouses",
                    "schema": "inventory",
                    "relationship_from": "inventory_items.warehouse_id",
                    "relationship_to": "warehouses.id",
                    "join_type": "left",
                    "columns": [{"name": "name", "alias": "warehouse_name"}],
                },
            ],
            computed=[{"name": "available", "expression": "quantity - reserved_quantity"}],
            sort=[{"column": "quantity", "direction": "asc", "priority": 1}],
        ),
    },
    {
        "name": "open_sales_orders",
        "description": "Orders that are not yet shipped, newest first",
        "is_system": False,
        "created_by": "bob",
        "config": _table(
            "Open Sales Orders",
            "orders",
            "sales",
            [
                {"name": "id"},
                {"name": "order_number"},
                {"name": "status"},
                {"name": "order_date"},
                {"name": "total_amount"},
            ],
            [
                _hidden("id"),
                _col(
                    "order_number",
                    "Order",
                    "string",
                    order=1,
                    link={"url": "/sales/orders/{id}", "label": "Open order"},
                ),
                _col("status", "Status", "status", order=2),
                _col("order_date", "Ordered", "datetime", order=3, format=_DATETIME),
                _col(
                    "total_amount",
                    "Total",
                    "number",
                    order=4,
                    align="right",
                    format={"type": "currency", "precision": 2, "currency": "USD"},
                ),
                _col("customer_name", "Customer", "string", order=5),
            ],
            foreign_tables=[
                {
                    "table": "customers",
                    "schema": "sales",
                    "relationship_from": "orders.customer_id",
                    "relationship_to": "customers.id",
                    "join_type": "left",
                    "columns": [{"name": "name", "alias": "customer_name"}],
                }
            ],
            filters=[
                {"column": "status", "operator": "in", "value": ["pending", "confirmed", "approved"], "label": "Status"}
            ],
            sort=[{"column": "order_date", "direction": "desc"}],
            row_actions={"view": {"name": "view", "label": "View", "action_type": "link", "url": "/sales/orders/{id}"}},
            permissions=["view", "edit", "export"],
        ),
    },
    {
        "name": "customer_directory",
        "description": "All active customers with contact details",
        "is_system": True,
        "created_by": "admin",
        "config": _table(
            "Customers",
            "customers",
            "sales",
            [{"name": "id"}, {"name": "name"}, {"name": "email"}, {"name": "phone"}, {"name": "credit_limit"}],
            [
                _hidden("id"),
                _col("name", "Customer", "string", sortable=True, filterable=True),
                _col("email", "Email", "string"),
                _col("phone", "Phone", "string"),
                _col("credit_limit", "Credit Limit", "number", format={"type": "currency", "precision": 2}),
            ],
            filters=[{"column": "is_active", "operator": "eq", "value": True}],
            sort=[{"column": "name", "direction": "asc"}],
        ),
    },
    {
        "name": "employee_roster",
        "description": "Employees with their department and hire date",
        "is_system": False,
        "created_by": "admin",
        "config": _table(
            "Employee Roster",
            "employees",
            "hr",
            [
                {"name": "id"},
                {"name": "employee_number"},
                {"name": "job_title"},
                {"name": "hire_date"},
                {"name": "status"},
            ],
            [
                _hidden("id"),
                _col("employee_number", "Employee No.", "string"),
                _col("job_title", "Job Title", "string", editable={"type": "text", "placeholder": "Job title"}),
                _col("hire_date", "Hired", "datetime", format=_DATE),
                _col("status", "Status", "status"),
                _col("department_name", "Department", "string"),
            ],
            foreign_tables=[
                {
                    "table": "departments",
                    "schema": "hr",
                    "relationship_from": "employees.department_id",
                    "relationship_to": "departments.id",
                    "join_type": "inner",
                    "columns": [{"name": "name", "alias": "department_name"}],
                }
            ],
            sort=[{"column": "hire_date", "direction": "desc"}],
            permissions=["view", "edit"],
        ),
    },
    {
        "name": "overdue_invoices",
        "description": "Unpaid invoices past their due date",
        "is_system": False,
        "created_by": "bob",
        "config": _table(
            "Overdue Invoices",
            "invoices",
            "sales",
            [{"name": "id"}, {"name": "invoice_number"}, {"name": "amount"}, {"name": "due_date"}, {"name": "status"}],
            [
                _hidden("id"),
                _col("invoice_number", "Invoice", "string"),
                _col("amount", "Amount", "number", align="right", format={"type": "currency", "precision": 2}),
                _col("due_date", "Due", "datetime", format={"type": "date", "format": "MM/dd/yyyy"}),
                _col("status", "Status", "status"),
                _col("days_overdue", "Days Overdue", "computed"),
            ],
            computed=[{"name": "days_overdue", "expression": "daysSince(due_date)"}],
            filters=[
                {"column": "status", "operator": "neq", "value": "paid"},
                {"column": "due_date", "operator": "lt", "value": "now", "dynamic": True},
            ],
            sort=[{"column": "due_date", "direction": "asc"}],
        ),
    },
    {
        "name": "monthly_sales_chart",
        "description": "Order totals per month",
        "is_system": False,
        "created_by": "bob",
        "config": {
            "title": "Monthly Sales",
            "widget_type": "chart",
            "visualization": "bar",
            "position_x": 0,
            "position_y": 8,
            "width": 6,
            "height": 6,
            "data_source": [
                {
                    "type": "query",
                    "source": "orders",
                    "schema": "sales",
                    "select": {"columns": [{"name": "order_date"}, {"name": "total_amount"}]},
                    "metrics": [
                        {"name": "revenue", "function": "sum", "column": "total_amount"},
                        {"name": "order_count", "function": "count", "column": "id"},
                    ],
                    "group_by": [{"column": "order_date", "interval": "month", "alias": "month"}],
                }
            ],
            "refresh_interval": 3600,
            "refresh_mode": "polling",
            "visual_settings": {"columns": {}},
            "permissions": {"roles": [], "actions": ["view"]},
        },
    },
)
